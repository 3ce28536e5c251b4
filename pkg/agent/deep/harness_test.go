package deep_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	goopenai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

var update = flag.Bool("update", false, "rewrite the golden event transcripts in testdata/")

// Provider model names of the two configured model keys.
const (
	smartModel = "gpt-test"
	fastModel  = "qwen3-8b-instruct"
)

// env is one conformance setup as docs/agent-core.md §11 describes it: agentd's
// AgentService over bufconn, driving the agent core (deep.Runtime) on a
// SQLite thread store, the core talking to a scripted OpenAI-compatible
// server through the real go-openai adapter. Scenarios see what a gRPC
// client receives: events and status errors are decoded from the wire
// (decode_test.go), golden transcripts are the wire events.
type env struct {
	t     *testing.T
	srv   *modeltest.Server
	store *sqlite.Store
	kit   *tools.TestKit
	cfg   deep.Config
	c     plumbv1.AgentServiceClient
	retry openai.RetryConfig
	// seed holds files for the next Run (RunRequest.files); binary holds
	// those that are not text, which withFiles puts into the backend.
	seed   map[string][]byte
	mu     sync.Mutex
	binary map[string][]byte
	// lastThread is the thread of the latest Run.
	lastThread string
	// vision lists the provider model names configured as vision-capable.
	vision map[string]bool
	// tp, if set, receives the runtime's spans.
	tp trace.TracerProvider
}

type option func(*env)

func withConfig(f func(*deep.Config)) option { return func(e *env) { f(&e.cfg) } }

func withRetry(r openai.RetryConfig) option { return func(e *env) { e.retry = r } }

// withVision configures the models with these provider names as
// vision-capable.
func withVision(names ...string) option {
	return func(e *env) {
		e.vision = make(map[string]bool)
		for _, n := range names {
			e.vision[n] = true
		}
	}
}

// withFiles gives every thread the State backend, persisted with the
// thread (the default setup of docs/agent-core.md §11).
func withFiles() option {
	return func(e *env) {
		base := deep.StateBackends()
		e.cfg.Backend = func(ctx context.Context, id string, labels map[string]string, stored map[string]json.RawMessage) (deep.ThreadBackend, error) {
			tb, err := base(ctx, id, labels, stored)
			if err != nil {
				return tb, err
			}
			// RunRequest.files carries text only; binary seeds go
			// straight into the thread's backend.
			e.mu.Lock()
			bin := e.binary
			e.binary = nil
			e.mu.Unlock()
			for p, c := range bin {
				res, err := tb.Backend.Upload(ctx, []backend.UploadItem{{Path: p, Content: c}})
				if err != nil {
					return tb, err
				}
				if res[0].Err != nil {
					return tb, res[0].Err
				}
			}
			return tb, nil
		}
	}
}

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	e := &env{
		t: t, srv: modeltest.New(t), kit: tools.NewTestKit(),
		retry: openai.RetryConfig{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond},
	}
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "threads.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e.store = store
	reg := tools.NewRegistry()
	if err := reg.RegisterGroup(tools.TestKitGroup, e.kit.Tools()...); err != nil {
		t.Fatal(err)
	}
	e.cfg = deep.Config{
		DefaultModel: "smart",
		Tools:        reg,
		Store:        store,
		Limits:       agent.Limits{CancelGrace: time.Second},
	}
	for _, o := range opts {
		o(e)
	}
	newModel := func(name string) deep.Model {
		m, err := openai.New(openai.Config{BaseURL: e.srv.URL(), Model: name, Retry: e.retry}, openai.WithHTTPClient(e.srv.Client()))
		if err != nil {
			t.Fatal(err)
		}
		return deep.Model{Chat: m, Name: name, Vision: e.vision[name]}
	}
	e.cfg.Models = map[string]deep.Model{"smart": newModel(smartModel), "fast": newModel(fastModel)}
	n := 0
	var mu sync.Mutex
	ids := func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("id-%03d", n)
	}
	lg := zaptest.NewLogger(t)
	rt, err := deep.New(e.cfg, deep.WithLogger(lg), deep.WithIDs(ids), deep.WithTracerProvider(e.tp))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := agentsvc.New(agentsvc.Config{Runtime: rt, Config: runhost.Config{Threads: runhost.DurableThreads(store)}, Models: []string{"fast", "smart"}},
		agentsvc.WithLogger(lg), agentsvc.WithIDs(ids))
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	plumbv1.RegisterAgentServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
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
	e.c = plumbv1.NewAgentServiceClient(conn)
	return e
}

// ctx is a context for one RPC: the test's, with a deadline as a hang
// guard.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// transcript is what one Run or Resume stream delivered to the client.
type transcript struct {
	// res holds the thread and run ids of run_started (nil when the
	// stream failed before it).
	res *agent.RunResult
	// err is the stream's status decoded into the agent error it stands
	// for (nil for OK).
	err error
	// events are the received events decoded into the domain; wire holds
	// them as received.
	events []agent.Event
	wire   []*plumbv1.Event
}

// eventStream is the client side of Run, Resume and Attach.
type eventStream[M any] interface {
	Recv() (*M, error)
}

// receive reads a stream to its end.
func receive[M any, P interface {
	*M
	GetEvent() *plumbv1.Event
}](t *testing.T, s eventStream[M], err error) *transcript {
	t.Helper()
	tr := &transcript{}
	for err == nil {
		var m *M
		if m, err = s.Recv(); err == nil {
			tr.wire = append(tr.wire, P(m).GetEvent())
		}
	}
	if !errors.Is(err, io.EOF) {
		tr.err = domainError(err)
	}
	for _, pe := range tr.wire {
		ev, derr := eventFromPB(pe)
		if derr != nil {
			t.Fatalf("event %d: %v", pe.GetSequence(), derr)
		}
		tr.events = append(tr.events, ev)
	}
	if len(tr.events) > 0 {
		if s, ok := tr.events[0].Payload.(agent.RunStarted); ok {
			tr.res = &agent.RunResult{ThreadID: s.ThreadID, RunID: s.RunID}
		}
	}
	return tr
}

func (e *env) run(in agent.RunInput) *transcript {
	e.t.Helper()
	if len(e.seed) > 0 {
		if in.Files == nil {
			in.Files = make(map[string][]byte)
		}
		for p, c := range e.seed {
			if utf8.Valid(c) {
				in.Files[p] = c
				continue
			}
			e.mu.Lock()
			if e.binary == nil {
				e.binary = make(map[string][]byte)
			}
			e.binary[p] = c
			e.mu.Unlock()
		}
		e.seed = nil
	}
	s, err := e.c.Run(e.ctx(), runRequest(in))
	tr := receive(e.t, s, err)
	if tr.res != nil {
		e.lastThread = tr.res.ThreadID
	}
	return tr
}

func (e *env) resume(threadID, interruptID string, ds ...agent.Decision) *transcript {
	e.t.Helper()
	s, err := e.c.Resume(e.ctx(), resumeRequest(agent.ResumeInput{ThreadID: threadID, InterruptID: interruptID, Decisions: ds}))
	return receive(e.t, s, err)
}

func input(texts ...string) agent.RunInput { return agent.RunInput{Input: texts} }

// thread returns a thread as committed to the SQLite store.
func (e *env) thread(id string) *agent.ThreadData {
	e.t.Helper()
	td, err := e.store.LoadThread(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return td
}

// must fails the test when the run did not start.
func (tr *transcript) must(t *testing.T) *transcript {
	t.Helper()
	if tr.err != nil {
		t.Fatalf("run failed before it started: %v", tr.err)
	}
	return tr
}

// kinds lists the payload kinds; with brief, deltas and usage are skipped
// (the "…" of docs/agent-core.md §11).
func (tr *transcript) kinds(brief bool) []string {
	var out []string
	for _, ev := range tr.events {
		k := ev.Payload.Kind()
		if brief && (k == "message_delta" || k == "reasoning_delta" || k == "usage") {
			continue
		}
		out = append(out, k)
	}
	return out
}

func (tr *transcript) last() agent.Payload {
	if len(tr.events) == 0 {
		return nil
	}
	return tr.events[len(tr.events)-1].Payload
}

func (tr *transcript) finished(t *testing.T, status agent.RunStatus) agent.RunFinished {
	t.Helper()
	f, ok := tr.last().(agent.RunFinished)
	if !ok {
		t.Fatalf("last event = %#v, want run_finished", tr.last())
	}
	if f.Status != status {
		t.Fatalf("run_finished status = %s, want %s (final text %q)", f.Status, status, f.FinalText)
	}
	return f
}

func (tr *transcript) interrupted(t *testing.T) agent.Interrupted {
	t.Helper()
	in, ok := tr.last().(agent.Interrupted)
	if !ok {
		t.Fatalf("last event = %#v, want interrupted (kinds %v)", tr.last(), tr.kinds(true))
	}
	return in
}

// results returns the tool_result events by call id (the last one wins).
func (tr *transcript) results() map[string]agent.ToolResultEvent {
	out := make(map[string]agent.ToolResultEvent)
	for _, ev := range tr.events {
		if r, ok := ev.Payload.(agent.ToolResultEvent); ok {
			out[r.ID] = r
		}
	}
	return out
}

func (tr *transcript) result(t *testing.T, id string) agent.ToolResultEvent {
	t.Helper()
	r, ok := tr.results()[id]
	if !ok {
		t.Fatalf("no tool_result for %s (kinds %v)", id, tr.kinds(true))
	}
	return r
}

// resultOrder lists tool_result ids in emission order.
func (tr *transcript) resultOrder() []string {
	var out []string
	for _, ev := range tr.events {
		if r, ok := ev.Payload.(agent.ToolResultEvent); ok {
			out = append(out, r.ID)
		}
	}
	return out
}

func (tr *transcript) index(pred func(agent.Event) bool) int {
	return slices.IndexFunc(tr.events, pred)
}

// checkEnvelope asserts ordering guarantees that hold for every stream:
// contiguous sequences from first, run_started first, exactly one terminal
// event and it is last, deltas before their message (docs/agent-core.md §8).
func (tr *transcript) checkEnvelope(t *testing.T, first uint64) {
	t.Helper()
	if len(tr.events) == 0 {
		t.Fatal("no events")
	}
	if _, ok := tr.events[0].Payload.(agent.RunStarted); !ok {
		t.Errorf("first event = %s, want run_started", tr.events[0].Payload.Kind())
	}
	terminal := 0
	for i, ev := range tr.events {
		if ev.Sequence != first+uint64(i) {
			t.Errorf("event %d (%s) has sequence %d, want %d", i, ev.Payload.Kind(), ev.Sequence, first+uint64(i))
		}
		if ev.RunID == "" || ev.ThreadID == "" || ev.AgentPath == "" || ev.Time.IsZero() {
			t.Errorf("event %d (%s) has an incomplete envelope: %+v", i, ev.Payload.Kind(), ev)
		}
		if agent.IsTerminal(ev.Payload) {
			terminal++
			if i != len(tr.events)-1 {
				t.Errorf("terminal event %s at %d of %d", ev.Payload.Kind(), i, len(tr.events))
			}
		}
	}
	if terminal != 1 {
		t.Errorf("%d terminal events", terminal)
	}
	// Deltas concatenated per context and step (highest attempt) equal the
	// message text; usage follows each message.
	type key struct {
		path, parent string
		step         int
	}
	text := make(map[key]string)
	attempt := make(map[key]int)
	type callKey struct {
		key
		index int
	}
	calls := make(map[callKey]model.ToolCall)
	callAttempt := make(map[callKey]int)
	truncated := make(map[callKey]bool)
	for i, ev := range tr.events {
		k := key{ev.AgentPath, ev.ParentToolCallID, 0}
		switch p := ev.Payload.(type) {
		case agent.MessageDelta:
			k.step = p.Step
			if p.Attempt > attempt[k] {
				attempt[k], text[k] = p.Attempt, ""
			}
			text[k] += p.Text
		case agent.ToolCallDelta:
			k.step = p.Step
			ck := callKey{k, p.Index}
			if p.Attempt > callAttempt[ck] {
				callAttempt[ck], calls[ck] = p.Attempt, model.ToolCall{}
			}
			c := calls[ck]
			c.ID, c.Name, c.Args = c.ID+p.ID, c.Name+p.Name, c.Args+p.Args
			calls[ck] = c
			if p.Truncated {
				truncated[ck] = true
			}
		case agent.AssistantMessage:
			k.step = p.Step
			if got := text[k]; got != p.Text && !(got == "" && attempt[k] == 0) {
				t.Errorf("deltas of %v = %q, message text %q", k, got, p.Text)
			}
			// The argument deltas of each call add up to its arguments
			// (a prefix past the cap); the message may name an id the
			// provider did not send.
			for j, want := range p.ToolCalls {
				got := calls[callKey{k, j}]
				if got.Name != want.Name || (got.ID != "" && got.ID != want.ID) ||
					!strings.HasPrefix(want.Args, got.Args) || (!truncated[callKey{k, j}] && got.Args != want.Args && want.Args != "{}") {
					t.Errorf("deltas of call %d of %v = %+v, message has %+v", j, k, got, want)
				}
			}
			if i+1 >= len(tr.events) || tr.events[i+1].Payload.Kind() != "usage" {
				t.Errorf("message at %d is not followed by usage", i)
			}
		}
	}
}

// requestMessages renders a recorded request's messages as "role: text"
// (tool calls as "role: [call name]", tool results as "tool(id): text").
func requestMessages(r modeltest.Request) []string {
	var out []string
	for _, m := range r.Body.Messages {
		s := m.Role + ": " + m.Content
		if m.Role == "tool" {
			s = "tool(" + m.ToolCallID + "): " + m.Content
		}
		for _, c := range m.ToolCalls {
			s += " [" + c.ID + " " + c.Function.Name + "]"
		}
		out = append(out, s)
	}
	return out
}

func requestTools(r modeltest.Request) []string {
	var out []string
	for _, tl := range r.Body.Tools {
		out = append(out, tl.Function.Name)
	}
	return out
}

func systemPrompt(r modeltest.Request) string {
	for _, m := range r.Body.Messages {
		if m.Role == goopenai.ChatMessageRoleSystem {
			return m.Content
		}
	}
	return ""
}

func call(id, name, args string) modeltest.Call {
	return modeltest.Call{ID: id, Name: name, Args: args}
}

// golden compares the transcripts, as the client received them, with
// testdata/<name>.golden (rewritten only with -update).
func golden(t *testing.T, name string, trs ...*transcript) {
	t.Helper()
	var b strings.Builder
	for i, tr := range trs {
		if i > 0 {
			b.WriteString("---\n")
		}
		for _, ev := range tr.wire {
			b.WriteString(normalize(t, ev))
			b.WriteByte('\n')
		}
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("transcript differs from %s (run with -update to accept):\n%s", path, diff(string(want), got))
	}
}

func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// normalize renders a wire event as "sequence agent[#parent] kind
// payload", the payload as canonical protojson (proto field names, keys
// sorted, zero values left out) without duration_ms; the envelope's
// timestamp is left out too. Ids are deterministic (deep.WithIDs).
func normalize(t *testing.T, ev *plumbv1.Event) string {
	t.Helper()
	who := ev.GetAgentPath()
	if ev.GetParentToolCallId() != "" {
		who += "#" + ev.GetParentToolCallId()
	}
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload"))
	if fd == nil {
		t.Fatalf("event %d has no payload", ev.GetSequence())
	}
	p := proto.Clone(m.Get(fd).Message().Interface()).ProtoReflect()
	if d := p.Descriptor().Fields().ByName("duration_ms"); d != nil {
		p.Clear(d)
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p.Interface())
	if err != nil {
		t.Fatal(err)
	}
	// protojson's spacing is deliberately unstable: re-encode.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %s %s %s", ev.GetSequence(), who, fd.Name(), strings.TrimSuffix(out.String(), "\n"))
}

// readFile returns a State file of the latest thread as persisted in the
// store, or ok=false.
func (e *env) readFile(p string) (string, bool) {
	e.t.Helper()
	doc, ok := e.thread(e.lastThread).Files[p]
	if !ok {
		return "", false
	}
	b, err := deep.StoredFile(doc)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b), true
}

// writeFile seeds a file into the next Run's thread.
func (e *env) writeFile(p, content string) {
	if e.seed == nil {
		e.seed = make(map[string][]byte)
	}
	e.seed[p] = []byte(content)
}
