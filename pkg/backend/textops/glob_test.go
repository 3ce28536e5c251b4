package textops

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// globTree is the docs/file-tools.md §4.7 conformance tree.
var globTree = []string{
	"/a.py", "/sub/b.py", "/sub/nested/c.py", "/readme.md",
	"/.hidden.py", "/.hidden/x.py", "/.github/workflows/ci.yml",
}

// walkGlob simulates an engine walk of files under root: a directory is
// entered only when CanDescend allows it, and a file is kept when Match
// accepts its root-relative path. It also checks that pruning never hides
// a match.
func walkGlob(t *testing.T, g *Glob, files []string, root string) []string {
	t.Helper()
	var got []string
	for _, f := range files {
		rel, ok := strings.CutPrefix(f, strings.TrimSuffix(root, "/")+"/")
		if !ok {
			continue
		}
		reachable := g.CanDescend("")
		for i := range len(rel) {
			if rel[i] == '/' && !g.CanDescend(rel[:i]) {
				reachable = false
			}
		}
		match := g.Match(rel)
		if match && !reachable {
			t.Errorf("pruning hides match %s", f)
		}
		if match && reachable {
			got = append(got, f)
		}
	}
	slices.Sort(got)
	return got
}

func TestGlobMatrix(t *testing.T) {
	g1 := []string{"/.hidden/x.py", "/a.py", "/sub/b.py", "/sub/nested/c.py"}
	g12 := []string{"/.github/workflows/ci.yml", "/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}
	tests := []struct {
		name    string
		pattern string
		root    string
		want    []string
	}{
		{"G1", "*.py", "/", g1},
		{"G2", "**/*.py", "/", []string{"/a.py", "/sub/b.py", "/sub/nested/c.py"}},
		{"G3", "sub/*.py", "/", []string{"/sub/b.py"}},
		{"G4", "sub/**/*.py", "/", []string{"/sub/b.py", "/sub/nested/c.py"}},
		{"G5", "/*.py", "/", []string{"/a.py"}},
		{"G6", "a.py/**", "/", nil},
		{"G7", "*.py", "/sub", []string{"/sub/b.py", "/sub/nested/c.py"}},
		{"G8", "*.yml", "/", []string{"/.github/workflows/ci.yml"}},
		{"G9", "**/*.yml", "/", nil},
		{"G10", ".github/**/*.yml", "/", []string{"/.github/workflows/ci.yml"}},
		{"G11 literal", ".hidden.py", "/", []string{"/.hidden.py"}},
		{"G11 dot star", ".*.py", "/", []string{"/.hidden.py"}},
		{"G12", "*", "/", g12},
		{"G13 bang", "[!a].py", "/", []string{"/.hidden/x.py", "/sub/b.py", "/sub/nested/c.py"}},
		{"G13 caret", "[^a].py", "/", []string{"/.hidden/x.py", "/sub/b.py", "/sub/nested/c.py"}},
		{"G14", "*.{py,md}", "/", []string{"/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}},
		{"G15", "**", "/", g12},
		{"G16", "sub/**", "/", []string{"/sub/b.py", "/sub/nested/c.py"}},
		{"G17", "nested/c.py", "/", nil},
		{"G18", "nested/*.py", "/sub", []string{"/sub/nested/c.py"}},
		{"G19", "?.py", "/", g1},
		{"G20", "*.PY", "/", nil},
		{"G21", "{sub,.hidden}/*.py", "/", []string{"/.hidden/x.py", "/sub/b.py"}},
		{"G22", "*/x.py", "/", nil},
		{"G23", "!*.py", "/", nil},
		{"G24", "sub", "/", nil},
		{"G26", "{a.py", "/", nil},
		// Beyond the matrix.
		{"path mode trailing slash", "sub/", "/", nil},
		{"dot segment dropped", "./sub/*.py", "/", []string{"/sub/b.py"}},
		{"double slash collapses", "sub//*.py", "/", []string{"/sub/b.py"}},
		{"a** acts as a*", "a**", "/", []string{"/a.py"}},
		{"leading ** then literal", "**/c.py", "/", []string{"/sub/nested/c.py"}},
		{"rooted **", "/**", "/", []string{"/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}},
		{"** in middle zero", "sub/**/b.py", "/", []string{"/sub/b.py"}},
		{"escaped star is literal", `\*.py`, "/", nil},
		{"class range", "[a-c].py", "/", []string{"/a.py", "/sub/b.py", "/sub/nested/c.py"}},
		{"comma-less group literal", "{a}.py", "/", nil},
		{"nested braces", "{sub/{b,nested/c},a}.py", "/", []string{"/a.py", "/sub/b.py", "/sub/nested/c.py"}},
		{"class does not match leading dot", "[.]hidden.py", "/", nil},
		{"escaped dot matches dotfile", `\.hidden.py`, "/", []string{"/.hidden.py"}},
		{"root only", "/", "/", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := CompileGlob(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			got := walkGlob(t, g, globTree, tt.root)
			if !slices.Equal(got, tt.want) {
				t.Errorf("glob %q at %s = %v, want %v", tt.pattern, tt.root, got, tt.want)
			}
		})
	}
}

func TestGlobSegmentSyntax(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"[]a].txt", "].txt", true},
		{"[]a].txt", "a.txt", true},
		{"[!]a].txt", "].txt", false},
		{"[!]a].txt", "b.txt", true},
		{"[a-]", "-", true},
		{`[\]]`, "]", true},
		{`[a\-z]`, "b", false},
		{`[a\-z]`, "-", true},
		{"[é-ë]", "ê", true},
		{"?", "é", true},
		{"??", "é", false},
		{`a\`, `a\`, true},
		{"a{b", "a{b", true},
		{"a}b", "a}b", true},
		{"a,b", "a,b", true},
		{"{a,b}", "b", true},
		{"{,x}y", "y", true},
		{"{,x}y", "xy", true},
		{"*.{py,}", "a.", true},
		{"x*y*z", "xaaybbz", true},
		{"x*y*z", "xaaybb", false},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
		{"!x", "!x", true},
		{"*", ".x", false},
		{".*", ".x", true},
		{"{.x,y}", ".x", true},
		{"A", "a", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.name, func(t *testing.T) {
			g, err := CompileGlob(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Match(tt.name); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGlobErrors(t *testing.T) {
	tests := []struct {
		name, pattern, message string
	}{
		{"G25 dotdot", "../*.py", `".."`},
		{"G25 unclosed class", "[ab", "unclosed"},
		{"dotdot in alternative", "{a,..}/x", `".."`},
		{"empty", "", "empty"},
		{"NUL", "a\x00b", "NUL"},
		{"too long", strings.Repeat("a", 4097), "4096"},
		{"empty class is unclosed", "[]", "unclosed"},
		{"negated empty class is unclosed", "[!]", "unclosed"},
		{"slash inside class", "[a/b]", "unclosed"},
		{"61 brace bomb", strings.Repeat("{a,b}", 10), "1000"},
		{"1001 alternatives", "{" + strings.Repeat("a,", 1000) + "a}", "1000"},
		{"nested bomb", "{" + strings.Repeat("{a,b}", 10) + ",c}", "1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileGlob(tt.pattern)
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.CodeInvalidPattern || !strings.Contains(be.Message, tt.message) {
				t.Fatalf("err = %v, want invalid_pattern mentioning %q", err, tt.message)
			}
		})
	}
	if _, err := CompileGlob("{" + strings.Repeat("a,", 999) + "a}"); err != nil {
		t.Errorf("1000 alternatives rejected: %v", err)
	}
}

// TestGlobPathologicalBraces checks that brace parsing stays fast on
// hostile nesting within the length cap.
func TestGlobPathologicalBraces(t *testing.T) {
	for _, p := range []string{
		strings.Repeat("{", 4096),
		strings.Repeat("{", 2048) + strings.Repeat("}", 2048),
		strings.Repeat("{a", 1365) + strings.Repeat("}", 1),
		strings.Repeat("[", 4096),
		strings.Repeat("*?", 2048),
	} {
		CompileGlob(p) // must return; the test timeout guards the time
	}
}

func TestGlobResiduals(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		prefix  string
		want    []string
	}{
		{"M for memories/*.md", "memories/*.md", "memories", []string{"/*.md"}},
		{"P for memories/*.md", "memories/*.md", "memories/private", nil},
		{"C for memories/*.md", "memories/*.md", "cache", nil},
		{"M for */notes.txt", "*/notes.txt", "memories", []string{"/notes.txt"}},
		{"C for */notes.txt", "*/notes.txt", "cache", []string{"/notes.txt"}},
		{"P for */notes.txt", "*/notes.txt", "memories/private", nil},
		{"M for **/*.md", "**/*.md", "memories", []string{"/**/*.md"}},
		{"P for **/*.md", "**/*.md", "memories/private", []string{"/**/*.md"}},
		{"basename unchanged", "*.md", "memories/private", []string{"*.md"}},
		{"mixed", "{*.py,memories/x}", "memories", []string{"*.py", "/x"}},
		{"pattern ends at the mount point", "memories", "memories", []string{"memories"}},
		{"path pattern ends at mount point", "/memories", "memories", nil},
		{"trailing doublestar", "memories/**", "memories", []string{"/**"}},
		{"doublestar needs a name", "/**", "memories", []string{"/**"}},
		{"** does not enter dot mount", "**/*.md", ".cache", nil},
		{"literal dot mount", ".cache/*.md", ".cache", []string{"/*.md"}},
		{"star or deeper", "**/*", "m", []string{"/**/*"}},
		{"two branches", "{a/*/x,a/b/y}", "a/b", []string{"/x", "/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := CompileGlob(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			got := g.Residuals(strings.Split(tt.prefix, "/"))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Residuals = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestGlobResidualsAgree checks the defining property of residuals on
// random paths: a file prefix/rest matches the pattern exactly when rest
// matches the joined residuals at the route.
func TestGlobResidualsAgree(t *testing.T) {
	patterns := []string{"*.py", "**/*.py", "a/*.py", "a/**", "*/b/*", "**/b/**/c.py", "{a,.d}/**/*",
		"/*", "a/b/c.py", ".d/*", "**", "*/*", "[ab]/**/?.py", "a/**/**/x.py"}
	names := []string{"a", "b", ".d", "c.py", "x.py", "a.py", ".e.py"}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range patterns {
		g, err := CompileGlob(p)
		if err != nil {
			t.Fatal(err)
		}
		for range 400 {
			var segs []string
			for range 1 + rng.IntN(5) {
				segs = append(segs, names[rng.IntN(len(names))])
			}
			cut := 1 + rng.IntN(len(segs))
			if cut == len(segs) {
				cut--
			}
			if cut == 0 {
				continue
			}
			prefix, rest := segs[:cut], strings.Join(segs[cut:], "/")
			want := g.Match(strings.Join(segs, "/"))
			got := false
			if rs := g.Residuals(prefix); len(rs) > 0 {
				rg, err := CompileGlob(JoinAlternatives(rs))
				if err != nil {
					t.Fatalf("residuals %q of %q do not compile: %v", rs, p, err)
				}
				got = rg.Match(rest)
			}
			if got != want {
				t.Fatalf("pattern %q, prefix %q, rest %q: residuals %q give %v, full match %v",
					p, prefix, rest, g.Residuals(prefix), got, want)
			}
		}
	}
}

func TestAlternativeStringRoundTrip(t *testing.T) {
	for _, p := range []string{"[]a-c!]*.{py,md}", `a\{b\,c\}`, "/x/**/[!.]?", `*\*`, "[\\!x]", "[é-ë]*"} {
		g, err := CompileGlob(p)
		if err != nil {
			t.Fatal(err)
		}
		var alts []string
		for _, a := range g.Alternatives() {
			alts = append(alts, a.String())
		}
		g2, err := CompileGlob(JoinAlternatives(alts))
		if err != nil {
			t.Fatalf("%q: canonical %q does not compile: %v", p, alts, err)
		}
		for _, name := range []string{"a.py", "].md", "!x", "é", "a{b,c}", "x/y/z", "x/.y", "*", "\\x", "ë.txt", "b"} {
			if g.Match(name) != g2.Match(name) {
				t.Errorf("%q vs canonical %q disagree on %q", p, alts, name)
			}
		}
	}
}
