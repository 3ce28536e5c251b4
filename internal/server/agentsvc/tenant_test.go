package agentsvc_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func as(ctx context.Context, name string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, name)
}

// Another tenant's thread is NOT_FOUND on every thread RPC, and is not
// listed; its owner still reaches it.
func TestTenantIsolation(t *testing.T) {
	for name, opts := range map[string][]option{"durable": nil, "memory": {withMemoryStore()}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, opts...)
			e.srv.Script("main", modeltest.Text("A"), modeltest.Text("B"))
			s, err := e.c.Run(as(e.ctx(), "acme"), runReq("", "hello"))
			if err != nil {
				t.Fatal(err)
			}
			evs, err := recvAll(s)
			if err != nil {
				t.Fatal(err)
			}
			id := evs[0].GetThreadId()
			ct, err := e.c.CreateThread(as(e.ctx(), "acme"), &plumbv1.CreateThreadRequest{})
			if err != nil {
				t.Fatal(err)
			}

			other := as(e.ctx(), "beta")
			notFound := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: another tenant's thread was reachable", what)
				}
				wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
			}
			_, err = e.c.GetThread(other, &plumbv1.GetThreadRequest{ThreadId: id})
			notFound("GetThread", err)
			_, err = e.c.ListMessages(other, &plumbv1.ListMessagesRequest{ThreadId: id})
			notFound("ListMessages", err)
			_, err = e.c.Cancel(other, &plumbv1.CancelRequest{ThreadId: id})
			notFound("Cancel", err)
			_, err = e.c.DeleteThread(other, &plumbv1.DeleteThreadRequest{ThreadId: id, Force: true})
			notFound("DeleteThread", err)
			rs, err := e.c.Run(other, runReq(id, "mine now"))
			if err == nil {
				_, err = recvAll(rs)
			}
			notFound("Run", err)
			ats, err := e.c.Attach(other, &plumbv1.AttachRequest{ThreadId: id})
			if err == nil {
				_, err = recvAll(ats)
			}
			notFound("Attach", err)
			rr, err := e.c.Resume(other, &plumbv1.ResumeRequest{ThreadId: id, InterruptId: "x"})
			if err == nil {
				_, err = recvAll(rr)
			}
			notFound("Resume", err)

			list, err := e.c.ListThreads(other, &plumbv1.ListThreadsRequest{})
			if err != nil || len(list.GetThreads()) != 0 {
				t.Fatalf("beta lists %v, %v", threadIDs(list), err)
			}
			list, err = e.c.ListThreads(as(e.ctx(), "acme"), &plumbv1.ListThreadsRequest{})
			if ids := threadIDs(list); err != nil || !slices.Contains(ids, id) || !slices.Contains(ids, ct.GetThread().GetId()) || len(ids) != 2 {
				t.Fatalf("acme lists %v, %v", ids, err)
			}
			// Callers without a tenant act for "default", which owns neither.
			if _, err := e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: id}); err == nil {
				t.Fatal("the default tenant reached acme's thread")
			}
			// The owner continues its thread.
			s, err = e.c.Run(as(e.ctx(), "acme"), runReq(id, "again"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := recvAll(s); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.DeleteThread(as(e.ctx(), "acme"), &plumbv1.DeleteThreadRequest{ThreadId: id}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
