package modeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/model/chatwire"
	goopenai "github.com/sashabaranov/go-openai"
)

// Headers that route a request to a script.
const (
	HeaderAgentPath        = "X-Plumb-Agent-Path"
	HeaderParentToolCallID = "X-Plumb-Parent-Tool-Call-Id"
	HeaderRunID            = "X-Plumb-Run-Id"
)

// DefaultKey is the route key of requests without an agent path, and the
// fallback for paths that have no script of their own.
const DefaultKey = ""

// Key is the route key of an agent path, optionally narrowed to one parent
// tool call (for parallel subagents of the same type).
func Key(agentPath, parentToolCallID string) string {
	if parentToolCallID == "" {
		return agentPath
	}
	return agentPath + "#" + parentToolCallID
}

// Request is one request the server received.
type Request struct {
	// Key is the script key that answered it.
	Key string
	// Seq is the 1-based number of the request within Key.
	Seq int
	// AgentPath, ParentToolCallID and RunID are the X-Plumb-* headers.
	AgentPath, ParentToolCallID, RunID string
	// Header holds all request headers.
	Header http.Header
	// Body is the parsed request.
	Body goopenai.ChatCompletionRequest
	// Raw is the body as received.
	Raw []byte
	// Received is when the request arrived.
	Received time.Time
}

type queue struct {
	turns []Turn
	next  int
	seen  int
}

// Server is a scripted OpenAI-compatible endpoint. Its methods are safe for
// concurrent use.
type Server struct {
	srv    *httptest.Server
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	scripts map[string]*queue
	reqs    []Request
	errs    []error
}

// New starts a server. When t is non-nil, the server is closed at t's
// cleanup and every recorded error (an unscripted or exhausted key, an
// unparsable request) is reported with t.Errorf; use TakeErrors to consume
// errors a test expects.
func New(t testing.TB) *Server {
	s := &Server{closed: make(chan struct{}), scripts: make(map[string]*queue)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.serve)
	s.srv = httptest.NewServer(mux)
	if t != nil {
		t.Cleanup(func() {
			s.Close()
			for _, err := range s.TakeErrors() {
				t.Errorf("modeltest: %v", err)
			}
		})
	}
	return s
}

// URL is the API base URL, ending in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Client returns an HTTP client for the server whose idle connections are
// closed with it.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Close aborts pending delays and shuts the server down. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closed)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// Script appends turns to key's queue.
func (s *Server) Script(key string, turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.scripts[key]
	if q == nil {
		q = &queue{}
		s.scripts[key] = q
	}
	q.turns = append(q.turns, turns...)
}

// Requests returns the requests answered from key's script, in arrival
// order.
func (s *Server) Requests(key string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.reqs {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

// AllRequests returns every request received, in arrival order.
func (s *Server) AllRequests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Count returns how many requests key's script has received.
func (s *Server) Count(key string) int { return len(s.Requests(key)) }

// Remaining returns how many scripted turns of key are still unplayed.
func (s *Server) Remaining(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.scripts[key]; q != nil {
		return len(q.turns) - q.next
	}
	return 0
}

// TakeErrors returns the errors recorded so far and forgets them.
func (s *Server) TakeErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := s.errs
	s.errs = nil
	return errs
}

func keyName(key string) string {
	if key == DefaultKey {
		return "(default)"
	}
	return fmt.Sprintf("%q", key)
}

// next records the request and pops its turn.
func (s *Server) next(r *http.Request, raw []byte, body goopenai.ChatCompletionRequest) (Request, Turn, error) {
	req := Request{
		AgentPath:        r.Header.Get(HeaderAgentPath),
		ParentToolCallID: r.Header.Get(HeaderParentToolCallID),
		RunID:            r.Header.Get(HeaderRunID),
		Header:           r.Header.Clone(),
		Body:             body,
		Raw:              raw,
		Received:         time.Now(),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	candidates := []string{Key(req.AgentPath, ""), DefaultKey}
	if req.ParentToolCallID != "" {
		candidates = append([]string{Key(req.AgentPath, req.ParentToolCallID)}, candidates...)
	}
	var q *queue
	req.Key = candidates[0]
	for _, k := range candidates {
		if q = s.scripts[k]; q != nil {
			req.Key = k
			break
		}
	}
	var (
		turn Turn
		err  error
	)
	switch {
	case q == nil:
		err = fmt.Errorf("no script for key %s (agent path %q, parent tool call %q)", keyName(req.Key), req.AgentPath, req.ParentToolCallID)
	case q.next >= len(q.turns):
		err = fmt.Errorf("script for key %s exhausted: request %d, %d turns scripted", keyName(req.Key), q.seen+1, len(q.turns))
	default:
		turn = q.turns[q.next]
		q.next++
	}
	if q != nil {
		q.seen++
		req.Seq = q.seen
	}
	s.reqs = append(s.reqs, req)
	if err != nil {
		s.errs = append(s.errs, err)
	}
	return req, turn, err
}

func (s *Server) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.fail(fmt.Errorf("read request: %w", err))
		return
	}
	var body goopenai.ChatCompletionRequest
	if err := json.Unmarshal(raw, &body); err != nil {
		s.fail(fmt.Errorf("parse request: %w", err))
		writeError(w, http.StatusBadRequest, nil, ErrorBody("invalid_request_error", nil, "modeltest: "+err.Error()))
		return
	}
	req, turn, err := s.next(r, raw, body)
	if err != nil {
		writeError(w, http.StatusInternalServerError, nil, ErrorBody("server_error", nil, "modeltest: "+err.Error()))
		return
	}
	for turn.Dynamic != nil && turn.Handler == nil {
		turn = turn.Dynamic(req)
	}
	if turn.Handler != nil {
		r.Body = io.NopCloser(bytes.NewReader(raw))
		turn.Handler(w, r)
		return
	}
	if !s.wait(r.Context(), turn.FirstByteDelay) {
		abort()
	}
	if turn.Status >= 400 {
		b := turn.Body
		if b == "" {
			b = DefaultErrorBody(turn.Status)
		}
		writeError(w, turn.Status, turn.Header, b)
		return
	}
	if body.Stream {
		s.stream(w, r, req, turn)
		return
	}
	s.complete(w, req, turn)
}

// abort closes the connection without finishing the response, so that the
// client sees a broken stream (or no response) rather than a clean end.
func abort() { panic(http.ErrAbortHandler) }

// wait sleeps d unless the client goes away or the server closes first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}

func writeError(w http.ResponseWriter, status int, header http.Header, body string) {
	copyHeader(w.Header(), header)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// stream plays turn as server-sent events.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, turn Turn) {
	flusher, _ := w.(http.Flusher)
	copyHeader(w.Header(), turn.Header)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}

	chunks := turn.chunks()
	if turn.StreamError == nil {
		if !turn.NoFinishReason {
			chunks = append(chunks, Chunk{FinishReason: turn.finishReason()})
		}
		if turn.Usage != nil {
			chunks = append(chunks, Chunk{Usage: turn.usage(req)})
		}
	}
	id := fmt.Sprintf("chatcmpl-modeltest-%d", req.Seq)
	for i, c := range chunks {
		if turn.Drop && i == turn.DropAfter {
			abort()
		}
		if i > 0 && !s.wait(r.Context(), turn.ChunkDelay) {
			abort()
		}
		payload := c.Raw
		if payload == "" {
			payload = c.marshal(id, req.Body.Model, i == 0)
		}
		fmt.Fprintf(w, "data: %s\n\n", payload)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if turn.Drop && turn.DropAfter >= len(chunks) {
		abort()
	}
	switch {
	case turn.StreamError != nil:
		b, _ := json.Marshal(map[string]*ErrorObject{"error": turn.StreamError})
		fmt.Fprintf(w, "data: %s\n\n", b)
	case !turn.NoDone:
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// complete answers a non-streaming request with the turn as one JSON
// response.
func (s *Server) complete(w http.ResponseWriter, req Request, turn Turn) {
	if turn.Drop {
		abort()
	}
	msg := goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleAssistant}
	var calls []goopenai.ToolCall
	for _, c := range turn.chunks() {
		msg.Content += c.Text
		msg.ReasoningContent += c.Reasoning
		for _, f := range c.ToolCalls {
			if f.ID != "" || f.Name != "" || len(calls) == 0 {
				calls = append(calls, goopenai.ToolCall{ID: f.ID, Type: goopenai.ToolTypeFunction})
			}
			last := &calls[len(calls)-1]
			if last.Function.Name == "" {
				last.Function.Name = f.Name
			}
			last.Function.Arguments += f.Args
		}
	}
	msg.ToolCalls = calls
	resp := goopenai.ChatCompletionResponse{
		ID:      fmt.Sprintf("chatcmpl-modeltest-%d", req.Seq),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Body.Model,
		Choices: []goopenai.ChatCompletionChoice{{Message: msg, FinishReason: goopenai.FinishReason(turn.finishReason())}},
	}
	if u := turn.usage(req); u != nil {
		resp.Usage = goopenai.Usage{
			PromptTokens:            u.Prompt,
			CompletionTokens:        u.Completion,
			TotalTokens:             u.Prompt + u.Completion,
			PromptTokensDetails:     &goopenai.PromptTokensDetails{CachedTokens: u.Cached},
			CompletionTokensDetails: &goopenai.CompletionTokensDetails{ReasoningTokens: u.Reasoning},
		}
	}
	copyHeader(w.Header(), turn.Header)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// chunks generates the content chunks of a stream turn.
func (t Turn) chunks() []Chunk {
	if t.Chunks != nil {
		return t.Chunks
	}
	var out []Chunk
	for _, r := range t.Reasoning {
		out = append(out, Chunk{Reasoning: r})
	}
	for _, x := range t.Text {
		out = append(out, Chunk{Text: x})
	}
	for i, c := range t.Calls {
		out = append(out, Chunk{ToolCalls: []Fragment{{Index: i, NoIndex: t.NoIndex, ID: c.ID, Name: c.Name}}})
		n := c.Fragments
		if n == 0 {
			n = 2
		}
		for _, a := range Split(c.Args, n) {
			out = append(out, Chunk{ToolCalls: []Fragment{{Index: i, NoIndex: t.NoIndex, Args: a}}})
		}
	}
	return out
}

func (t Turn) finishReason() string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.Calls) > 0:
		return "tool_calls"
	}
	for _, c := range t.Chunks {
		if len(c.ToolCalls) > 0 {
			return "tool_calls"
		}
	}
	return "stop"
}

// usage resolves the turn's usage for req; nil when it has none.
func (t Turn) usage(req Request) *Usage {
	if t.Usage == nil {
		return nil
	}
	u := *t.Usage
	if u.FromContent {
		in := 0
		for _, m := range req.Body.Messages {
			in += len(m.Content)
			for _, tc := range m.ToolCalls {
				in += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
		}
		out := 0
		for _, c := range t.chunks() {
			out += len(c.Text) + len(c.Reasoning)
			for _, f := range c.ToolCalls {
				out += len(f.Name) + len(f.Args)
			}
		}
		u.Prompt, u.Completion = (in+3)/4, (out+3)/4
	}
	return &u
}

func (u *Usage) wire() *chatwire.Usage {
	w := &chatwire.Usage{PromptTokens: u.Prompt, CompletionTokens: u.Completion, TotalTokens: u.Prompt + u.Completion}
	w.PromptTokensDetails.CachedTokens = u.Cached
	w.CompletionTokensDetails.ReasoningTokens = u.Reasoning
	return w
}

// marshal renders c as a chat.completion.chunk; the first chunk of a stream
// carries the assistant role, as OpenAI's do.
func (c Chunk) marshal(id, model string, first bool) string {
	out := chatwire.Chunk{ID: id, Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: model, Choices: []chatwire.Choice{}}
	if c.Usage != nil {
		out.Usage = c.Usage.wire()
	}
	if c.Text != "" || c.Reasoning != "" || len(c.ToolCalls) > 0 || c.FinishReason != "" || c.Usage == nil {
		ch := chatwire.Choice{Delta: chatwire.Delta{Content: c.Text, ReasoningContent: c.Reasoning}}
		if first {
			ch.Delta.Role = "assistant"
		}
		if c.FinishReason != "" {
			ch.FinishReason = &c.FinishReason
		}
		for _, f := range c.ToolCalls {
			tc := chatwire.ToolCall{ID: f.ID, Function: chatwire.Function{Name: f.Name, Arguments: f.Args}}
			if !f.NoIndex {
				tc.Index = &f.Index
			}
			if f.ID != "" {
				tc.Type = "function"
			}
			ch.Delta.ToolCalls = append(ch.Delta.ToolCalls, tc)
		}
		out.Choices = append(out.Choices, ch)
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(fmt.Sprintf("modeltest: marshal chunk: %v", err))
	}
	return string(b)
}
