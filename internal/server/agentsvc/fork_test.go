package agentsvc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

// TestForkThread (issue 19 item 5) on every thread store: a fork at the
// first run's end has that run's log and State files and the snapshot
// recorded at (or latest before) that checkpoint, listed with the
// checkpoints; at the latest checkpoint it has the thread's state; the
// original is untouched; another tenant's thread and an unknown
// checkpoint are NOT_FOUND and make no thread.
func TestForkThread(t *testing.T) {
	for _, c := range []struct {
		name string
		opts func(t *testing.T) []option
	}{
		{"sqlite", func(*testing.T) []option { return nil }},
		{"memory", func(*testing.T) []option { return []option{withMemoryStore()} }},
		{"postgres", func(t *testing.T) []option {
			st, err := postgres.Open(context.Background(), pgtest.New(t), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return []option{withShared(st, "r1")}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opts(t)...)
			e.srv.Script("main", modeltest.Calls(call("w1", "write_file", `{"file_path":"/a.txt","content":"one"}`)), modeltest.Text("first"))
			thread := e.mustRun(runReq("", "one"))[0].GetThreadId()
			cps, err := e.c.ListCheckpoints(e.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: thread})
			if err != nil {
				t.Fatal(err)
			}
			first := cps.GetCheckpoints()[len(cps.GetCheckpoints())-1]
			snaps, recorded := e.store.(store.ThreadSnapshots)
			if recorded {
				if _, err := snaps.AddThreadSnapshot(e.ctx(), store.ThreadSnapshot{ThreadID: thread, SnapshotID: "snap-first", SandboxID: "sbx-w1-x", CreatedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			e.srv.Script("main", modeltest.Calls(
				call("w2", "write_file", `{"file_path":"/b.txt","content":"bee"}`),
				call("e2", "edit_file", `{"file_path":"/a.txt","old_string":"one","new_string":"two"}`),
			), modeltest.Text("second"))
			e.mustRun(runReq(thread, "two"))

			if cps, err := e.c.ListCheckpoints(e.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: thread}); err != nil {
				t.Fatal(err)
			} else if recorded {
				for _, cp := range cps.GetCheckpoints() {
					if want := map[bool]string{true: "snap-first"}[cp.GetId() == first.GetId()]; cp.GetSnapshotId() != want {
						t.Errorf("checkpoint %d lists snapshot %q, want %q", cp.GetId(), cp.GetSnapshotId(), want)
					}
				}
			}
			before := len(e.listAll())
			for _, bad := range []struct {
				name string
				ctx  context.Context
				req  *plumbv1.ForkThreadRequest
			}{
				{"another tenant", as(e.ctx(), "beta"), &plumbv1.ForkThreadRequest{ThreadId: thread}},
				{"unknown checkpoint", e.ctx(), &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: first.GetId() + 10000}},
				{"unknown thread", e.ctx(), &plumbv1.ForkThreadRequest{ThreadId: "01NOSUCHTHREAD"}},
			} {
				if _, err := e.c.ForkThread(bad.ctx, bad.req); status.Code(err) != codes.NotFound {
					t.Errorf("%s: %v, want NOT_FOUND", bad.name, err)
				}
			}
			if n := len(e.listAll()); n != before {
				t.Errorf("%d threads after refused forks, %d before", n, before)
			}

			fork, err := e.c.ForkThread(e.ctx(), &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: first.GetId(), Metadata: map[string]string{"branch": "b"}})
			if err != nil {
				t.Fatal(err)
			}
			wantSnap := map[bool]string{true: "snap-first"}[recorded]
			if fork.GetSnapshotId() != wantSnap || fork.GetCheckpointId() != first.GetId() || fork.GetThread().GetMessageCount() != first.GetMessageCount() ||
				fork.GetThread().GetMetadata()["branch"] != "b" {
				t.Errorf("fork = %v; want snapshot %q, checkpoint %d, %d messages", fork, wantSnap, first.GetId(), first.GetMessageCount())
			}
			files := func(id string) map[string]int64 {
				t.Helper()
				resp, err := e.c.ListStateFiles(e.ctx(), &plumbv1.ListStateFilesRequest{ThreadId: id})
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]int64{}
				for _, f := range resp.GetFiles() {
					out[f.GetPath()] = f.GetSize()
				}
				return out
			}
			if got := files(fork.GetThread().GetId()); len(got) != 1 || got["/a.txt"] != 3 {
				t.Errorf("fork's State files %v, want /a.txt of the first run only", got)
			}
			if got := files(thread); len(got) != 2 {
				t.Errorf("original's State files %v, want /a.txt and /b.txt", got)
			}
			latest, err := e.c.ForkThread(e.ctx(), &plumbv1.ForkThreadRequest{ThreadId: thread})
			if err != nil {
				t.Fatal(err)
			}
			if got := files(latest.GetThread().GetId()); len(got) != 2 {
				t.Errorf("fork at the latest checkpoint has State files %v, want both", got)
			}
			if latest.GetSnapshotId() != wantSnap {
				t.Errorf("fork at the latest checkpoint names snapshot %q, want the latest before it, %q", latest.GetSnapshotId(), wantSnap)
			}
		})
	}
}

// listAll lists the default tenant's threads.
func (e *env) listAll() []*plumbv1.Thread {
	e.t.Helper()
	resp, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{PageSize: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetThreads()
}
