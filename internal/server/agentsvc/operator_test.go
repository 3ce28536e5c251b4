package agentsvc_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

// fakeFleet stands in for the worker pool (internal/fleet tests the real
// one against real workers; test/browser the whole path).
type fakeFleet struct {
	workers []fleet.Worker
	owners  map[string]string // sandbox id → tenant
	deleted []string          // "id by tenant"
}

func (f *fakeFleet) Inventory(context.Context) []fleet.Worker { return f.workers }

func (f *fakeFleet) DeleteAny(ctx context.Context, id string) (string, error) {
	owner, ok := f.owners[id]
	if !ok {
		return "", &sandboxapi.Error{Code: sandboxapi.CodeNotFound, Message: "sandbox " + id + " not found"}
	}
	delete(f.owners, id)
	f.deleted = append(f.deleted, id+" by "+tenant.From(ctx))
	return owner, nil
}

// operatorClient serves e's service behind a credential check with a
// tenant token and an operator token.
func operatorClient(t *testing.T, e *env) (plumbv1.AgentServiceClient, func(tok string) context.Context) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte("acme a-tok\nops o-tok operator\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := daemon.LoadCredentials(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(daemon.ServerAuth(creds)...)
	plumbv1.RegisterAgentServiceServer(gs, e.svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return plumbv1.NewAgentServiceClient(conn), func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(e.ctx(), "authorization", "Bearer "+tok)
	}
}

// The operator RPCs answer an operator credential only: a tenant's gets
// PERMISSION_DENIED (OPERATOR_ONLY) and learns nothing of the fleet.
func TestOperatorRPCs(t *testing.T) {
	f := &fakeFleet{
		workers: []fleet.Worker{
			{Addr: "10.0.0.1:7071", Name: "w1", Healthy: true, Describe: &plumbv1.DescribeWorkerResponse{Name: "w1", Sandboxes: 1},
				Sandboxes: []*plumbv1.Sandbox{{Id: "sbx-w1-abc", Worker: "w1", Tenant: "acme", Labels: map[string]string{"thread-id": "t1"}}}},
			{Addr: "10.0.0.2:7071", Name: "w2", Err: errors.New("sandboxd worker w2 is unreachable")},
		},
		owners: map[string]string{"sbx-w1-abc": "acme"},
	}
	e := newEnv(t, withService(func(c *agentsvc.Config) { c.Fleet = f }))
	c, with := operatorClient(t, e)

	t.Run("a tenant is refused", func(t *testing.T) {
		_, err := c.ListFleetSandboxes(with("a-tok"), &plumbv1.ListFleetSandboxesRequest{})
		wantStatus(t, err, codes.PermissionDenied, agentsvc.ReasonOperatorOnly)
		_, err = c.DeleteFleetSandbox(with("a-tok"), &plumbv1.DeleteFleetSandboxRequest{SandboxId: "sbx-w1-abc"})
		wantStatus(t, err, codes.PermissionDenied, agentsvc.ReasonOperatorOnly)
		if len(f.deleted) != 0 {
			t.Fatalf("a tenant's delete reached the fleet: %v", f.deleted)
		}
	})
	t.Run("an operator lists every worker", func(t *testing.T) {
		r, err := c.ListFleetSandboxes(with("o-tok"), &plumbv1.ListFleetSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ws := r.GetWorkers()
		if len(ws) != 2 {
			t.Fatalf("workers %v", ws)
		}
		if w := ws[0]; !w.GetReachable() || !w.GetHealthy() || w.GetError() != "" || w.GetDescribe().GetSandboxes() != 1 ||
			len(w.GetSandboxes()) != 1 || w.GetSandboxes()[0].GetTenant() != "acme" || w.GetAddress() != "10.0.0.1:7071" {
			t.Errorf("live worker %v", w)
		}
		if w := ws[1]; w.GetReachable() || w.GetHealthy() || w.GetError() == "" || w.GetDescribe() != nil || w.GetName() != "w2" {
			t.Errorf("unreachable worker %v", w)
		}
	})
	tests := []struct {
		name, id string
		code     codes.Code
		reason   string
	}{
		{"no id", "", codes.InvalidArgument, agentsvc.ReasonInvalidArgument},
		{"not an id", "nope", codes.InvalidArgument, agentsvc.ReasonInvalidArgument},
		{"another tenant's box", "sbx-w1-abc", codes.OK, ""},
		{"gone", "sbx-w1-abc", codes.NotFound, string(sandboxapi.CodeNotFound)},
	}
	for _, tt := range tests {
		t.Run("delete: "+tt.name, func(t *testing.T) {
			r, err := c.DeleteFleetSandbox(with("o-tok"), &plumbv1.DeleteFleetSandboxRequest{SandboxId: tt.id})
			if tt.code != codes.OK {
				wantStatus(t, err, tt.code, tt.reason)
				if tt.code == codes.InvalidArgument {
					if fs := fields(err); len(fs) != 1 || fs[0] != "sandbox_id" {
						t.Errorf("field violations %v, want sandbox_id", fs)
					}
				}
				return
			}
			if err != nil || r.GetTenant() != "acme" {
				t.Fatalf("delete = %v, %v", r, err)
			}
			if len(f.deleted) != 1 || f.deleted[0] != "sbx-w1-abc by ops" {
				t.Errorf("deleted %v", f.deleted)
			}
		})
	}
}

// Without sandboxd an operator is told so; a tenant is still refused
// first (it learns nothing about agentd's setup).
func TestOperatorRPCsWithoutSandboxd(t *testing.T) {
	e := newEnv(t)
	c, with := operatorClient(t, e)
	_, err := c.ListFleetSandboxes(with("o-tok"), &plumbv1.ListFleetSandboxesRequest{})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonNoSandboxd)
	_, err = c.ListFleetSandboxes(with("a-tok"), &plumbv1.ListFleetSandboxesRequest{})
	wantStatus(t, err, codes.PermissionDenied, agentsvc.ReasonOperatorOnly)
}
