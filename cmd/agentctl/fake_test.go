package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeAgent is a scripted AgentService: Run plays the first segment,
// each Resume the next one. It records every request.
type fakeAgent struct {
	plumbv1.UnimplementedAgentServiceServer

	mu       sync.Mutex
	segments [][]*plumbv1.Event
	runErr   error
	// attachErr, if set, is what Attach fails with.
	attachErr error
	// hold, if set, makes Run send its segment and then wait for the
	// client to go away, closing sent first and gone afterwards.
	hold       bool
	sent, gone chan struct{}

	thread *plumbv1.Thread
	// messages are ListMessages pages by page token.
	messages map[string]*plumbv1.ListMessagesResponse
	pages    [][]*plumbv1.Thread
	agents   []*plumbv1.AgentInfo
	cancel   *plumbv1.CancelResponse
	runs     []*plumbv1.RunRequest
	resumes  []*plumbv1.ResumeRequest
	attach   []*plumbv1.AttachRequest
	gets     []*plumbv1.GetThreadRequest
	lists    []*plumbv1.ListThreadsRequest
	deletes  []*plumbv1.DeleteThreadRequest
	cancels  []*plumbv1.CancelRequest
}

func (f *fakeAgent) next() []*plumbv1.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.segments) == 0 {
		return nil
	}
	seg := f.segments[0]
	f.segments = f.segments[1:]
	return seg
}

func (f *fakeAgent) Run(req *plumbv1.RunRequest, st grpc.ServerStreamingServer[plumbv1.RunResponse]) error {
	f.mu.Lock()
	f.runs = append(f.runs, req)
	err := f.runErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, ev := range f.next() {
		if err := st.Send(&plumbv1.RunResponse{Event: ev}); err != nil {
			return err
		}
	}
	if f.hold {
		close(f.sent)
		<-st.Context().Done()
		close(f.gone)
	}
	return nil
}

func (f *fakeAgent) Resume(req *plumbv1.ResumeRequest, st grpc.ServerStreamingServer[plumbv1.ResumeResponse]) error {
	f.mu.Lock()
	f.resumes = append(f.resumes, req)
	f.mu.Unlock()
	for _, ev := range f.next() {
		if err := st.Send(&plumbv1.ResumeResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeAgent) Attach(req *plumbv1.AttachRequest, st grpc.ServerStreamingServer[plumbv1.AttachResponse]) error {
	f.mu.Lock()
	f.attach = append(f.attach, req)
	err := f.attachErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, ev := range f.next() {
		if ev.GetSequence() <= req.GetAfterSequence() {
			continue
		}
		if err := st.Send(&plumbv1.AttachResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeAgent) Cancel(_ context.Context, req *plumbv1.CancelRequest) (*plumbv1.CancelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, req)
	return f.cancel, nil
}

func (f *fakeAgent) GetThread(_ context.Context, req *plumbv1.GetThreadRequest) (*plumbv1.GetThreadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets = append(f.gets, req)
	return &plumbv1.GetThreadResponse{Thread: f.thread}, nil
}

func (f *fakeAgent) ListMessages(_ context.Context, req *plumbv1.ListMessagesRequest) (*plumbv1.ListMessagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.messages[req.GetPageToken()]; ok && req.GetThreadId() == f.thread.GetId() {
		return p, nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "page token %q", req.GetPageToken())
}

func (f *fakeAgent) ListThreads(_ context.Context, req *plumbv1.ListThreadsRequest) (*plumbv1.ListThreadsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, req)
	i := len(f.lists) - 1
	resp := &plumbv1.ListThreadsResponse{Threads: f.pages[i]}
	if i+1 < len(f.pages) {
		resp.NextPageToken = "page" + string(rune('1'+i))
	}
	return resp, nil
}

func (f *fakeAgent) DeleteThread(_ context.Context, req *plumbv1.DeleteThreadRequest) (*plumbv1.DeleteThreadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, req)
	return &plumbv1.DeleteThreadResponse{}, nil
}

func (f *fakeAgent) ListAgents(context.Context, *plumbv1.ListAgentsRequest) (*plumbv1.ListAgentsResponse, error) {
	return &plumbv1.ListAgentsResponse{Agents: f.agents}, nil
}

// serve runs svc on a loopback port for the test and returns its address.
func serve(t *testing.T, svc plumbv1.AgentServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	plumbv1.RegisterAgentServiceServer(gs, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

// cli is one agentctl invocation's captured streams.
type cli struct {
	stdin    string
	terminal bool
	env      map[string]string
	edit     func(ctx context.Context, editor, path string) error
	// onOut, if set, sees every write to stdout.
	onOut    func(p []byte)
	out, err bytes.Buffer
}

type hookWriter struct {
	w    *bytes.Buffer
	hook func([]byte)
}

func (h hookWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.hook(p)
	return n, err
}

func (c *cli) run(ctx context.Context, addr string, args ...string) error {
	sio := stdio{
		in: strings.NewReader(c.stdin), out: &c.out, err: &c.err, terminal: c.terminal,
		getenv: func(k string) string { return c.env[k] },
		edit:   c.edit,
	}
	if c.onOut != nil {
		sio.out = hookWriter{&c.out, c.onOut}
	}
	return run(ctx, append([]string{"--agentd", addr, "--timeout", "5s"}, args...), sio)
}

// Event builders for scripted streams.

type seg struct {
	thread string
	seq    uint64
}

func (s *seg) ev(path, parent string, set func(*plumbv1.Event)) *plumbv1.Event {
	s.seq++
	e := &plumbv1.Event{Sequence: s.seq, RunId: "run-1", ThreadId: s.thread, AgentPath: path, ParentToolCallId: parent,
		Timestamp: timestamppb.New(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))}
	set(e)
	return e
}

func (s *seg) started(resumed bool) *plumbv1.Event {
	return s.ev("main", "", func(e *plumbv1.Event) {
		e.Payload = &plumbv1.Event_RunStarted{RunStarted: &plumbv1.RunStarted{ThreadId: s.thread, RunId: "run-1", Agent: "main", Model: "smart", Resumed: resumed}}
	})
}

func (s *seg) text(step int32, text string) []*plumbv1.Event {
	return []*plumbv1.Event{
		s.ev("main", "", func(e *plumbv1.Event) {
			e.Payload = &plumbv1.Event_MessageDelta{MessageDelta: &plumbv1.MessageDelta{Text: text, Step: step, Attempt: 1}}
		}),
		s.ev("main", "", func(e *plumbv1.Event) {
			e.Payload = &plumbv1.Event_Message{Message: &plumbv1.AssistantMessage{Text: text, Step: step}}
		}),
	}
}

func (s *seg) call(id, name, args string) []*plumbv1.Event {
	return []*plumbv1.Event{
		s.ev("main", "", func(e *plumbv1.Event) {
			e.Payload = &plumbv1.Event_ToolCallStarted{ToolCallStarted: &plumbv1.ToolCallStarted{Id: id, Name: name, ArgsJson: args}}
		}),
		s.ev("main", "", func(e *plumbv1.Event) {
			e.Payload = &plumbv1.Event_ToolResult{ToolResult: &plumbv1.ToolResult{Id: id, Name: name, Content: "ok", Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED}}
		}),
	}
}

func (s *seg) finished(st plumbv1.RunStatus) *plumbv1.Event {
	return s.ev("main", "", func(e *plumbv1.Event) {
		e.Payload = &plumbv1.Event_RunFinished{RunFinished: &plumbv1.RunFinished{Status: st, Usage: &plumbv1.TokenUsage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}}}
	})
}

func (s *seg) failed(code string) *plumbv1.Event {
	return s.ev("main", "", func(e *plumbv1.Event) {
		e.Payload = &plumbv1.Event_Error{Error: &plumbv1.RunError{Code: code, Message: "boom"}}
	})
}

func (s *seg) interrupted(in *plumbv1.Interrupted) *plumbv1.Event {
	return s.ev("main", "", func(e *plumbv1.Event) { e.Payload = &plumbv1.Event_Interrupted{Interrupted: in} })
}

var (
	decApprove = plumbv1.DecisionType_DECISION_TYPE_APPROVE
	decEdit    = plumbv1.DecisionType_DECISION_TYPE_EDIT
	decReject  = plumbv1.DecisionType_DECISION_TYPE_REJECT
	decRespond = plumbv1.DecisionType_DECISION_TYPE_RESPOND
	allFour    = []plumbv1.DecisionType{decApprove, decEdit, decReject, decRespond}
)

// approval is an interrupt with one gated execute call at the root and
// one gated delete in a subagent.
func approval() *plumbv1.Interrupted {
	return &plumbv1.Interrupted{InterruptId: "int-1", Requests: []*plumbv1.InterruptRequest{
		{ToolCallId: "c2", AgentPath: "main", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_APPROVAL, ToolName: "execute",
			ArgsJson: `{"command":"make clean"}`, Description: "Shell command", AllowedDecisions: allFour},
		{ToolCallId: "g1", AgentPath: "main/general-purpose", ParentToolCallId: "t1", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_APPROVAL,
			ToolName: "delete", ArgsJson: `{"file_path":"/old"}`, AllowedDecisions: []plumbv1.DecisionType{decApprove, decReject}},
	}}
}

// clientTool is an interrupt for a client-implemented tool.
func clientTool() *plumbv1.Interrupted {
	return &plumbv1.Interrupted{InterruptId: "int-2", Requests: []*plumbv1.InterruptRequest{
		{ToolCallId: "k1", AgentPath: "main", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_CLIENT_TOOL, ToolName: "get_location",
			ArgsJson: `{}`, AllowedDecisions: []plumbv1.DecisionType{decRespond, decReject}},
	}}
}

// interruptedRun scripts a run that stops on in and, after the Resume,
// finishes.
func interruptedRun(in *plumbv1.Interrupted) [][]*plumbv1.Event {
	s := &seg{thread: "th-1"}
	first := []*plumbv1.Event{s.started(false)}
	first = append(first, s.call("c1", "ls", `{"path":"/"}`)...)
	first = append(first, s.interrupted(in))
	second := []*plumbv1.Event{s.started(true)}
	second = append(second, s.call("c2", "execute", `{"command":"make clean"}`)...)
	second = append(second, s.text(2, "Cleaned.")...)
	second = append(second, s.finished(plumbv1.RunStatus_RUN_STATUS_COMPLETED))
	return [][]*plumbv1.Event{first, second}
}
