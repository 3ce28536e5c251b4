package modeltest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want []string
	}{
		{"even", "abcdef", 3, []string{"ab", "cd", "ef"}},
		{"uneven", "Hello", 3, []string{"H", "el", "lo"}},
		{"shorter than n", "ok", 3, []string{"o", "k"}},
		{"runes", "héllo wörld", 2, []string{"héllo", " wörld"}},
		{"empty", "", 3, nil},
		{"n of one", "abc", 1, []string{"abc"}},
		{"n of zero", "abc", 0, []string{"abc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.s, tt.n)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Split(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
			if strings.Join(got, "") != tt.s {
				t.Errorf("pieces do not concatenate to the input")
			}
		})
	}
}

func client(s *Server, headers map[string]string) *goopenai.Client {
	cfg := goopenai.DefaultConfig("sk-test")
	cfg.BaseURL = s.URL()
	cfg.HTTPClient = headerDoer{c: s.Client(), h: headers}
	return goopenai.NewClientWithConfig(cfg)
}

type headerDoer struct {
	c *http.Client
	h map[string]string
}

func (d headerDoer) Do(r *http.Request) (*http.Response, error) {
	for k, v := range d.h {
		r.Header.Set(k, v)
	}
	return d.c.Do(r)
}

func route(path, parent string) map[string]string {
	h := map[string]string{HeaderAgentPath: path}
	if parent != "" {
		h[HeaderParentToolCallID] = parent
	}
	return h
}

func chatRequest(stream bool) goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{
		Model:    "m",
		Stream:   stream,
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "hello there"}},
	}
}

// streamAll reads a stream to its end with go-openai.
func streamAll(t *testing.T, c *goopenai.Client, req goopenai.ChatCompletionRequest) ([]goopenai.ChatCompletionStreamResponse, error) {
	t.Helper()
	stream, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var chunks []goopenai.ChatCompletionStreamResponse
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return chunks, err
		}
		chunks = append(chunks, ch)
	}
}

func text(chunks []goopenai.ChatCompletionStreamResponse) string {
	var b strings.Builder
	for _, c := range chunks {
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

func TestRouting(t *testing.T) {
	s := New(t)
	s.Script(DefaultKey, Text("default"))
	s.Script("main", Text("main 1"), Text("main 2"))
	s.Script(Key("main/gp", "t2"), Text("gp for t2"))
	s.Script("main/gp", Text("gp"))

	tests := []struct {
		headers map[string]string
		want    string
		key     string
	}{
		{nil, "default", DefaultKey},
		{route("main", ""), "main 1", "main"},
		{route("main/gp", "t2"), "gp for t2", Key("main/gp", "t2")},
		{route("main/gp", "t1"), "gp", "main/gp"},
		{route("main", ""), "main 2", "main"},
	}
	for _, tt := range tests {
		chunks, err := streamAll(t, client(s, tt.headers), chatRequest(true))
		if err != nil {
			t.Fatalf("%v: %v", tt.headers, err)
		}
		if got := text(chunks); got != tt.want {
			t.Errorf("%v: text %q, want %q", tt.headers, got, tt.want)
		}
	}
	if n := s.Count("main"); n != 2 {
		t.Errorf("Count(main) = %d, want 2", n)
	}
	reqs := s.Requests("main/gp")
	if len(reqs) != 1 || reqs[0].ParentToolCallID != "t1" || reqs[0].AgentPath != "main/gp" || reqs[0].Seq != 1 {
		t.Errorf("Requests(main/gp) = %+v", reqs)
	}
	all := s.AllRequests()
	if len(all) != 5 || all[4].Key != "main" || all[4].Seq != 2 || all[0].Body.Messages[0].Content != "hello there" {
		t.Errorf("AllRequests keys/seqs wrong: %+v", all)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Received.Before(all[i-1].Received) {
			t.Errorf("requests out of arrival order")
		}
	}
	if s.Remaining("main") != 0 || s.Remaining(DefaultKey) != 0 {
		t.Errorf("turns left unplayed")
	}
}

func TestExhaustedScriptFailsClearly(t *testing.T) {
	s := New(t)
	s.Script("main", Text("only"))
	c := client(s, route("main", ""))
	if _, err := streamAll(t, c, chatRequest(true)); err != nil {
		t.Fatal(err)
	}
	_, err := streamAll(t, c, chatRequest(true))
	var apiErr *goopenai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 500 || !strings.Contains(apiErr.Message, `key "main" exhausted`) {
		t.Errorf("err = %v, want HTTP 500 naming the key", err)
	}
	_, err = streamAll(t, client(s, route("other", "")), chatRequest(true))
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, `no script for key "other"`) {
		t.Errorf("err = %v, want HTTP 500 naming the unscripted key", err)
	}
	errs := s.TakeErrors()
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), `"main" exhausted: request 2, 1 turns scripted`) {
		t.Errorf("recorded errors = %v", errs)
	}
	if len(s.TakeErrors()) != 0 {
		t.Errorf("TakeErrors did not forget")
	}
	if n := len(s.AllRequests()); n != 3 {
		t.Errorf("recorded %d requests, want 3 (failures included)", n)
	}
}

func TestStreamWireFormat(t *testing.T) {
	s := New(t)
	s.Script(DefaultKey, Turn{
		Reasoning: []string{"hmm"},
		Text:      []string{"Hi"},
		Calls:     []Call{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}},
		Usage:     &Usage{Prompt: 7, Completion: 3, Cached: 2, Reasoning: 1},
		Header:    http.Header{"X-Request-Id": {"r1"}},
	})
	resp, err := s.Client().Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Header.Get("X-Request-Id") != "r1" {
		t.Errorf("headers = %v", resp.Header)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			events = append(events, line)
		}
	}
	want := []string{
		`"delta":{"role":"assistant","reasoning_content":"hmm"}`,
		`"delta":{"content":"Hi"}`,
		`"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"ls"}}]`,
		`"tool_calls":[{"index":0,"function":{"arguments":"{\"path"}}]`,
		`"tool_calls":[{"index":0,"function":{"arguments":"\":\"/\"}"}}]`,
		`"delta":{},"finish_reason":"tool_calls"`,
		`"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}`,
		`data: [DONE]`,
	}
	if len(events) != len(want) {
		t.Fatalf("events:\n%s\nwant %d of them", strings.Join(events, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(events[i], "data: ") || !strings.Contains(events[i], w) {
			t.Errorf("event %d = %s\nwant it to contain %s", i, events[i], w)
		}
	}
}

func TestNonStreamingResponse(t *testing.T) {
	s := New(t)
	s.Script(DefaultKey,
		Turn{Text: []string{"Hel", "lo"}, Usage: &Usage{Prompt: 5, Completion: 2}},
		Calls(Call{ID: "c1", Name: "ls", Args: `{"path":"/"}`}, Call{ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}),
	)
	c := client(s, nil)
	resp, err := c.CreateChatCompletion(context.Background(), chatRequest(false))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0]; got.Message.Content != "Hello" || got.FinishReason != "stop" || resp.Usage.TotalTokens != 7 {
		t.Errorf("response = %+v", resp)
	}
	resp, err = c.CreateChatCompletion(context.Background(), chatRequest(false))
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[1].ID != "c2" || calls[1].Function.Arguments != `{"pattern":"*"}` || resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool calls = %+v", calls)
	}
	// "hello there" is 11 characters: 3 tokens.
	if resp.Usage.PromptTokens != 3 {
		t.Errorf("usage from content = %+v, want prompt 3", resp.Usage)
	}
}

func TestTurnShapes(t *testing.T) {
	tests := []struct {
		name     string
		turn     Turn
		wantText string
		wantErr  func(error) bool
	}{
		{
			name:     "text",
			turn:     Text("Hello"),
			wantText: "Hello",
		},
		{
			name: "http error with headers",
			turn: HTTPError(429, RetryAfter("2"), ""),
			wantErr: func(err error) bool {
				var e *goopenai.APIError
				return errors.As(err, &e) && e.HTTPStatusCode == 429 && e.Type == "rate_limit_error"
			},
		},
		{
			name: "http error with a custom body",
			turn: HTTPError(400, nil, ErrorBody("invalid_request_error", "context_length_exceeded", "too long")),
			wantErr: func(err error) bool {
				var e *goopenai.APIError
				return errors.As(err, &e) && e.Code == "context_length_exceeded" && e.Message == "too long"
			},
		},
		{
			name: "mid-stream error",
			turn: Turn{Text: []string{"a"}, StreamError: &ErrorObject{Type: "server_error", Message: "boom"}},
			wantErr: func(err error) bool {
				var e *goopenai.APIError
				return errors.As(err, &e) && e.Type == "server_error" && e.HTTPStatusCode == 0
			},
			wantText: "a",
		},
		{
			name: "drop",
			turn: Drop(1, Text("Hello")),
			wantErr: func(err error) bool {
				return errors.Is(err, io.ErrUnexpectedEOF)
			},
			wantText: "H",
		},
		{
			name: "dynamic",
			turn: Dynamic(func(r Request) Turn {
				return Text("echo: " + r.Body.Messages[0].Content)
			}),
			wantText: "echo: hello there",
		},
		{
			name: "handler",
			turn: Turn{Handler: func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if !strings.Contains(string(body), "hello there") {
					http.Error(w, "body not readable", 500)
					return
				}
				io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"raw\"}}]}\n\ndata: [DONE]\n\n")
			}},
			wantText: "raw",
		},
		{
			name:     "raw chunks",
			turn:     Turn{Chunks: []Chunk{{Raw: `{"choices":[{"index":0,"delta":{"content":"x"}}]}`}, {Text: "y"}}},
			wantText: "xy",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t)
			s.Script(DefaultKey, tt.turn)
			chunks, err := streamAll(t, client(s, nil), chatRequest(true))
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Errorf("err = %v (%T), not the expected one", err, err)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got := text(chunks); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
		})
	}
}

func TestCloseAbortsDelays(t *testing.T) {
	s := New(nil)
	slow := Text("late")
	slow.FirstByteDelay = time.Minute
	s.Script(DefaultKey, slow)
	errc := make(chan error, 1)
	go func() {
		_, err := streamAll(t, client(s, nil), chatRequest(true))
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.AllRequests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a delayed turn pending", d)
	}
	if err := <-errc; err == nil {
		t.Errorf("request succeeded across Close")
	}
	s.Close() // idempotent
}
