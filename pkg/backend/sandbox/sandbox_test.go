package sandbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	sandboxbackend "github.com/plumbhq/plumb/pkg/backend/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// world is one real sandboxd (manager + SandboxService on loopback) with
// one sandbox, shared by the conformance cases of a test.
type world struct {
	client plumbv1.SandboxServiceClient
	conn   *grpc.ClientConn
	sb     *plumbv1.Sandbox
}

func newWorld(t *testing.T, filesRoot string) *world {
	t.Helper()
	cli := sandboxtest.Docker(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	ctx := context.Background()
	m, err := sandbox.NewManager(ctx, cli, sandbox.Config{
		Worker:      "bt" + run,
		Agent:       sandboxtest.Agent(t),
		Defaults:    sandbox.Template{Image: sandboxtest.Image(t, cli), MemoryBytes: 256 << 20, Pids: 128, TTL: time.Hour},
		ExtraLabels: map[string]string{"plumb.test": run},
	}, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	plumbv1.RegisterSandboxServiceServer(srv, sandboxsvc.New(m, nil, zaptest.NewLogger(t)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{client: plumbv1.NewSandboxServiceClient(conn), conn: conn}
	resp, err := w.client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{FilesRoot: filesRoot})
	if err != nil {
		t.Fatal(err)
	}
	w.sb = resp.GetSandbox()
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("delete sandboxes: %v", err)
		}
		m.Close()
		cs, vs, err := sandboxtest.Leftovers(ctx, cli, "plumb.test", run)
		if err != nil || len(cs)+len(vs) > 0 {
			t.Errorf("leftovers: containers %v volumes %v (%v)", cs, vs, err)
		}
	})
	return w
}

// sh runs a command in the sandbox with arguments passed as environment
// variables (never spliced into the command text).
func (w *world) sh(ctx context.Context, b *sandboxbackend.Backend, cmd string, env map[string]string) error {
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
// the spec's H2 requires) so every case starts in an empty directory.
func TestConformanceThroughGRPC(t *testing.T) {
	w := newWorld(t, "/workspace")
	b := sandboxbackend.New(w.conn, w.sb.GetId(), sandboxbackend.HomeOf(w.sb))
	if b.Home() != "/" {
		t.Fatalf("home = %q, want / for a workspace-rooted sandbox", b.Home())
	}
	abs := func(p string) string { return "/workspace" + p }
	var mu sync.Mutex
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
