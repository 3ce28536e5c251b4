package yamlconf

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type limits struct {
	CPUs   float64  `yaml:"cpus" deprecated:"cpu"`
	Memory Quantity `yaml:"memory" deprecated:"memory_bytes"`
}

type pool struct {
	Size int `yaml:"size"`
}

type template struct {
	limits `yaml:",inline"`
	Image  string        `yaml:"image"`
	TTL    time.Duration `yaml:"ttl"`
	Pool   pool          `yaml:"pool"`
}

// either is a boolean or a mapping, through its own unmarshaler.
type either struct {
	Off  bool   `yaml:"-"`
	Name string `yaml:"name"`
}

func (e *either) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if err := n.Decode(&b); err == nil {
		e.Off = !b
		return nil
	}
	type plain either
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*e = either(p)
	return nil
}

type config struct {
	Version   int                 `yaml:"version"`
	Templates map[string]template `yaml:"templates"`
	List      []pool              `yaml:"list"`
	Gates     map[string]either   `yaml:"gates"`
	Max       *Quantity           `yaml:"max" deprecated:"max_bytes"`
	Deep      [][][][][][][]int   `yaml:"deep"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name, doc string
		check     func(config) bool
		deprec    []string
	}{
		{"empty", "", func(c config) bool { return c.Templates == nil }, nil},
		{"new keys", "templates:\n  py: {cpus: 1.5, memory: 1Gi, image: python}\n",
			func(c config) bool {
				p := c.Templates["py"]
				return p.CPUs == 1.5 && p.Memory == 1<<30 && p.Image == "python"
			}, nil},
		{"old keys", "templates:\n  py:\n    cpu: 2\n    memory_bytes: 1073741824\n",
			func(c config) bool { p := c.Templates["py"]; return p.CPUs == 2 && p.Memory == 1<<30 },
			[]string{"templates.py.cpu (line 3) is deprecated: use templates.py.cpus", "templates.py.memory_bytes (line 4) is deprecated: use templates.py.memory"}},
		{"old key at the top level, pointer field", "max_bytes: 10Gi\n",
			func(c config) bool { return c.Max != nil && *c.Max == 10<<30 }, []string{"max_bytes (line 1) is deprecated: use max"}},
		{"old key through a merge", "templates:\n  a: &b {memory_bytes: 1Ki}\n  py: {<<: *b, image: x}\n",
			func(c config) bool { return c.Templates["py"].Memory == 1024 && c.Templates["py"].Image == "x" },
			[]string{"templates.a.memory_bytes (line 2) is deprecated: use templates.a.memory"}},
		{"durations and sequences", "templates:\n  py: {ttl: 90s}\nlist: [{size: 1}, {size: 2}]\n",
			func(c config) bool {
				return c.Templates["py"].TTL == 90*time.Second && len(c.List) == 2 && c.List[1].Size == 2
			}, nil},
		{"custom unmarshaler", "gates:\n  a: false\n  b: {name: x}\n",
			func(c config) bool { return c.Gates["a"].Off && c.Gates["b"].Name == "x" }, nil},
		{"anchored old keys used twice", "templates:\n  a: &t {memory_bytes: 2Ki}\n  b: *t\n",
			func(c config) bool { return c.Templates["a"].Memory == 2048 && c.Templates["b"].Memory == 2048 },
			[]string{"templates.a.memory_bytes (line 2) is deprecated: use templates.a.memory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			ds, err := Decode([]byte(tt.doc), &c)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("decoded %+v", c)
			}
			var got []string
			for _, d := range ds {
				got = append(got, d.String())
			}
			if strings.Join(got, "|") != strings.Join(tt.deprec, "|") {
				t.Fatalf("deprecations %q, want %q", got, tt.deprec)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"unknown top key", "vesion: 1\n", "vesion: unknown key (line 1; known keys: deep, gates, list, max, templates, version)"},
		{"unknown nested key", "templates:\n  py: {imgae: x}\n", "templates.py.imgae: unknown key (line 2; known keys: cpus, image, memory, pool, ttl)"},
		{"unknown key in a list", "list: [{size: 1}, {sise: 2}]\n", "list[1].sise: unknown key"},
		{"unknown key in a custom unmarshaler", "gates:\n  a: {nam: x}\n", "gates.a.nam: unknown key"},
		{"unknown key through a merge", "templates:\n  py: {<<: {imgae: x}}\n", "templates.py.imgae: unknown key"},
		{"bad unit", "templates:\n  py:\n    memory: 1GB\n", `templates.py.memory: size "1GB": want bytes or a number with Ki, Mi, Gi or Ti (or K, M, G, T) (line 3)`},
		{"bad unit under an old key", "templates:\n  py: {memory_bytes: 1Gb}\n", `templates.py.memory: size "1Gb"`},
		{"negative size", "max: -1\n", `max: size "-1"`},
		{"size too large", "max: 9000000Ti\n", `max: size "9000000Ti" is too large`},
		{"mapping for a size", "max: {a: 1}\n", "max: want a size such as 512Mi or 1Gi (line 1)"},
		{"wrong type", "templates:\n  py: {cpus: many}\n", "templates.py.cpus: cannot unmarshal !!str `many` into float64 (line 2)"},
		{"bad duration", "templates:\n  py: {ttl: soon}\n", "templates.py.ttl: cannot unmarshal !!str `soon` into time.Duration (line 2)"},
		{"scalar for a struct", "templates:\n  py: big\n", "templates.py: cannot unmarshal !!str `big`"},
		{"both spellings, old first", "templates:\n  py:\n    memory_bytes: 1\n    memory: 1Gi\n",
			"templates.py: memory (line 4) and memory_bytes (line 3) both given: memory_bytes is the deprecated spelling of memory, keep only memory"},
		{"both spellings, new first", "templates:\n  py: {cpus: 1, cpu: 2}\n", "templates.py: cpus (line 2) and cpu (line 2) both given"},
		{"both spellings at the top", "max: 1Gi\nmax_bytes: 1\n", "top level: max (line 1) and max_bytes (line 2) both given"},
		{"duplicate key", "version: 1\nversion: 2\n", `mapping key "version" already defined`},
		{"syntax", "templates: [\n", "did not find expected node content"},
		{"alias bomb", aliasBomb(), "expands to more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			_, err := Decode([]byte(tt.doc), &c)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v; want one line containing %q", err, tt.want)
			}
		})
	}
}

// aliasBomb is a small document whose aliases expand to 10^7 nodes along
// the config's types.
func aliasBomb() string {
	level := "[1" + strings.Repeat(",1", 9) + "]"
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		level = "[&" + name + " " + level + strings.Repeat(",*"+name, 9) + "]"
	}
	return "deep: " + level + "\n"
}

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false}, {"1024", 1024, false}, {"512Mi", 512 << 20, false}, {"1Gi", 1 << 30, false},
		{"1.5Gi", 3 << 29, false}, {"1G", 1e9, false}, {"2K", 2000, false}, {"1 Ti", 1 << 40, false},
		{"9223372036854775807", 1<<63 - 1, false},
		{"9223372036854775808", 0, true}, {"8Ei", 0, true}, {"-1", 0, true}, {"1GB", 0, true}, {"1gi", 0, true},
		{"", 0, true}, {"Gi", 0, true}, {"1e9", 0, true}, {"8388608Ti", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseQuantity(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"0", "512Mi", "1.5Gi", "1G", "9223372036854775807", "8388608Ti", "-1", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseQuantity(s)
		if err == nil && v < 0 {
			t.Fatalf("ParseQuantity(%q) = %d", s, v)
		}
	})
}

// FuzzDecode: any document decodes or fails with a one-line error; a
// document that decodes gives the same value when decoded again (the
// renaming of deprecated keys is idempotent).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "templates:\n  py: {cpu: 1, memory: 1Gi}\n", "max_bytes: 1\n", "gates: {a: true, b: {name: x}}\n",
		"templates:\n  a: &t {memory_bytes: 2Ki}\n  b: {<<: *t}\n", "list: [{size: 1}]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var c config
		_, err := Decode([]byte(doc), &c)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on several lines: %q", err)
			}
			return
		}
		var again config
		if _, err := Decode([]byte(doc), &again); err != nil {
			t.Fatalf("second decode: %v", err)
		}
	})
}
