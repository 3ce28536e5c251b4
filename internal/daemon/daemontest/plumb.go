package daemontest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"
)

// BuildCommands builds plumb's commands (cmd/<name>) into dir and returns
// their paths by name. sandbox-agent is built static: it runs inside the
// sandbox containers, where sandboxd finds it next to its own binary.
func BuildCommands(dir string, names ...string) (map[string]string, error) {
	bins := map[string]string{}
	for _, name := range names {
		build := Build
		if name == "sandbox-agent" {
			build = BuildStatic
		}
		p, err := build(dir, "github.com/plumbhq/plumb/cmd/"+name)
		if err != nil {
			return nil, err
		}
		bins[name] = p
	}
	return bins, nil
}

// Dial returns a client of the daemon at addr that presents token as its
// bearer token; it is closed when t ends.
func Dial(t testing.TB, addr, token string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(grpccreds.BearerToken(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// WriteToken writes token to a file in dir, as --token-file reads it, and
// returns its path.
func WriteToken(t testing.TB, dir, name, token string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// StartSandboxd runs bin (sandboxd, with sandbox-agent next to it) as a
// sandbox worker on the local Docker Engine with the busybox test image,
// requiring the token in tokenFile. Every sandbox it makes carries the
// test's labels, and whatever is left of them when the test ends (a failed
// test, a shutdown past its grace) is removed then: the sweep is
// registered before the process starts, so it runs after it has stopped.
// extra are more flags (--credentials-file).
func StartSandboxd(t testing.TB, bin, dir, tokenFile string, extra ...string) *Proc {
	t.Helper()
	cli := sandboxtest.Docker(t)
	image := sandboxtest.Image(t, cli)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	worker := "w" + hex.EncodeToString(b)
	labels, err := yaml.Marshal(map[string]any{"version": 1, "labels": sandboxtest.Labels(worker)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sandboxd.yaml")
	if err := os.WriteFile(cfg, labels, 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxtest.SweepOnCleanup(t, cli, sandboxtest.LabelTest, worker)
	sandboxtest.ReleaseImagesOnCleanup(t, cli, worker)
	return Start(t, bin, append([]string{"--config", cfg, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--worker", worker, "--default-image", image, "--delete-sandboxes-on-exit", "--shutdown-grace", "2s",
		"--token-file", tokenFile}, extra...)...)
}
