package agentd

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// The sandbox of a tenant's thread belongs to that tenant on sandboxd
// (agentd forwards it in plumb-tenant), other tenants do not see it, and
// deleting the thread deletes it.
func TestThreadSandboxCarriesTheTenant(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	s := startStack(t, w, "backends: {default: sandbox}\n")
	s.tenant = "acme"
	s.model.Script("main", modeltest.Calls(mcall("e1", "execute", `{"command":"echo hi"}`)), modeltest.Text("done"))
	thread, results := s.mustRun(input("", "Say hi."))
	wantResult(t, results, "e1", false, "hi")

	th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	sbx := th.GetThread().GetSandboxId()
	if owner, err := w.Manager.Owner(sbx); err != nil || owner != "acme" {
		t.Fatalf("sandbox %s owner %q, %v; want acme", sbx, owner, err)
	}
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, name)
	}
	if l, err := w.Client.ListSandboxes(as("beta"), &plumbv1.ListSandboxesRequest{}); err != nil || len(l.GetSandboxes()) != 0 {
		t.Fatalf("beta sees %v, %v", l.GetSandboxes(), err)
	}
	if l, err := w.Client.ListSandboxes(as("acme"), &plumbv1.ListSandboxesRequest{}); err != nil || len(l.GetSandboxes()) != 1 {
		t.Fatalf("acme sees %v, %v", l.GetSandboxes(), err)
	}
	if _, err := s.c.DeleteThread(s.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: thread}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Manager.Owner(sbx); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the thread's sandbox outlived it: %v", err)
	}
}
