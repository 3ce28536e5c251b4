package sandboxsvc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// A sandbox belongs to the tenant that created it: it is labelled with
// it, listed only for it, and every other tenant's call finds nothing.
func TestSandboxTenant(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(base, tenant.MetadataKey, name)
	}

	sb, err := c.CreateSandbox(as("acme"), &plumbv1.CreateSandboxRequest{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	if owner, err := wk.Manager.Owner(id); err != nil || owner != "acme" {
		t.Fatalf("owner %q, %v", owner, err)
	}
	if !sandbox.IsOwnLabel(sandbox.LabelTenant) {
		t.Error("the tenant label is not one of the worker's own")
	}

	for _, other := range []context.Context{as("beta"), base} {
		calls := map[string]func() error{
			"GetSandbox": func() error {
				_, err := c.GetSandbox(other, &plumbv1.GetSandboxRequest{SandboxId: id})
				return err
			},
			"Ls": func() error { _, err := c.Ls(other, &plumbv1.LsRequest{SandboxId: id}); return err },
			"Execute": func() error {
				_, err := c.Execute(other, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}})
				return err
			},
			"KeepAlive": func() error {
				_, err := c.KeepAlive(other, &plumbv1.KeepAliveRequest{SandboxId: id})
				return err
			},
			"DeleteSandbox": func() error {
				_, err := c.DeleteSandbox(other, &plumbv1.DeleteSandboxRequest{SandboxId: id})
				return err
			},
			"DownloadFiles": func() error {
				s, err := c.DownloadFiles(other, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{"/x"}})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
		}
		for name, call := range calls {
			if err := call(); status.Code(err) != codes.NotFound {
				t.Errorf("%s by another tenant: %v, want NOT_FOUND", name, err)
			}
		}
		list, err := c.ListSandboxes(other, &plumbv1.ListSandboxesRequest{})
		if err != nil || len(list.GetSandboxes()) != 0 {
			t.Errorf("another tenant lists %v, %v", list.GetSandboxes(), err)
		}
	}
	list, err := c.ListSandboxes(as("acme"), &plumbv1.ListSandboxesRequest{Labels: map[string]string{"k": "v"}})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetId() != id {
		t.Fatalf("acme lists %v, %v", list.GetSandboxes(), err)
	}
	if _, err := c.Execute(as("acme"), &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSandbox(as("acme"), &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
}
