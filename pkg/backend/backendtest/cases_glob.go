package backendtest

import (
	"fmt"

	"github.com/plumbhq/plumb/pkg/backend"
)

// globTree is the tree of the docs/file-tools.md §4.7 conformance matrix.
var globTree = map[string]string{
	"/a.py":                     "a",
	"/sub/b.py":                 "b",
	"/sub/nested/c.py":          "c",
	"/readme.md":                "r",
	"/.hidden.py":               "h",
	"/.hidden/x.py":             "x",
	"/.github/workflows/ci.yml": "y",
}

var (
	globG1  = []string{"/.hidden/x.py", "/a.py", "/sub/b.py", "/sub/nested/c.py"}
	globG12 = []string{"/.github/workflows/ci.yml", "/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}
)

// globRow is one row of the matrix: every pattern at path gives want, or
// fails with code.
type globRow struct {
	id       int
	patterns []string
	path     string
	want     []string
	code     backend.Code
}

var globRows = []globRow{
	{id: 1, patterns: []string{"*.py"}, path: "/", want: globG1},
	{id: 2, patterns: []string{"**/*.py"}, path: "/", want: []string{"/a.py", "/sub/b.py", "/sub/nested/c.py"}},
	{id: 3, patterns: []string{"sub/*.py"}, path: "/", want: []string{"/sub/b.py"}},
	{id: 4, patterns: []string{"sub/**/*.py"}, path: "/", want: []string{"/sub/b.py", "/sub/nested/c.py"}},
	{id: 5, patterns: []string{"/*.py"}, path: "/", want: []string{"/a.py"}},
	{id: 6, patterns: []string{"a.py/**"}, path: "/"},
	{id: 7, patterns: []string{"*.py"}, path: "/sub", want: []string{"/sub/b.py", "/sub/nested/c.py"}},
	{id: 8, patterns: []string{"*.yml"}, path: "/", want: []string{"/.github/workflows/ci.yml"}},
	{id: 9, patterns: []string{"**/*.yml"}, path: "/"},
	{id: 10, patterns: []string{".github/**/*.yml"}, path: "/", want: []string{"/.github/workflows/ci.yml"}},
	{id: 11, patterns: []string{".hidden.py", ".*.py"}, path: "/", want: []string{"/.hidden.py"}},
	{id: 12, patterns: []string{"*"}, path: "/", want: globG12},
	{id: 13, patterns: []string{"[!a].py", "[^a].py"}, path: "/", want: []string{"/.hidden/x.py", "/sub/b.py", "/sub/nested/c.py"}},
	{id: 14, patterns: []string{"*.{py,md}"}, path: "/", want: []string{"/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}},
	{id: 15, patterns: []string{"**"}, path: "/", want: globG12},
	{id: 16, patterns: []string{"sub/**"}, path: "/", want: []string{"/sub/b.py", "/sub/nested/c.py"}},
	{id: 17, patterns: []string{"nested/c.py"}, path: "/"},
	{id: 18, patterns: []string{"nested/*.py"}, path: "/sub", want: []string{"/sub/nested/c.py"}},
	{id: 19, patterns: []string{"?.py"}, path: "/", want: globG1},
	{id: 20, patterns: []string{"*.PY"}, path: "/"},
	{id: 21, patterns: []string{"{sub,.hidden}/*.py"}, path: "/", want: []string{"/.hidden/x.py", "/sub/b.py"}},
	{id: 22, patterns: []string{"*/x.py"}, path: "/"},
	{id: 23, patterns: []string{"!*.py"}, path: "/"},
	{id: 24, patterns: []string{"sub"}, path: "/"},
	{id: 25, patterns: []string{"../*.py", "[ab"}, path: "/", code: backend.CodeInvalidPattern},
	{id: 26, patterns: []string{"{a.py"}, path: "/"},
	{id: 27, patterns: []string{"*.py"}, path: "/missing", code: backend.CodeFileNotFound},
}

// globMatrixCases are G01–G27 through Backend.Glob, plus G27's second
// path (a file) which gives not_a_directory.
func globMatrixCases() []testCase {
	var out []testCase
	for _, row := range globRows {
		out = append(out, testCase{name: fmt.Sprintf("G%02d", row.id), run: func(e *env) {
			e.seed(globTree)
			for _, pat := range row.patterns {
				what := fmt.Sprintf("glob %q at %s", pat, row.path)
				res, err := e.glob(pat, row.path)
				if row.code != "" {
					e.wantCode(what, err, row.code)
					continue
				}
				if !e.noErr(what, err) {
					continue
				}
				e.wantList(what, pathsOf(res.Matches), row.want)
				for _, fi := range res.Matches {
					if fi.Kind != backend.KindFile || fi.IsDir {
						e.t.Errorf("%s: %s has kind %q, want file", what, fi.Path, fi.Kind)
					}
				}
				if res.Truncated {
					e.t.Errorf("%s: truncated (%s)", what, res.TruncationReason)
				}
			}
			if row.id == 27 {
				_, err := e.glob("*.py", "/a.py")
				e.wantCode(`glob "*.py" at /a.py`, err, backend.CodeNotADirectory)
			}
		}})
	}
	return out
}
