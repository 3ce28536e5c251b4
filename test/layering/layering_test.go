// Package layering checks that dependencies point down, cmd → internal →
// pkg: pkg/ never imports internal/ or cmd/, and internal/ never imports
// cmd/. Test files may import what they need (a pkg test may start a real
// server from internal/). It also checks that each binary links only what
// it uses (binaries_test.go): sandboxd no agent core, agentd and agentctl
// no Docker client, agentctl no metrics or trace exporters, the in-box
// sandbox-agent neither net/http, zap nor log/slog, and its logger
// agentlog no fmt, reflect or encoding/json; and that no two packages
// share a name (names_test.go).
package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/plumbhq/plumb/"

func TestDependenciesPointDown(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, tt := range []struct {
		dir       string
		forbidden []string
	}{
		{"pkg", []string{module + "internal", module + "cmd"}},
		{"internal", []string{module + "cmd"}},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			files := 0
			err := filepath.WalkDir(filepath.Join(root, tt.dir), func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() {
					if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
						return filepath.SkipDir
					}
					return nil
				}
				if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
					return nil
				}
				files++
				// Every file counts, whatever its build constraints.
				f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
				if err != nil {
					return err
				}
				for _, imp := range f.Imports {
					p, err := strconv.Unquote(imp.Path.Value)
					if err != nil {
						return err
					}
					for _, bad := range tt.forbidden {
						if p == bad || strings.HasPrefix(p, bad+"/") {
							t.Errorf("%s imports %s", path, p)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files == 0 {
				t.Fatalf("no Go files under %s", tt.dir)
			}
		})
	}
}
