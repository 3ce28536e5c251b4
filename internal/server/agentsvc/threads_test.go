package agentsvc_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// Scenario 77: the label filter, DeleteThread (with the cleanup hook),
// GetThread NOT_FOUND after it, and a running thread that cannot be
// deleted without force.
func TestScenario77ListDeleteGet(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Text("A"), modeltest.Text("B"))
	reqA, reqB := runReq("", "for a"), runReq("", "for b")
	reqA.Metadata, reqB.Metadata = map[string]string{"tenant": "a"}, map[string]string{"tenant": "b"}
	a := e.mustRun(reqA)[0].GetThreadId()
	b := e.mustRun(reqB)[0].GetThreadId()

	list, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{Labels: map[string]string{"tenant": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := threadIDs(list); !slices.Equal(ids, []string{a}) {
		t.Fatalf("tenant=a lists %v, want [%s]", ids, a)
	}
	if th := list.GetThreads()[0]; th.GetMetadata()["tenant"] != "a" || th.GetMessageCount() != 2 || th.GetLastRun().GetFinalText() != "A" {
		t.Errorf("listed thread %v", th)
	}

	if _, err := e.c.DeleteThread(e.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: a}); err != nil {
		t.Fatal(err)
	}
	if got := e.deletedIDs(); !slices.Equal(got, []string{a}) {
		t.Errorf("cleanup hook saw %v", got)
	}
	_, err = e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: a})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = e.c.DeleteThread(e.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: a})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = recvAttach(e, a, 0) // the retained replay went with it
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	list, err = e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{})
	if err != nil || !slices.Equal(threadIDs(list), []string{b}) {
		t.Errorf("after delete: %v, %v", threadIDs(list), err)
	}

	// A running thread.
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)))
	s, err := e.c.Run(e.ctx(), runReq(b, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, s, "tool_call_started")
	_, err = e.c.DeleteThread(e.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: b})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonThreadRunning)
	list, err = e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{Status: plumbv1.ThreadStatus_THREAD_STATUS_RUNNING})
	if err != nil || !slices.Equal(threadIDs(list), []string{b}) {
		t.Errorf("RUNNING lists %v, %v", threadIDs(list), err)
	}
	// force cancels the run first.
	if _, err := e.c.DeleteThread(e.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: b, Force: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(s)
	if err != nil || last(t, evs).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("the deleted thread's run ended with %v, %v", kinds(evs, false), err)
	}
	_, err = e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: b})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	if got := e.deletedIDs(); !slices.Equal(got, []string{a, b}) {
		t.Errorf("cleanup hook saw %v", got)
	}
}

func threadIDs(res *plumbv1.ListThreadsResponse) []string {
	var out []string
	for _, th := range res.GetThreads() {
		out = append(out, th.GetId())
	}
	return out
}

// A failing cleanup hook (the sandbox could not be deleted) fails the RPC
// with the hook's mapped error and keeps the thread.
func TestDeleteThreadHookFailureKeepsThread(t *testing.T) {
	e := newEnv(t, withService(func(c *agentsvc.Config) {
		c.OnDeleteThread = func(context.Context, *agent.ThreadData) error {
			return &sandbox.Error{Code: sandbox.CodeUnavailable, Message: "sandboxd is down"}
		}
	}))
	th, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.DeleteThread(e.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: th.GetThread().GetId()})
	wantStatus(t, err, codes.Unavailable, "")
	e.thread(th.GetThread().GetId(), plumbv1.ThreadView_THREAD_VIEW_BASIC)
}

// CreateThread and both GetThread views; FULL has the log, the seeded and
// written State files and the checkpoints.
func TestCreateAndGetThread(t *testing.T) {
	e := newEnv(t)
	created, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{Metadata: map[string]string{"tenant": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	th := created.GetThread()
	if th.GetId() == "" || th.GetMetadata()["tenant"] != "a" || th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_IDLE ||
		th.GetCreatedAt() == nil || th.GetMessageCount() != 0 || th.GetLastRun() != nil {
		t.Fatalf("created %v", th)
	}
	_, err = e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{Metadata: map[string]string{"Bad Key": "a"}})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)

	e.srv.Script("main",
		modeltest.Calls(call("c1", "write_file", `{"file_path":"/out.txt","content":"hello"}`), call("c2", "write_todos", `{"todos":[{"content":"a","status":"in_progress"}]}`)),
		modeltest.Text("done"))
	req := runReq(th.GetId(), "write")
	req.Files = map[string]string{"/in.txt": "seed"}
	req.Metadata = map[string]string{"stage": "one"}
	e.mustRun(req)

	basic := e.thread(th.GetId(), plumbv1.ThreadView_THREAD_VIEW_UNSPECIFIED)
	if len(basic.GetMessages()) != 0 || len(basic.GetFiles()) != 0 || len(basic.GetCheckpoints()) != 0 {
		t.Errorf("BASIC view carries FULL fields")
	}
	if basic.GetMessageCount() != 5 || len(basic.GetTodos()) != 1 || basic.GetUsage().GetTotalTokens() == 0 ||
		basic.GetMetadata()["tenant"] != "a" || basic.GetMetadata()["stage"] != "one" {
		t.Errorf("BASIC %v", basic)
	}
	full := e.thread(th.GetId(), plumbv1.ThreadView_THREAD_VIEW_FULL)
	if len(full.GetMessages()) != 5 || full.GetMessages()[1].GetToolCalls()[0].GetId() != "c1" || full.GetMessages()[2].GetToolCallId() != "c1" {
		t.Errorf("messages %v", full.GetMessages())
	}
	var files []string
	for _, f := range full.GetFiles() {
		files = append(files, f.GetPath())
		if f.GetSize() == 0 || f.GetModifiedAt() == nil {
			t.Errorf("file %v", f)
		}
	}
	if !slices.Equal(files, []string{"/in.txt", "/out.txt"}) {
		t.Errorf("files %v", files)
	}
	cps := full.GetCheckpoints()
	if len(cps) == 0 || cps[0].GetPhase() != plumbv1.CheckpointPhase_CHECKPOINT_PHASE_INPUT || cps[len(cps)-1].GetPhase() != plumbv1.CheckpointPhase_CHECKPOINT_PHASE_FINAL {
		t.Errorf("checkpoints %v", cps)
	}
	_, err = e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
}

// ListThreads pages newest first on both stores; bad page tokens and
// sizes are INVALID_ARGUMENT; the status filter applies.
func TestListThreadsPaging(t *testing.T) {
	for _, store := range []string{"sqlite", "memory"} {
		t.Run(store, func(t *testing.T) {
			var opts []option
			if store == "memory" {
				opts = append(opts, withMemoryStore())
			}
			e := newEnv(t, append(opts, gate(map[string]profile.InterruptRule{"echo": {}}))...)
			var made []string
			for range 5 {
				th, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{Metadata: map[string]string{"suite": "paging"}})
				if err != nil {
					t.Fatal(err)
				}
				made = append(made, th.GetThread().GetId())
			}
			e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"x"}`)))
			e.mustRun(runReq(made[1], "interrupt me")) // now the newest, INTERRUPTED
			newest := []string{made[1], made[4], made[3], made[2], made[0]}

			var got []string
			token := ""
			for page := 0; ; page++ {
				res, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{PageSize: 2, PageToken: token, Labels: map[string]string{"suite": "paging"}})
				if err != nil {
					t.Fatal(err)
				}
				if n := len(res.GetThreads()); n > 2 || (n < 2 && res.GetNextPageToken() != "") {
					t.Fatalf("page %d has %d threads, next %q", page, n, res.GetNextPageToken())
				}
				got = append(got, threadIDs(res)...)
				if token = res.GetNextPageToken(); token == "" {
					break
				}
			}
			if !slices.Equal(got, newest) {
				t.Errorf("paged %v, want %v", got, newest)
			}
			res, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{Status: plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED})
			if err != nil || !slices.Equal(threadIDs(res), []string{made[1]}) {
				t.Errorf("INTERRUPTED lists %v, %v", threadIDs(res), err)
			}
			if th := res.GetThreads()[0]; th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED || th.GetPendingInterrupt().GetRequests()[0].GetToolCallId() != "c1" {
				t.Errorf("interrupted thread %v", th)
			}
			res, err = e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{Status: plumbv1.ThreadStatus_THREAD_STATUS_IDLE, PageSize: 1000})
			if err != nil || len(res.GetThreads()) != 4 {
				t.Errorf("IDLE lists %v, %v", threadIDs(res), err)
			}

			for _, bad := range []struct {
				name  string
				req   *plumbv1.ListThreadsRequest
				field string
			}{
				{"garbage token", &plumbv1.ListThreadsRequest{PageToken: "not a token!"}, "page_token"},
				{"well-formed base64, wrong content", &plumbv1.ListThreadsRequest{PageToken: "bm9jb2xvbg"}, "page_token"},
				{"negative page size", &plumbv1.ListThreadsRequest{PageSize: -1}, "page_size"},
				{"bad label key", &plumbv1.ListThreadsRequest{Labels: map[string]string{"A": "b"}}, `labels["A"]`},
			} {
				_, err := e.c.ListThreads(e.ctx(), bad.req)
				wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
				if f := fields(err); !slices.Equal(f, []string{bad.field}) {
					t.Errorf("%s: violations %v, want %s", bad.name, f, bad.field)
				}
			}
		})
	}
}

// ListAgents lists the built-in primaries and subagents with expanded
// tools and the configured interrupt_on rules.
func TestListAgents(t *testing.T) {
	e := newEnv(t, gate(map[string]profile.InterruptRule{
		"execute": {Allowed: []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject}, Description: "Shell command"},
		"delete":  {},
	}))
	res, err := e.c.ListAgents(e.ctx(), &plumbv1.ListAgentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*plumbv1.AgentInfo{}
	var names []string
	for _, a := range res.GetAgents() {
		byName[a.GetName()] = a
		names = append(names, a.GetName())
	}
	if !slices.Equal(names, []string{"main", "plan", "bash", "explore", "general-purpose"}) {
		t.Fatalf("agents %v", names)
	}
	main := byName["main"]
	if main.GetKind() != plumbv1.AgentKind_AGENT_KIND_PRIMARY || main.GetModel() != "smart" ||
		!slices.Contains(main.GetTools(), "write_file") || !slices.Contains(main.GetTools(), "echo") || !slices.Contains(main.GetTools(), "task") ||
		!slices.Equal(main.GetSubagents(), []string{"bash", "explore", "general-purpose"}) {
		t.Errorf("main %v", main)
	}
	rules := main.GetInterruptOn()
	if len(rules) != 2 || rules[0].GetTool() != "delete" || len(rules[0].GetAllowedDecisions()) != 4 || rules[0].GetDescription() != "Approval required: delete" ||
		rules[1].GetTool() != "execute" || rules[1].GetDescription() != "Shell command" ||
		!slices.Equal(rules[1].GetAllowedDecisions(), []plumbv1.DecisionType{plumbv1.DecisionType_DECISION_TYPE_APPROVE, plumbv1.DecisionType_DECISION_TYPE_REJECT}) {
		t.Errorf("interrupt_on %v", rules)
	}
	if ex := byName["explore"]; ex.GetKind() != plumbv1.AgentKind_AGENT_KIND_SUBAGENT || !slices.Equal(ex.GetTools(), []string{"glob", "grep", "ls", "read_file"}) {
		t.Errorf("explore %v", ex)
	}
	if pl := byName["plan"]; !slices.Equal(pl.GetTools(), []string{"glob", "grep", "ls", "read_file", "task", "write_todos"}) || !slices.Equal(pl.GetSubagents(), []string{"explore"}) {
		t.Errorf("plan %v", pl)
	}
}

// New rejects a missing runtime or store.
func TestNewValidatesConfig(t *testing.T) {
	if _, err := agentsvc.New(agentsvc.Config{}); err == nil {
		t.Error("no runtime accepted")
	}
	e := newEnv(t)
	_, err := agentsvc.New(agentsvc.Config{Runtime: e.rt})
	if err == nil {
		t.Error("no thread store accepted")
	}
	_, err = agentsvc.New(agentsvc.Config{Runtime: e.rt, Config: runhost.Config{Threads: runhost.MemoryThreads(agent.NewMemoryStore()), MaxConcurrentRuns: -1}})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("negative limit: %v", err)
	}
}
