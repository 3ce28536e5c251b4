package layering

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageNamesUnique: no two packages of the module share a name
// (package main aside, and the generated code under gen/, whose gRPC
// stubs and HTTP gateway take their name from the protos), so an import
// never needs an alias to say which one it means and a reader never
// confuses two of them.
func TestPackageNamesUnique(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.Name}} {{.ImportPath}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	byName := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, path, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("go list printed %q", line)
		}
		if name != "main" && !strings.HasPrefix(path, "github.com/plumbhq/plumb/gen/") {
			byName[name] = append(byName[name], path)
		}
	}
	if len(byName) < 50 {
		t.Fatalf("go list found only %d package names; is the module root right?", len(byName))
	}
	for name, paths := range byName {
		if len(paths) > 1 {
			t.Errorf("package name %q is used by %s", name, strings.Join(paths, ", "))
		}
	}
}
