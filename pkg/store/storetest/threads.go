package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// RunThreads runs the cases of the durable stores' store.Threads contract
// (listing, deletion, sandboxes, checkpoint retention) against a fresh
// store from newStore, which keeps retention checkpoint records per thread.
func RunThreads(t *testing.T, newStore func(t *testing.T, retention int) store.Threads) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, newStore func(t *testing.T, retention int) store.Threads)
	}{
		{"List", testList},
		{"ListedState", testListedState},
		{"Delete", testDelete},
		{"Sandbox", testSandbox},
		{"Retention", testRetention},
		{"Tenant", testTenant},
		{"MessageRange", testMessageRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore) })
	}
}

func save(t *testing.T, s agent.Store, cp agent.Checkpoint) {
	t.Helper()
	if err := s.SaveCheckpoint(ctx(), &cp); err != nil {
		t.Fatal(err)
	}
}

func ids(list []store.ThreadInfo) string {
	out := []string{}
	for _, d := range list {
		out = append(out, d.Thread.ID)
	}
	return fmt.Sprint(out)
}

func testList(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	for i := range 7 {
		tenant := "a"
		if i%2 == 1 {
			tenant = "b"
		}
		if err := s.CreateThread(ctx(), agent.Thread{ID: fmt.Sprintf("t%d", i), CreatedAt: t0.Add(time.Duration(i) * time.Minute),
			Metadata: map[string]string{"tenant": tenant}}); err != nil {
			t.Fatal(err)
		}
	}
	// t6 gets an interrupt, t4 a running run; ta and tb tie on updated_at
	// (ids break the tie).
	save(t, s, agent.Checkpoint{ThreadID: "t6", Interrupt: &agent.PendingInterrupt{InterruptID: "i"}, Run: run("r6", agent.StatusInterrupted), CreatedAt: t0.Add(10 * time.Minute)})
	save(t, s, agent.Checkpoint{ThreadID: "t4", Run: run("r4", agent.StatusRunning), CreatedAt: t0.Add(11 * time.Minute)})
	tests := []struct {
		name string
		q    store.ListQuery
		want string
	}{
		{"all newest first", store.ListQuery{}, "[t4 t6 t5 t3 t2 t1 t0]"},
		{"label", store.ListQuery{Labels: map[string]string{"tenant": "a"}}, "[t4 t6 t2 t0]"},
		{"two labels no match", store.ListQuery{Labels: map[string]string{"tenant": "a", "x": "y"}}, "[]"},
		{"interrupted", store.ListQuery{Status: agent.ThreadInterrupted}, "[t6]"},
		{"running", store.ListQuery{Status: agent.ThreadRunning}, "[t4]"},
		{"idle", store.ListQuery{Status: agent.ThreadIdle, Labels: map[string]string{"tenant": "b"}}, "[t5 t3 t1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next, err := s.ListThreads(ctx(), tt.q)
			if err != nil || ids(got) != tt.want || next != "" {
				t.Fatalf("got %s next %q err %v, want %s", ids(got), next, err, tt.want)
			}
		})
	}

	for _, id := range []string{"tb", "ta", "tc"} {
		if err := s.CreateThread(ctx(), agent.Thread{ID: id, CreatedAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var pages []string
	tok := ""
	for range 10 {
		got, next, err := s.ListThreads(ctx(), store.ListQuery{PageSize: 3, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, ids(got))
		if tok = next; tok == "" {
			break
		}
	}
	if fmt.Sprint(pages) != "[[tc tb ta] [t4 t6 t5] [t3 t2 t1] [t0]]" {
		t.Fatalf("pages = %v", pages)
	}
	for _, bad := range []string{"garbage!", "MTo", "eDp5"} { // not base64; "1:"; "x:y"
		if _, _, err := s.ListThreads(ctx(), store.ListQuery{PageToken: bad}); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("token %q: %v, want ErrBadPageToken", bad, err)
		}
	}
}

// testListedState: a listed thread carries its record, state, last run,
// usage and log length, but not the log itself.
func testListedState(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	mustCreate(t, s, "t1")
	r := run("r1", agent.StatusInterrupted)
	r.Usage = model.Usage{Prompt: 3, Completion: 2, Total: 5}
	intr := &agent.PendingInterrupt{InterruptID: "i1", RunID: "r1", CreatedAt: t0}
	save(t, s, agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInterrupt, Append: []agent.Message{msg(model.RoleUser, "a"), msg(model.RoleAssistant, "b")},
		Todos: []agent.Todo{{Content: "x", Status: agent.TodoPending}}, Interrupt: intr, Run: r, CreatedAt: t0.Add(time.Second)})
	got, _, err := s.ListThreads(ctx(), store.ListQuery{})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListThreads = %v, %v", ids(got), err)
	}
	d := got[0]
	if d.MessageCount != 2 || len(d.Messages) != 0 || d.Thread.Metadata["tenant"] != "a" || !d.Thread.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("listed thread = %+v, %d messages counted, %d carried", d.Thread, d.MessageCount, len(d.Messages))
	}
	if !reflect.DeepEqual(d.Interrupt, intr) || len(d.Todos) != 1 || d.LastRun == nil || d.LastRun.RunID != "r1" || d.Usage != r.Usage || d.Status() != agent.ThreadInterrupted {
		t.Errorf("listed state = interrupt %+v todos %+v last run %+v usage %+v", d.Interrupt, d.Todos, d.LastRun, d.Usage)
	}
}

// testDelete: a deleted thread is gone with everything stored with it; an
// id can be reused afterwards and starts empty.
func testDelete(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	mustCreate(t, s, "t1")
	mustCreate(t, s, "t2")
	save(t, s, agent.Checkpoint{ThreadID: "t1", Append: []agent.Message{msg(model.RoleUser, "a")}, Files: map[string]json.RawMessage{"/a": json.RawMessage(`{"content":"a"}`)},
		Interrupt: &agent.PendingInterrupt{InterruptID: "i"}, Metadata: map[string]string{"env": "dev"}, Run: run("r1", agent.StatusInterrupted), CreatedAt: t0})
	if err := s.DeleteThread(ctx(), "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadThread(ctx(), "t1"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("load after delete: %v, want ErrThreadNotFound", err)
	}
	if err := s.DeleteThread(ctx(), "t1"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("second delete: %v, want ErrThreadNotFound", err)
	}
	if got, _, err := s.ListThreads(ctx(), store.ListQuery{}); err != nil || ids(got) != "[t2]" {
		t.Fatalf("list after delete = %s, %v", ids(got), err)
	}
	if err := s.CreateThread(ctx(), agent.Thread{ID: "t1", CreatedAt: t0}); err != nil {
		t.Fatalf("reuse a deleted id: %v", err)
	}
	d := mustLoad(t, s, "t1")
	if len(d.Messages)+len(d.Checkpoints)+len(d.Files)+len(d.Thread.Metadata) != 0 || d.LastRun != nil || d.Interrupt != nil || d.Usage != (model.Usage{}) {
		t.Errorf("a reused id inherits the deleted thread: %+v", d)
	}
	if got, _, err := s.ListThreads(ctx(), store.ListQuery{Labels: map[string]string{"env": "dev"}}); err != nil || ids(got) != "[]" {
		t.Errorf("deleted labels still match: %s, %v", ids(got), err)
	}
}

func testSandbox(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	mustCreate(t, s, "t1")
	if err := s.SetSandbox(ctx(), "t1", "sbx-w0-1"); err != nil {
		t.Fatal(err)
	}
	th, err := s.Thread(ctx(), "t1")
	if err != nil || th.SandboxID != "sbx-w0-1" || th.Metadata["tenant"] != "a" || !th.CreatedAt.Equal(t0) {
		t.Fatalf("Thread = %+v, %v", th, err)
	}
	if err := s.SetSandbox(ctx(), "t1", ""); err != nil {
		t.Fatal(err)
	}
	if th, err := s.Thread(ctx(), "t1"); err != nil || th.SandboxID != "" {
		t.Fatalf("cleared sandbox: %+v, %v", th, err)
	}
	if err := s.SetSandbox(ctx(), "nope", "x"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("SetSandbox of an unknown thread: %v, want ErrThreadNotFound", err)
	}
	if _, err := s.Thread(ctx(), "nope"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("Thread of an unknown id: %v, want ErrThreadNotFound", err)
	}
}

func testRetention(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 3)
	mustCreate(t, s, "t1")
	for i := range 5 {
		save(t, s, agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Step: i, Base: i, Append: []agent.Message{msg(model.RoleUser, fmt.Sprint(i))},
			Run: run("r1", agent.StatusRunning), CreatedAt: t0})
	}
	d := mustLoad(t, s, "t1")
	var steps []int
	for _, c := range d.Checkpoints {
		steps = append(steps, c.Step)
	}
	if fmt.Sprint(steps) != "[2 3 4]" || len(d.Messages) != 5 {
		t.Fatalf("kept checkpoints of steps %v and %d messages; want [2 3 4] and 5", steps, len(d.Messages))
	}
}

// testTenant: a thread keeps its tenant ("" is stored as "default"), and
// listing filters by it.
func testTenant(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	for i, tenant := range []string{"acme", "", "beta", "acme"} {
		if err := s.CreateThread(ctx(), agent.Thread{ID: fmt.Sprintf("t%d", i), CreatedAt: t0.Add(time.Duration(i) * time.Minute), Tenant: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"t0": "acme", "t1": store.DefaultTenant, "t2": "beta"} {
		th, err := s.Thread(ctx(), id)
		if err != nil || th.Tenant != want {
			t.Errorf("Thread(%s).Tenant = %q, %v; want %q", id, th.Tenant, err, want)
		}
		td, err := s.LoadThread(ctx(), id)
		if err != nil || td.Thread.Tenant != want {
			t.Errorf("LoadThread(%s) tenant = %v, %v; want %q", id, td, err, want)
		}
	}
	// A checkpoint does not lose the tenant.
	save(t, s, agent.Checkpoint{ThreadID: "t0", Run: run("r0", agent.StatusCompleted), CreatedAt: t0.Add(time.Hour)})
	if th, err := s.Thread(ctx(), "t0"); err != nil || th.Tenant != "acme" {
		t.Errorf("after a checkpoint: tenant %q, %v", th.Tenant, err)
	}
	for tenant, want := range map[string]string{"acme": "[t0 t3]", store.DefaultTenant: "[t1]", "beta": "[t2]", "nobody": "[]", "": "[t0 t3 t2 t1]"} {
		list, _, err := s.ListThreads(ctx(), store.ListQuery{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(list); got != want {
			t.Errorf("tenant %q: %s, want %s", tenant, got, want)
		}
		for _, ti := range list {
			if tenant != "" && ti.Thread.Tenant != tenant {
				t.Errorf("listed %s with tenant %q", ti.Thread.ID, ti.Thread.Tenant)
			}
		}
	}
	// Pages stay within the tenant.
	page, next, err := s.ListThreads(ctx(), store.ListQuery{Tenant: "acme", PageSize: 1})
	if err != nil || ids(page) != "[t0]" || next == "" {
		t.Fatalf("first page: %s %q %v", ids(page), next, err)
	}
	page, next, err = s.ListThreads(ctx(), store.ListQuery{Tenant: "acme", PageSize: 1, PageToken: next})
	if err != nil || ids(page) != "[t3]" {
		t.Fatalf("second page: %s %q %v", ids(page), next, err)
	}
}

// testMessageRange reads parts of a log of seven messages: pages, the
// end, past the end, and an unknown thread.
func testMessageRange(t *testing.T, newStore func(*testing.T, int) store.Threads) {
	s := newStore(t, 0)
	r, ok := s.(store.MessageRanger)
	if !ok {
		t.Fatalf("%T does not implement store.MessageRanger", s)
	}
	if err := s.CreateThread(ctx(), agent.Thread{ID: "t1", CreatedAt: t0, Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	var log []agent.Message
	for i := range 7 {
		log = append(log, msg(model.RoleUser, fmt.Sprint("m", i)))
	}
	save(t, s, agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Append: log[:4], Run: run("r1", agent.StatusRunning), CreatedAt: t0})
	save(t, s, agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseFinal, Base: 4, Append: log[4:], Run: run("r1", agent.StatusCompleted), CreatedAt: t0})
	tests := []struct {
		first, limit int
		want         string
	}{
		{0, 3, "[m0 m1 m2]"},
		{3, 3, "[m3 m4 m5]"},
		{5, 10, "[m5 m6]"},
		{7, 3, "[]"},
		{100, 3, "[]"},
		{2, 0, "[]"},
	}
	for _, tt := range tests {
		got, err := r.MessageRange(ctx(), "t1", tt.first, tt.limit)
		if err != nil {
			t.Fatalf("MessageRange(%d, %d): %v", tt.first, tt.limit, err)
		}
		texts := []string{}
		for _, m := range got.Messages {
			texts = append(texts, m.Content)
		}
		if fmt.Sprint(texts) != tt.want || got.Total != 7 || got.Tenant != "acme" {
			t.Errorf("MessageRange(%d, %d) = %v (total %d, tenant %q), want %s of 7, acme", tt.first, tt.limit, texts, got.Total, got.Tenant, tt.want)
		}
	}
	if _, err := r.MessageRange(ctx(), "nope", 0, 3); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("unknown thread: %v, want ErrThreadNotFound", err)
	}
}
