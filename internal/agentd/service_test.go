package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/daemon/tracing"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/store"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// stack is agentd as cmd/agentd wires it: Build from a config document,
// AgentService over bufconn, a scripted model, and optionally a real
// sandbox worker on the local Docker Engine.
type stack struct {
	t      *testing.T
	model  *modeltest.Server
	worker *sandboxsvctest.Worker
	core   *Agentd
	c      plumbv1.AgentServiceClient
	// tenant, if set, is sent in plumb-tenant on every call.
	tenant string
}

// startStack builds agentd from the common header plus extra (backends,
// tools, ...). With a worker, sandbox.address points at it.
func startStack(t *testing.T, w *sandboxsvctest.Worker, extra string) *stack {
	t.Helper()
	return startStackWith(t, w, extra, Options{})
}

// startTracedStack is startStack with tracing: tr traces the agent core,
// its AgentService server and its calls to the worker.
func startTracedStack(t *testing.T, w *sandboxsvctest.Worker, extra string, tr *tracing.Tracing) *stack {
	t.Helper()
	return startStackWith(t, w, extra, Options{Tracing: tr})
}

// startStackWith is startStack with more Build options (the environment,
// logger and worker credentials are always the stack's own).
func startStackWith(t *testing.T, w *sandboxsvctest.Worker, extra string, o Options) *stack {
	t.Helper()
	s := &stack{t: t, model: modeltest.New(t), worker: w}
	dir := t.TempDir()
	// extra may bring its own storage line (PostgreSQL replicas).
	storage := fmt.Sprintf("storage: {sqlite_path: %s}\n", filepath.Join(dir, "agentd.db"))
	if strings.HasPrefix(extra, "storage:") {
		storage = ""
	}
	doc := fmt.Sprintf(`version: 2
%smodels:
  scripted: {base_url: %s, api_key_env: TEST_MODEL_KEY, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
`, storage, s.model.URL())
	if w != nil {
		doc += fmt.Sprintf("sandbox: {address: %s, template: {memory: 256Mi, ttl: 30m}}\n", w.Addr)
	}
	cfg, err := Parse([]byte(doc + extra))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t)
	if o.Logger != nil {
		// The test observes agentd's logs too.
		lg = zap.New(zapcore.NewTee(lg.Core(), o.Logger.Core()))
	}
	o.Env = func(k string) string {
		if k == "TEST_MODEL_KEY" {
			return "test-key"
		}
		return ""
	}
	o.Logger, o.WorkerDial = lg, tenant.DialOptions()
	core, err := Build(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	s.core = core
	scfg := agentsvc.Config{
		Runtime: core.Runtime,
		Secrets: core.Secrets,
		Skills:  core.Backends.skillStore,
		Config: runhost.Config{
			Threads: runhost.DurableThreads(core.Store),
			OnDeleteThread: func(ctx context.Context, td *agent.ThreadData) error {
				return core.Backends.DeleteThread(ctx, td.Thread.ID)
			},
			// Workspace snapshots at run ends and interrupts, as
			// ServiceConfig wires them.
			OnRunEnd:  core.Backends.OnRunEnd,
			Snapshots: core.Backends.snaps,
		},
		Models: core.ModelKeys(),
	}
	if core.Egress != nil {
		scfg.Egress = core.Egress
	}
	svc, err := agentsvc.New(scfg, agentsvc.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(append(daemon.ServerAuth(nil), o.Tracing.ServerOptions()...)...) // the tenant comes from plumb-tenant (stack.tenant)
	plumbv1.RegisterAgentServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.c = plumbv1.NewAgentServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Shutdown(ctx)
		gs.Stop()
		<-served
		core.Close()
	})
	return s
}

// ctx is a hang guard, not a performance bound.
func (s *stack) ctx() context.Context {
	ctx, cancel := context.WithTimeout(s.t.Context(), 5*time.Minute)
	s.t.Cleanup(cancel)
	if s.tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, s.tenant)
	}
	return ctx
}

// run sends req and returns its events and the tool results by call id.
func (s *stack) run(req *plumbv1.RunRequest) ([]*plumbv1.Event, map[string]*plumbv1.ToolResult, error) {
	s.t.Helper()
	stream, err := s.c.Run(s.ctx(), req)
	if err != nil {
		return nil, nil, err
	}
	var evs []*plumbv1.Event
	results := map[string]*plumbv1.ToolResult{}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs, results, nil
		}
		if err != nil {
			return evs, results, err
		}
		evs = append(evs, m.GetEvent())
		if r := m.GetEvent().GetToolResult(); r != nil {
			results[r.GetId()] = r
		}
	}
}

// mustRun runs req and fails unless the run completed.
func (s *stack) mustRun(req *plumbv1.RunRequest) (string, map[string]*plumbv1.ToolResult) {
	s.t.Helper()
	evs, results, err := s.run(req)
	if err != nil {
		s.t.Fatalf("run: %v", err)
	}
	if len(evs) == 0 || evs[len(evs)-1].GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		s.t.Fatalf("run did not complete: %v", evs)
	}
	return evs[0].GetThreadId(), results
}

// deleteSandboxes deletes every sandbox of the worker, as the TTL reaper
// does with an expired one.
func (s *stack) deleteSandboxes() {
	ctx := s.ctx()
	list, err := s.worker.Client.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{})
	if err != nil {
		s.t.Errorf("list sandboxes: %v", err)
		return
	}
	for _, sb := range list.GetSandboxes() {
		if _, err := s.worker.Client.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: sb.GetId()}); err != nil {
			s.t.Errorf("delete sandbox %s: %v", sb.GetId(), err)
		}
	}
}

func input(thread, text string) *plumbv1.RunRequest {
	return &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: text}}}
}

func mcall(id, name, args string) modeltest.Call {
	return modeltest.Call{ID: id, Name: name, Args: args}
}

// wantResult checks that a tool result exists, has the error flag want
// and contains every string of has.
func wantResult(t *testing.T, results map[string]*plumbv1.ToolResult, id string, isError bool, has ...string) *plumbv1.ToolResult {
	t.Helper()
	r := results[id]
	if r == nil {
		t.Errorf("no tool result for %s", id)
		return nil
	}
	if r.GetIsError() != isError {
		t.Errorf("%s is_error = %v, want %v: %s", id, r.GetIsError(), isError, r.GetContent())
	}
	for _, h := range has {
		if !strings.Contains(r.GetContent(), h) {
			t.Errorf("%s lacks %q:\n%s", id, h, r.GetContent())
		}
	}
	return r
}

// TestSeedFilesEveryBackend (B1): RunRequest.files reach every kind of
// backend, on a new thread (whose sandbox and labels exist only once the
// thread does) and on an existing one, and the run reads them back. A new
// thread whose files cannot be seeded is not left behind, nor its sandbox.
func TestSeedFilesEveryBackend(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	host := t.TempDir()
	s := startStack(t, w, fmt.Sprintf(`backends:
  default: sandbox
  routes:
    /notes/: {type: state}
    /memories/: {type: store, namespace: ["{metadata.tenant}", memories]}
    /host/: {type: filesystem, root: %s}
    /large_tool_results/: {type: state}
`, host))

	s.model.Script("main",
		modeltest.Calls(
			mcall("r1", "read_file", `{"file_path":"/workspace/seed.txt"}`),
			mcall("r2", "read_file", `{"file_path":"/notes/n.txt"}`),
			mcall("r3", "read_file", `{"file_path":"/memories/AGENTS.md"}`),
			mcall("r4", "read_file", `{"file_path":"/host/h.txt"}`),
		),
		modeltest.Text("read them all"),
	)
	req := input("", "Read the seeded files.")
	req.Metadata = map[string]string{"tenant": "acme"}
	req.Files = map[string]string{
		"/workspace/seed.txt": "in the sandbox",
		"/notes/n.txt":        "in state",
		"/memories/AGENTS.md": "in the store",
		"/host/h.txt":         "on the host",
	}
	thread, results := s.mustRun(req)
	wantResult(t, results, "r1", false, "in the sandbox")
	wantResult(t, results, "r2", false, "in state")
	wantResult(t, results, "r3", false, "in the store")
	wantResult(t, results, "r4", false, "on the host")

	// An existing thread: files replace and add, in the same sandbox.
	s.model.Script("main",
		modeltest.Calls(
			mcall("e1", "execute", `{"command":"cat /workspace/seed.txt; echo; cat /workspace/more.txt"}`),
			mcall("r5", "read_file", `{"file_path":"/notes/n.txt"}`),
		),
		modeltest.Text("read again"),
	)
	req = input(thread, "Read them again.")
	req.Files = map[string]string{"/workspace/seed.txt": "replaced", "/workspace/more.txt": "added", "/notes/n.txt": "state replaced"}
	if again, results := s.mustRun(req); again != thread {
		t.Fatalf("second run on thread %s, want %s", again, thread)
	} else {
		wantResult(t, results, "e1", false, "replaced\nadded")
		wantResult(t, results, "r5", false, "state replaced")
	}
	th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	sbx := th.GetThread().GetSandboxId()
	list, err := w.Client.ListSandboxes(s.ctx(), &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetId() != sbx {
		t.Fatalf("sandboxes %v (%v), want only the thread's %s", list.GetSandboxes(), err, sbx)
	}

	// A new thread whose seed fails: INVALID_ARGUMENT, no thread, no
	// sandbox (the sandbox root is read-only).
	bad := input("", "never runs")
	bad.Metadata = map[string]string{"tenant": "acme"} // the store route needs it first
	bad.Files = map[string]string{"/workspace/ok.txt": "fine", "/etc/plumb.txt": "read-only root"}
	if _, _, err := s.run(bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "/etc/plumb.txt") {
		t.Fatalf("seed into a read-only path: %v, want INVALID_ARGUMENT naming the file", err)
	}
	threads, err := s.c.ListThreads(s.ctx(), &plumbv1.ListThreadsRequest{})
	if err != nil || len(threads.GetThreads()) != 1 || threads.GetThreads()[0].GetId() != thread {
		t.Fatalf("threads after a failed seed: %v (%v), want only %s", threads.GetThreads(), err, thread)
	}
	list, err = w.Client.ListSandboxes(s.ctx(), &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 {
		t.Fatalf("sandboxes after a failed seed: %v (%v), want only the first thread's", list.GetSandboxes(), err)
	}
}

const resetMarker = "was reset and is empty"

// TestSandboxReplacedToolResultSaysSo (B8): when the thread's sandbox is
// gone (deleted under the run, or expired between runs), the next call
// gets a new sandbox and its result says that the workspace was reset;
// execute and file tools alike, once per replacement.
func TestSandboxReplacedToolResultSaysSo(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	// Memory reads the workspace before the first tool call of a run, so
	// it is what finds an expired sandbox gone.
	s := startStack(t, w, "backends: {default: sandbox}\nmiddleware: {memory: {paths: [/workspace/AGENTS.md]}}\n")
	gone := func(next modeltest.Turn) modeltest.Turn {
		return modeltest.Dynamic(func(modeltest.Request) modeltest.Turn {
			s.deleteSandboxes()
			return next
		})
	}
	s.model.Script("main",
		modeltest.Calls(mcall("e1", "execute", `{"command":"echo kept > /workspace/a.txt"}`)),
		gone(modeltest.Calls(mcall("e2", "execute", `{"command":"ls -A /workspace; echo listed"}`))),
		modeltest.Calls(mcall("w1", "write_file", `{"file_path":"/workspace/b.txt","content":"x"}`)),
		gone(modeltest.Calls(mcall("r1", "read_file", `{"file_path":"/workspace/b.txt"}`))),
		modeltest.Calls(mcall("l1", "ls", `{"path":"/workspace"}`)),
		modeltest.Text("done"),
	)
	thread, results := s.mustRun(input("", "Work in the sandbox."))
	wantResult(t, results, "e2", false, "listed", resetMarker, "/workspace")
	if r := results["e2"]; r != nil && strings.Contains(r.GetContent(), "a.txt") {
		t.Errorf("e2 ran in the old workspace: %s", r.GetContent())
	}
	wantResult(t, results, "r1", true, "Error [file_not_found]", resetMarker)
	for _, id := range []string{"e1", "w1", "l1"} {
		if r := results[id]; r == nil || strings.Contains(r.GetContent(), resetMarker) {
			t.Errorf("%s: %v, want a result without the reset notice", id, r)
		}
	}

	// Expired between runs: the first tool call of the next run says so,
	// although memory found the sandbox gone before it.
	s.deleteSandboxes()
	s.model.Script("main",
		modeltest.Calls(mcall("g1", "glob", `{"pattern":"*"}`)),
		modeltest.Text("empty"),
	)
	_, results = s.mustRun(input(thread, "What is there?"))
	wantResult(t, results, "g1", false, "No files match", resetMarker)

	// The sandbox ledger has the four boxes of the thread: the three
	// found gone ended when agentd found them gone, the last one is open.
	spans, err := s.core.Store.(store.SandboxLedger).SandboxSpans(s.ctx(), store.UsageQuery{Tenant: "default", To: time.Now().Add(time.Hour)})
	open := 0
	for _, sp := range spans {
		if sp.ThreadID != thread {
			t.Errorf("span %+v is not of thread %s", sp, thread)
		}
		if sp.Ended.IsZero() {
			open++
		}
	}
	if err != nil || len(spans) != 4 || open != 1 {
		t.Fatalf("sandbox spans %+v, %v; want 4, the last one open", spans, err)
	}
}

// TestExecuteFullOutputReadable (B7): the middle of a command's output
// above the inline limit is not lost. The result names the file holding
// all of it, previews its first and last lines numbered as read_file
// numbers them, keeps the exit code, and read_file pages through the
// middle: with the artifacts on a State route (the sandbox writes a
// scratch copy that is moved there) and inside the sandbox itself.
func TestExecuteFullOutputReadable(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	for _, tc := range []struct {
		name, backends, path string
	}{
		{"state route", "backends: {default: sandbox}\n", "/large_tool_results/x1"},
		{"in the sandbox", "backends: {default: sandbox, artifacts_root: /tmp/plumb}\n", "/tmp/plumb/large_tool_results/x1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, w, tc.backends)
			s.model.Script("main",
				modeltest.Calls(mcall("x1", "execute", `{"command":"seq 1 30000"}`)),
				modeltest.Calls(mcall("r1", "read_file", fmt.Sprintf(`{"file_path":%q,"offset":14999,"limit":2}`, tc.path))),
				modeltest.Text("read the middle"),
			)
			thread, results := s.mustRun(input("", "Count to 30000."))
			x1 := wantResult(t, results, "x1", false, tc.path, "execute (call x1)", "168894 bytes, 30000 lines", "read_file",
				"\n    1  1\n", "\n    5  5\n", "[29990 lines omitted]", "\n29996  29996\n", "\n30000  30000\n", "[Exit code 0: success.]")
			if x1 != nil && (x1.GetOffloadedPath() != tc.path || len(x1.GetContent()) > 80000) {
				t.Errorf("x1 offloaded_path %q, %d chars", x1.GetOffloadedPath(), len(x1.GetContent()))
			}
			wantResult(t, results, "r1", false, "15000  15000\n15001  15001")

			// The scratch copy on the sandbox is gone once moved.
			th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
			if err != nil {
				t.Fatal(err)
			}
			ls, err := w.Client.Ls(s.ctx(), &plumbv1.LsRequest{SandboxId: th.GetThread().GetSandboxId(), Path: "/tmp/.plumb-offload/large_tool_results"})
			if err == nil && len(ls.GetEntries()) > 0 {
				t.Errorf("scratch files left in the sandbox: %v", ls.GetEntries())
			}
		})
	}
}

// TestGrepRegexConfig (B6): tools.grep.regex decides whether grep offers
// and accepts regular expressions; absent, it does (docs/file-tools.md §6).
func TestGrepRegexConfig(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		regex       bool
	}{
		{"absent", "", true},
		{"enabled", "tools: {grep: {regex: true}}\n", true},
		{"disabled", "tools: {grep: {regex: false}}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, nil, tc.extra)
			s.model.Script("main",
				modeltest.Calls(mcall("g1", "grep", `{"pattern":"^fo+$","regex":true}`), mcall("g2", "grep", `{"pattern":"o+"}`)),
				modeltest.Text("searched"),
			)
			req := input("", "Search.")
			req.Files = map[string]string{"/a.txt": "foo\n", "/b.txt": "o+\n"}
			_, results := s.mustRun(req)
			var schema string
			for _, tl := range s.model.Requests("main")[0].Body.Tools {
				if tl.Function != nil && tl.Function.Name == "grep" {
					b, _ := json.Marshal(tl.Function.Parameters)
					schema = string(b) + tl.Function.Description
				}
			}
			if offered := strings.Contains(schema, `"regex"`); offered != tc.regex {
				t.Errorf("grep offers regex = %v, want %v: %s", offered, tc.regex, schema)
			}
			if tc.regex {
				wantResult(t, results, "g1", false, "/a.txt")
			} else {
				wantResult(t, results, "g1", true, "Invalid arguments for grep")
			}
			wantResult(t, results, "g2", false, "/b.txt") // literal either way
		})
	}
}
