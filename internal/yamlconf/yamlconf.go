package yamlconf

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
)

// Deprecation is an old key a config file used: Path is where it stood,
// Use the key that replaces it.
type Deprecation struct {
	Path string
	Use  string
	Line int
}

func (d Deprecation) String() string {
	return fmt.Sprintf("%s (line %d) is deprecated: use %s", d.Path, d.Line, d.Use)
}

// LogDeprecations warns once for each deprecated key in ds.
func LogDeprecations(lg *zap.Logger, ds []Deprecation) {
	for _, d := range ds {
		lg.Warn("deprecated config key", zap.String("key", d.Path), zap.String("use", d.Use), zap.Int("line", d.Line))
	}
}

// Load reads the YAML file at path and decodes it strictly into v (see
// Decode); errors start with "config file PATH: ".
func Load(path string, v any) ([]Deprecation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	ds, err := Decode(data, v)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return ds, nil
}

// Decode decodes the YAML document data into v, a pointer to a struct,
// strictly: a key that names no field, at any depth, and a value the
// field's type cannot hold are errors naming the key's YAML path. A key a
// field lists in its `deprecated:"old"` tag decodes into that field and
// is returned as a Deprecation; giving both is an error. An empty
// document leaves v as it is.
func Decode(data []byte, v any) ([]Deprecation, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, oneLine(err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	w := walker{}
	if err := w.walk(doc.Content[0], reflect.TypeOf(v), ""); err != nil {
		return nil, err
	}
	if err := doc.Decode(v); err != nil {
		return nil, oneLine(err)
	}
	return w.deprecated, nil
}

// oneLine keeps a yaml error, which may list several problems on separate
// lines, on one line.
func oneLine(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if te, ok := err.(*yaml.TypeError); ok {
		msg = strings.Join(te.Errors, "; ")
	}
	return fmt.Errorf("%s", strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", ";")), " "))
}

type walker struct {
	deprecated []Deprecation
	visits     int
}

// maxVisits bounds the nodes a walk visits (a config has hundreds):
// aliases can make a small document expand past any config's size (the
// decoder has its own guard, but the walk runs first).
const maxVisits = 100_000

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// walk checks node n against type t, which it decodes into, at YAML path
// path, and renames deprecated keys to the keys that replace them. The
// decoder's KnownFields cannot do this: it does not reach into custom
// unmarshalers and its errors name Go types, not paths.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if w.visits++; w.visits > maxVisits {
		return fmt.Errorf("%s: the document expands to more than %d nodes (aliases)", orRoot(path), maxVisits)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	custom := reflect.PointerTo(t).Implements(unmarshalerType)
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		if err := w.mapping(n, t, path); err != nil {
			return err
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isMerge(k) {
				if err := w.merge(v, t, path); err != nil {
					return err
				}
				continue
			}
			if err := w.walk(v, t.Elem(), at(path, k.Value)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, item := range n.Content {
			if err := w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		custom = true // a scalar, or a node of the wrong kind: decode it to check it
	}
	if !custom {
		return nil
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		return pathError(path, n.Line, err)
	}
	return nil
}

// mapping checks the keys of a mapping that decodes into struct t and
// renames its deprecated keys.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) error {
	fields, old := yamlFields(t)
	if len(fields) == 0 {
		return nil // a scalar-only type with its own unmarshaler
	}
	given := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		given[n.Content[i].Value] = n.Content[i]
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			if err := w.merge(v, t, path); err != nil {
				return err
			}
			continue
		}
		if use, ok := old[k.Value]; ok {
			if nk, both := given[use]; both {
				return fmt.Errorf("%s: %s (line %d) and %s (line %d) both given: %s is the deprecated spelling of %s, keep only %s",
					orRoot(path), use, nk.Line, k.Value, k.Line, k.Value, use, use)
			}
			w.deprecated = append(w.deprecated, Deprecation{Path: at(path, k.Value), Use: at(path, use), Line: k.Line})
			k.Value = use
		}
		ft, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("%s: unknown key (line %d; known keys: %s)", at(path, k.Value), k.Line, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		if err := w.walk(v, ft, at(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

// merge checks the mapping (or list of mappings) of a `<<` merge key as
// part of the mapping it is merged into.
func (w *walker) merge(v *yaml.Node, t reflect.Type, path string) error {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind != yaml.SequenceNode {
		return w.walk(v, t, path)
	}
	for _, m := range v.Content {
		if err := w.walk(m, t, path); err != nil {
			return err
		}
	}
	return nil
}

func isMerge(k *yaml.Node) bool { return k.Value == "<<" && k.Tag == "!!merge" }

// at is the YAML path of key under path.
func at(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

// pathError names the path and line of a value the decoder refused.
func pathError(path string, line int, err error) error {
	msg := oneLine(err).Error()
	// The decoder's own errors start with the line; say it once, at the end.
	if i := strings.Index(msg, ": "); i > 0 && strings.HasPrefix(msg, "line ") {
		msg = msg[i+2:]
	}
	return fmt.Errorf("%s: %s (line %d)", orRoot(path), msg, line)
}

// yamlFields maps the YAML keys of struct t to their field types, as
// yaml.v3 names them (the tag's name, else the lower-cased field name;
// "-" skips a field), and the deprecated keys of its fields (tag
// `deprecated:"old[,older]"`) to the keys that replace them.
func yamlFields(t reflect.Type) (fields map[string]reflect.Type, old map[string]string) {
	fields, old = map[string]reflect.Type{}, map[string]string{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
			continue
		case opts == "inline":
			ff, fo := yamlFields(f.Type)
			maps.Copy(fields, ff)
			maps.Copy(old, fo)
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
		if d := f.Tag.Get("deprecated"); d != "" {
			for o := range strings.SplitSeq(d, ",") {
				old[o] = name
			}
		}
	}
	return fields, old
}
