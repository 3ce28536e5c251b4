package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Schema is a compiled schema.
type Schema struct {
	types       []string
	properties  map[string]*Schema
	required    []string
	additional  *bool   // nil = allowed
	additionalS *Schema // additionalProperties as a schema
	items       *Schema
	enum        []any
	minLength   *int
	maxLength   *int
	minItems    *int
	maxItems    *int
	minimum     *float64
	maximum     *float64
}

type raw struct {
	Type                 json.RawMessage            `json:"type"`
	Properties           map[string]json.RawMessage `json:"properties"`
	Required             []string                   `json:"required"`
	AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	Items                json.RawMessage            `json:"items"`
	Enum                 []json.RawMessage          `json:"enum"`
	MinLength            *int                       `json:"minLength"`
	MaxLength            *int                       `json:"maxLength"`
	MinItems             *int                       `json:"minItems"`
	MaxItems             *int                       `json:"maxItems"`
	Minimum              *float64                   `json:"minimum"`
	Maximum              *float64                   `json:"maximum"`
}

var knownTypes = []string{"object", "array", "string", "integer", "number", "boolean", "null"}

// Compile parses a schema document. An empty document is the schema of an
// object with any properties.
func Compile(doc []byte) (*Schema, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return &Schema{types: []string{"object"}}, nil
	}
	return compile(doc, "")
}

// MustCompile is Compile for schemas known at build time; it panics on an
// invalid one.
func MustCompile(doc string) *Schema {
	s, err := Compile([]byte(doc))
	if err != nil {
		panic(err)
	}
	return s
}

func compile(doc []byte, at string) (*Schema, error) {
	if t := bytes.TrimSpace(doc); string(t) == "true" || string(t) == "{}" {
		return &Schema{}, nil
	}
	var r raw
	if err := json.Unmarshal(doc, &r); err != nil {
		return nil, fmt.Errorf("schema%s: %w", where(at), err)
	}
	s := &Schema{
		required:  r.Required,
		minLength: r.MinLength, maxLength: r.MaxLength,
		minItems: r.MinItems, maxItems: r.MaxItems,
		minimum: r.Minimum, maximum: r.Maximum,
	}
	if len(r.Type) > 0 {
		var one string
		if err := json.Unmarshal(r.Type, &one); err == nil {
			s.types = []string{one}
		} else if err := json.Unmarshal(r.Type, &s.types); err != nil {
			return nil, fmt.Errorf("schema%s: type must be a string or a list of strings", where(at))
		}
		for _, t := range s.types {
			if !slices.Contains(knownTypes, t) {
				return nil, fmt.Errorf("schema%s: unknown type %q", where(at), t)
			}
		}
	}
	if len(r.Properties) > 0 {
		s.properties = make(map[string]*Schema, len(r.Properties))
		for name, p := range r.Properties {
			ps, err := compile(p, join(at, name))
			if err != nil {
				return nil, err
			}
			s.properties[name] = ps
		}
	}
	if len(r.AdditionalProperties) > 0 {
		var b bool
		if err := json.Unmarshal(r.AdditionalProperties, &b); err == nil {
			s.additional = &b
		} else {
			as, err := compile(r.AdditionalProperties, at+".*")
			if err != nil {
				return nil, err
			}
			s.additionalS = as
		}
	}
	if len(r.Items) > 0 {
		is, err := compile(r.Items, at+"[]")
		if err != nil {
			return nil, err
		}
		s.items = is
	}
	for _, e := range r.Enum {
		v, err := decode(e)
		if err != nil {
			return nil, fmt.Errorf("schema%s: enum: %w", where(at), err)
		}
		s.enum = append(s.enum, v)
	}
	return s, nil
}

func where(at string) string {
	if at == "" {
		return ""
	}
	return " at " + at
}

// ValidationError is the first violation found.
type ValidationError struct {
	// Path is the field path ("file_path", "todos[1].status"); "" is the
	// arguments object itself.
	Path string
	// Reason says what is wrong, without a trailing period.
	Reason string
}

// Error returns "<path>: <reason>", or the reason alone at the root.
func (e *ValidationError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// ErrNotJSON wraps a parse failure of the document.
var ErrNotJSON = errors.New("not valid JSON")

// ValidateJSON parses doc, validates it and returns the coerced document
// re-encoded as JSON (identical bytes when nothing was coerced). A parse
// failure wraps ErrNotJSON; a violation is a *ValidationError.
func (s *Schema) ValidateJSON(doc []byte) ([]byte, error) {
	v, err := decode(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	out, changed, verr := s.validate(v, "")
	if verr != nil {
		return nil, verr
	}
	if !changed {
		return doc, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Validate validates a value decoded with Decode and returns it coerced.
func (s *Schema) Validate(v any) (any, error) {
	out, _, err := s.validate(v, "")
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Decode parses JSON keeping numbers as json.Number, the form Validate
// expects. It rejects trailing data.
func Decode(doc []byte) (any, error) { return decode(doc) }

func decode(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the top-level value")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

func fail(path, format string, args ...any) *ValidationError {
	return &ValidationError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// validate checks v at path and returns it (coerced) and whether coercion
// changed anything.
func (s *Schema) validate(v any, path string) (any, bool, *ValidationError) {
	changed := false
	if len(s.types) > 0 {
		cv, ok := s.coerceType(v)
		if !ok {
			return nil, false, fail(path, "must be %s (got %s)", typeList(s.types), typeName(v))
		}
		if !sameValue(cv, v) {
			v, changed = cv, true
		}
	}
	if len(s.enum) > 0 && !slices.ContainsFunc(s.enum, func(e any) bool { return equal(e, v) }) {
		return nil, false, fail(path, "must be one of %s (got %s)", enumList(s.enum), render(v))
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if s.minLength != nil && n < *s.minLength {
			if *s.minLength == 1 {
				return nil, false, fail(path, "must not be empty")
			}
			return nil, false, fail(path, "must be at least %d characters long (got %d)", *s.minLength, n)
		}
		if s.maxLength != nil && n > *s.maxLength {
			return nil, false, fail(path, "must be at most %d characters long (got %d)", *s.maxLength, n)
		}
	case json.Number:
		f, err := x.Float64()
		if err == nil {
			if s.minimum != nil && f < *s.minimum {
				return nil, false, fail(path, "must be ≥ %s (got %s)", num(*s.minimum), x)
			}
			if s.maximum != nil && f > *s.maximum {
				return nil, false, fail(path, "must be ≤ %s (got %s)", num(*s.maximum), x)
			}
		}
	case []any:
		if s.minItems != nil && len(x) < *s.minItems {
			return nil, false, fail(path, "must have at least %d items (got %d)", *s.minItems, len(x))
		}
		if s.maxItems != nil && len(x) > *s.maxItems {
			return nil, false, fail(path, "must have at most %d items (got %d)", *s.maxItems, len(x))
		}
		if s.items != nil {
			var out []any
			for i, e := range x {
				ce, ch, err := s.items.validate(e, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, false, err
				}
				if ch {
					if out == nil {
						out = slices.Clone(x)
					}
					out[i] = ce
				}
			}
			if out != nil {
				v, changed = out, true
			}
		}
	case map[string]any:
		for _, name := range s.required {
			if _, ok := x[name]; !ok {
				return nil, false, fail(join(path, name), "required field is missing")
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out map[string]any
		for _, k := range keys {
			ps := s.properties[k]
			if ps == nil {
				switch {
				case s.additionalS != nil:
					ps = s.additionalS
				case s.additional != nil && !*s.additional:
					return nil, false, fail(join(path, k), "unknown field (allowed: %s)", fieldList(s.properties))
				default:
					continue
				}
			}
			// An optional field sent as null counts as absent unless the
			// schema allows null.
			if x[k] == nil && !slices.Contains(s.required, k) && len(ps.types) > 0 && !slices.Contains(ps.types, "null") {
				if out == nil {
					out = cloneMap(x)
				}
				delete(out, k)
				continue
			}
			cv, ch, err := ps.validate(x[k], join(path, k))
			if err != nil {
				return nil, false, err
			}
			if ch {
				if out == nil {
					out = cloneMap(x)
				}
				out[k] = cv
			}
		}
		if out != nil {
			v, changed = out, true
		}
	}
	return v, changed, nil
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// coerceType returns v, or v converted to one of the schema's types.
func (s *Schema) coerceType(v any) (any, bool) {
	for _, t := range s.types {
		if isType(v, t) {
			return v, true
		}
	}
	for _, t := range s.types {
		switch t {
		case "integer":
			switch x := v.(type) {
			case json.Number:
				if f, err := x.Float64(); err == nil && f == math.Trunc(f) && !math.IsInf(f, 0) && math.Abs(f) < 1<<53 {
					return json.Number(strconv.FormatInt(int64(f), 10)), true
				}
			case string:
				if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
					return json.Number(strconv.FormatInt(n, 10)), true
				}
			}
		case "boolean":
			if x, ok := v.(string); ok {
				switch x {
				case "true":
					return true, true
				case "false":
					return false, true
				}
			}
		}
	}
	return nil, false
}

func isType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil
	}
	return false
}

func typeName(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func typeList(ts []string) string {
	words := make([]string, len(ts))
	for i, t := range ts {
		switch t {
		case "object", "array", "integer":
			words[i] = "an " + t
		case "null":
			words[i] = "null"
		default:
			words[i] = "a " + t
		}
	}
	return strings.Join(words, " or ")
}

func enumList(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = render(v)
	}
	return strings.Join(parts, ", ")
}

func fieldList(props map[string]*Schema) string {
	if len(props) == 0 {
		return "none"
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func equal(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		af, err1 := an.Float64()
		bf, err2 := bn.Float64()
		return err1 == nil && err2 == nil && af == bf
	}
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

func sameValue(a, b any) bool {
	switch a.(type) {
	case map[string]any, []any:
		return true // containers are never coerced as a whole
	}
	return a == b
}
