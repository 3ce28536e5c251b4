package fleet

import (
	"context"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPlacementAndRouting runs two real workers: new sandboxes go to the
// least-loaded one, and every call reaches the worker named in the id.
func TestPlacementAndRouting(t *testing.T) {
	a := sandboxsvctest.StartWorker(t, sandbox.Config{MaxSandboxes: 2})
	b := sandboxsvctest.StartWorker(t, sandbox.Config{MaxSandboxes: 2})
	p, err := Dial([]string{a.Addr, b.Addr, "127.0.0.1:1"}, zaptest.NewLogger(t)) // the third is down
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var ids []string
	perWorker := map[string]int{}
	for range 4 {
		sb, err := p.Create(ctx, &plumbv1.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.GetId())
		perWorker[sb.GetWorker()]++
	}
	if perWorker[a.Name] != 2 || perWorker[b.Name] != 2 {
		t.Fatalf("placement = %v, want 2 per worker", perWorker)
	}
	// Both workers are full now.
	if _, err := p.Create(ctx, &plumbv1.CreateSandboxRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("create on a full fleet: %v", err)
	}
	for _, id := range ids {
		bk, err := p.Backend(ctx, id, "/workspace")
		if err != nil {
			t.Fatal(err)
		}
		r, err := bk.Execute(ctx, backend.ExecuteRequest{Command: "echo $HOSTNAME-ok"})
		if err != nil || r.Output != "sandbox-ok\n" {
			t.Fatalf("execute in %s: %q, %v", id, r.Output, err)
		}
		if err := p.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, id); err != nil {
			t.Fatalf("deleting twice: %v", err)
		}
	}
	if _, err := p.Backend(ctx, "sbx-nosuchworker-abc", "/"); status.Code(err) != codes.Unavailable {
		t.Fatalf("unknown worker: %v", err)
	}
	if _, err := p.Backend(ctx, "not-an-id", "/"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad id: %v", err)
	}
}
