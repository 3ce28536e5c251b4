package sandboxclient_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/grpc"
)

// world is one real worker with one sandbox, shared by the cases of a
// test.
type world struct {
	conn *grpc.ClientConn
	sb   *plumbv1.Sandbox
}

func newWorld(t *testing.T, filesRoot string) *world {
	return newWorldOn(t, filesRoot, "")
}

// newWorldOn is newWorld with the sandbox under an OCI runtime ("" = the
// engine's default). Under runsc the pids limit also counts gVisor's
// sentry threads, so it is raised.
func newWorldOn(t *testing.T, filesRoot, runtime string) *world {
	t.Helper()
	pids := int64(128)
	if runtime == "runsc" {
		pids = 512
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Defaults: sandbox.Template{Pids: pids, TTL: time.Hour}})
	resp, err := wk.Client.CreateSandbox(context.Background(), &plumbv1.CreateSandboxRequest{FilesRoot: filesRoot, Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	return &world{conn: wk.Conn, sb: resp.GetSandbox()}
}

// sh runs a command in the sandbox with arguments passed as environment
// variables (never spliced into the command text).
func (w *world) sh(ctx context.Context, b *sandboxclient.Backend, cmd string, env map[string]string) error {
	r, err := b.Execute(ctx, backend.ExecuteRequest{Command: cmd, Env: env, Cwd: "/"})
	if err != nil {
		return err
	}
	if r.ExitCode == nil || *r.ExitCode != 0 {
		return fmt.Errorf("%s: %s", cmd, r.Output)
	}
	return nil
}

// TestConformanceThroughGRPC runs the shared suite against a real sandbox
// through SandboxService, with the engine root set to the workspace (as
// docs/file-tools.md §7 H2 requires) so every case starts in an empty directory. It
// runs under every runtime the engine has (runc, and runsc when
// installed).
func TestConformanceThroughGRPC(t *testing.T) {
	for _, rt := range sandboxtest.Runtimes(t, sandboxtest.Docker(t)) {
		t.Run(rt, func(t *testing.T) { testConformanceThroughGRPC(t, rt) })
	}
}

func testConformanceThroughGRPC(t *testing.T, runtime string) {
	w := newWorldOn(t, "/workspace", runtime)
	b := sandboxclient.New(w.conn, w.sb.GetId(), sandboxclient.HomeOf(w.sb))
	if b.Home() != "/" {
		t.Fatalf("home = %q, want / for a workspace-rooted sandbox", b.Home())
	}
	abs := func(p string) string { return "/workspace" + p }
	var mu sync.Mutex
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
		defer cancel()
		// Each case starts with an empty workspace.
		if err := w.sh(ctx, b, `chmod -R u+rwx /workspace 2>/dev/null; rm -rf /workspace/* /workspace/.[!.]* /workspace/..?*; test -z "$(ls -A /workspace)"`, nil); err != nil {
			t.Fatalf("wipe workspace: %v", err)
		}
		return &backendtest.Harness{
			Backend:   b,
			Executor:  b,
			Caps:      []backendtest.Capability{backendtest.Symlink, backendtest.Mode, backendtest.Execute, backendtest.Media, backendtest.Special},
			Workspace: "/workspace",
			Symlink: func(ctx context.Context, p, target string) error {
				return w.sh(ctx, b, `ln -s "$T" "$P"`, map[string]string{"T": target, "P": abs(p)})
			},
			Chmod: func(ctx context.Context, p string, mode fs.FileMode) error {
				return w.sh(ctx, b, `chmod "$M" "$P"`, map[string]string{"M": strconv.FormatUint(uint64(mode.Perm()), 8), "P": abs(p)})
			},
			Mkfifo: func(ctx context.Context, p string) error {
				return w.sh(ctx, b, `mkfifo "$P"`, map[string]string{"P": abs(p)})
			},
			Outside: backendtest.Outside{
				Abs: "/etc", Rel: "../../../etc", File: "passwd", Needle: "root",
				Exists: func(name string) bool {
					return w.sh(context.Background(), b, `test -e "/etc/$N"`, map[string]string{"N": name}) == nil
				},
			},
		}
	})
}

// TestWriteNeedsWritePermission covers the kernel half of the engine's
// permission rule, which a root-run conformance backend cannot show: the
// sandbox agent is not root, so a file whose owner lacks the write bit
// (other bits set) is refused like a read-only one, and left unchanged.
func TestWriteNeedsWritePermission(t *testing.T) {
	w := newWorld(t, "/workspace")
	b := sandboxclient.New(w.conn, w.sb.GetId(), sandboxclient.HomeOf(w.sb))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := b.Write(ctx, "/k.txt", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := w.sh(ctx, b, "chmod 0466 /workspace/k.txt", nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		op   string
		call func() error
	}{
		{"write", func() error { _, err := b.Write(ctx, "/k.txt", []byte("new")); return err }},
		{"edit", func() error {
			_, err := b.Edit(ctx, backend.EditRequest{Path: "/k.txt", Old: "old", New: "new"})
			return err
		}},
	} {
		if err := tt.call(); backend.CodeOf(err) != backend.CodePermissionDenied {
			t.Errorf("%s a 0466 file owned by the agent's user: %v, want permission_denied", tt.op, err)
		}
	}
	res, err := b.Download(ctx, []string{"/k.txt"})
	if err != nil || len(res) != 1 || string(res[0].Content) != "old" {
		t.Errorf("download /k.txt = %+v, %v; want it unchanged", res, err)
	}
}
