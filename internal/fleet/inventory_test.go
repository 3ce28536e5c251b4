package fleet

import (
	"context"
	"net"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestInventory runs two real workers and a dead address: the inventory
// lists every tenant's sandboxes on each worker with its tenant and
// labels, the dead address and a stopped worker with their errors (the
// others still listed), and DeleteAny removes another tenant's sandbox.
func TestInventory(t *testing.T) {
	port := freePort(t, "127.0.0.1")
	a := startFleetWorker(t, "127.0.0.1:"+port, sandbox.Config{})
	port = freePort(t, "127.0.0.1")
	b := startFleetWorker(t, "127.0.0.1:"+port, sandbox.Config{})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there
	p, err := New(Config{
		Targets: []string{a.addr, b.addr, deadAddr}, Refresh: -1, Deadline: 5 * time.Second, Logger: zaptest.NewLogger(t),
	}, tenant.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()

	owners := map[string]string{}
	for _, tn := range []string{"acme", "beta", "acme"} {
		sb, err := p.Create(tenant.With(ctx, tn), &plumbv1.CreateSandboxRequest{Labels: map[string]string{"thread-id": "t-" + tn}})
		if err != nil {
			t.Fatal(err)
		}
		owners[sb.GetId()] = tn
	}

	inv := p.Inventory(tenant.With(ctx, "ops"))
	if len(inv) != 3 {
		t.Fatalf("inventory of %d workers, want 3: %+v", len(inv), inv)
	}
	seen := map[string]bool{}
	for i, w := range inv[:2] {
		if w.Err != nil || w.Name == "" || !w.Healthy || w.Describe.GetName() != w.Name {
			t.Fatalf("worker %d: %+v", i, w)
		}
		for _, sb := range w.Sandboxes {
			if sb.GetWorker() != w.Name || sb.GetTenant() != owners[sb.GetId()] || sb.GetLabels()["thread-id"] != "t-"+sb.GetTenant() {
				t.Errorf("sandbox %v listed on %s; want tenant %q", sb, w.Name, owners[sb.GetId()])
			}
			seen[sb.GetId()] = true
		}
	}
	if len(seen) != len(owners) {
		t.Errorf("listed %d sandboxes, want %d", len(seen), len(owners))
	}
	if inv[0].Name > inv[1].Name {
		t.Errorf("workers not sorted by name: %s, %s", inv[0].Name, inv[1].Name)
	}
	if d := inv[2]; d.Addr != deadAddr || d.Err == nil || d.Name != "" || len(d.Sandboxes) != 0 {
		t.Errorf("dead address: %+v", d)
	}

	// A stopped worker keeps its name and shows its error; the other is
	// listed as before.
	b.stop()
	inv = p.Inventory(ctx)
	for _, w := range inv {
		switch w.Name {
		case b.name:
			if w.Err == nil || w.Describe != nil {
				t.Errorf("stopped worker: %+v", w)
			}
		case a.name:
			if w.Err != nil {
				t.Errorf("live worker: %v", w.Err)
			}
		}
	}
	b.start()

	// The operator (acting for tenant ops) deletes beta's sandbox.
	var betaID string
	for id, tn := range owners {
		if tn == "beta" {
			betaID = id
		}
	}
	owner, err := p.DeleteAny(tenant.With(ctx, "ops"), betaID)
	if err != nil || owner != "beta" {
		t.Fatalf("DeleteAny = %q, %v", owner, err)
	}
	if _, err := p.DeleteAny(ctx, betaID); sandboxapi.CodeOf(err) != sandboxapi.CodeNotFound {
		t.Errorf("delete again: %v, want sandbox_not_found", err)
	}
	// The dead address could be that worker: UNAVAILABLE, not NOT_FOUND.
	if _, err := p.DeleteAny(ctx, "sbx-nosuchworker-abc"); status.Code(err) != codes.Unavailable {
		t.Errorf("delete on an unknown worker while one is unreachable: %v, want UNAVAILABLE", err)
	}
	for _, w := range p.Inventory(ctx) {
		for _, sb := range w.Sandboxes {
			if sb.GetId() == betaID {
				t.Errorf("deleted sandbox %s still listed", betaID)
			}
		}
	}
}
