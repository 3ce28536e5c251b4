package layering

import (
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A binary links only what it uses: each rule names packages that must not
// be in the binary's dependency graph, as `go list -deps` builds it for
// this platform. A name is an import path, or with "/..." the path and
// every package under it (the go command's pattern).
var binaryRules = []struct {
	binary    string
	why       string
	forbidden []string
}{
	{"./cmd/sandboxd", "sandboxd serves sandboxes, not agents", []string{
		module + "pkg/agent/...", module + "pkg/model/...", module + "pkg/store/...",
		module + "internal/server/agentsvc/...", module + "internal/runhost/...", module + "pkg/pbconv/agentconv",
	}},
	{"./cmd/agentd", "agentd reaches sandboxes through sandboxd, never Docker", []string{
		"github.com/moby/moby/client/...", "github.com/containerd/...", module + "pkg/sandbox",
	}},
	{"./cmd/agentctl", "agentctl is a client: no Docker, no server metrics or trace exporters", []string{
		"github.com/moby/moby/client/...", "github.com/containerd/...", module + "pkg/sandbox",
		"go.opentelemetry.io/otel/sdk/...", "go.opentelemetry.io/otel/exporters/...", "github.com/prometheus/...",
		module + "internal/daemon", module + "internal/httpapi", module + "gen/gateway/...", "github.com/grpc-ecosystem/grpc-gateway/...",
	}},
	{"./cmd/sandbox-agent", "every box runs a copy: net/http (which zap links; the agent logs with agentlog) costs each box about 1 MiB RSS, crypto (crypto/rand; it uses math/rand/v2) and net (port forwards use a raw socket) 0.3 MiB each, log/slog (encoding/json and reflection-heavy handlers) a larger binary", []string{
		"net", "net/...", "crypto/...", "go.uber.org/zap/...", "log/slog/...",
	}},
	// Not a binary, but what the agent's logger links is in every box
	// once the agent's other uses of these packages are gone.
	{"./pkg/sandbox/agentlog", "the in-box agent's logger writes JSON lines by hand", []string{
		"log/slog/...", "encoding/...", "reflect", "fmt", "net", "net/...",
	}},
}

func TestBinariesLinkWhatTheyUse(t *testing.T) {
	for _, r := range binaryRules {
		t.Run(filepath.Base(r.binary), func(t *testing.T) {
			deps := listDeps(t, r.binary)
			for _, bad := range r.forbidden {
				for _, p := range slices.Sorted(maps.Keys(deps)) {
					if matches(bad, p) {
						t.Errorf("%s links %s (%s): %s", r.binary, p, r.why, strings.Join(pathTo(deps, module+strings.TrimPrefix(r.binary, "./"), p), " → "))
						break // one chain per rule is enough to act on
					}
				}
			}
		})
	}
}

// matches reports whether import path p matches pattern: the path itself,
// or with "/..." the path and every package under it.
func matches(pattern, p string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == tree || strings.HasPrefix(p, tree+"/")
	}
	return p == pattern
}

// listDeps returns the packages binary links, each with its imports.
func listDeps(t *testing.T, binary string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", binary)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", binary, err, stderr.String())
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", binary)
	}
	return deps
}

// pathTo returns the shortest import chain from root to p.
func pathTo(deps map[string][]string, root, p string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == p {
			var chain []string
			for ; cur != ""; cur = prev[cur] {
				chain = append(chain, strings.TrimPrefix(cur, module))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range deps[cur] {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return []string{p}
}

func TestMatches(t *testing.T) {
	for _, tt := range []struct {
		pattern, p string
		want       bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"a/b/...", "a/b", true},
		{"a/b/...", "a/b/c/d", true},
		{"a/b/...", "a/bc", false},
		{"a/b", "a/bc", false},
	} {
		if got := matches(tt.pattern, tt.p); got != tt.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tt.pattern, tt.p, got, tt.want)
		}
	}
}
