package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func TestGenerateStreamsTextDeltasInOrder(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.Text("Hello, world"))
	m, _ := newTestModel(t, srv, nil)

	var rec recorder
	resp, err := m.Generate(testContext(t), userRequest("hi"), rec.on)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if got, want := rec.texts(), []string{"1:Hell", "1:o, w", "1:orld"}; !reflect.DeepEqual(got, want) {
		t.Errorf("deltas = %q, want %q", got, want)
	}
	if resp.Message.Role != model.RoleAssistant || resp.Message.Content != "Hello, world" {
		t.Errorf("message = %+v, want assistant %q", resp.Message, "Hello, world")
	}
	if resp.FinishReason != "stop" || resp.Attempts != 1 || len(resp.Message.ToolCalls) != 0 {
		t.Errorf("finish %q attempts %d calls %d, want stop 1 0", resp.FinishReason, resp.Attempts, len(resp.Message.ToolCalls))
	}
	if resp.Usage.Estimated || resp.Usage.Prompt == 0 || resp.Usage.Total != resp.Usage.Prompt+resp.Usage.Completion {
		t.Errorf("usage = %+v, want reported usage", resp.Usage)
	}
}

func TestGenerateReasoningDeltas(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.Turn{
		Reasoning: []string{"The user ", "greets."},
		Text:      []string{"Hi"},
		Usage:     &modeltest.Usage{Prompt: 9, Completion: 20, Reasoning: 15, Cached: 4},
	})
	m, _ := newTestModel(t, srv, nil)

	var rec recorder
	resp, err := m.Generate(testContext(t), userRequest("hi"), rec.on)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []model.Delta{{Reasoning: "The user ", Attempt: 1}, {Reasoning: "greets.", Attempt: 1}, {Text: "Hi", Attempt: 1}}
	if got := rec.all(); !reflect.DeepEqual(got, want) {
		t.Errorf("deltas = %+v, want %+v", got, want)
	}
	if resp.Message.ReasoningContent != "The user greets." || resp.Message.Content != "Hi" {
		t.Errorf("message = %+v", resp.Message)
	}
	if want := (model.Usage{Prompt: 9, Completion: 20, Total: 29, Cached: 4, Reasoning: 15}); resp.Usage != want {
		t.Errorf("usage = %+v, want %+v", resp.Usage, want)
	}
}

func TestGenerateToolCalls(t *testing.T) {
	i0 := 0
	tests := []struct {
		name string
		turn modeltest.Turn
		want []model.ToolCall
	}{
		{
			name: "parallel calls",
			turn: modeltest.Calls(
				modeltest.Call{ID: "c1", Name: "sleep", Args: `{"ms":300}`},
				modeltest.Call{ID: "c2", Name: "sleep", Args: `{"ms":300}`, Fragments: 5},
				modeltest.Call{ID: "c3", Name: "counter"},
			),
			want: []model.ToolCall{{ID: "c1", Name: "sleep", Args: `{"ms":300}`}, {ID: "c2", Name: "sleep", Args: `{"ms":300}`}, {ID: "c3", Name: "counter", Args: `{}`}},
		},
		{
			name: "parallel calls without index",
			turn: modeltest.Turn{NoIndex: true, Calls: []modeltest.Call{
				{ID: "c1", Name: "ls", Args: `{"path":"/"}`},
				{ID: "c2", Name: "glob", Args: `{"pattern":"*"}`},
			}},
			want: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}, {ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}},
		},
		{
			// docs/agent-core.md §11 #10 over the wire.
			name: "interleaved indexed fragments",
			turn: modeltest.Turn{Chunks: []modeltest.Chunk{
				{ToolCalls: []modeltest.Fragment{{Index: 0, ID: "c1", Name: "ls"}}},
				{ToolCalls: []modeltest.Fragment{{Index: 1, ID: "c2", Name: "glob", Args: `{"pat`}}},
				{ToolCalls: []modeltest.Fragment{{Index: 0, Args: `{"path":"/"}`}}},
				{ToolCalls: []modeltest.Fragment{{Index: 1, Args: `tern":"*"}`}}},
			}},
			want: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}, {ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}},
		},
		{
			// docs/agent-core.md §11 #12 over the wire.
			name: "every call as index 0",
			turn: modeltest.Turn{Chunks: []modeltest.Chunk{
				{ToolCalls: []modeltest.Fragment{{Index: i0, ID: "c1", Name: "ls", Args: `{}`}}},
				{ToolCalls: []modeltest.Fragment{{Index: i0, ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}}},
			}},
			want: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{}`}, {ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}},
		},
		{
			// docs/agent-core.md §11 #14 over the wire.
			name: "call with finish_reason stop",
			turn: modeltest.Turn{FinishReason: "stop", Calls: []modeltest.Call{{ID: "c1", Name: "ls", Args: `{}`}}},
			want: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := modeltest.New(t)
			srv.Script(modeltest.DefaultKey, tt.turn)
			m, _ := newTestModel(t, srv, nil)
			resp, err := m.Generate(testContext(t), userRequest("go"), nil)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !reflect.DeepEqual(resp.Message.ToolCalls, tt.want) {
				t.Errorf("calls = %+v, want %+v", resp.Message.ToolCalls, tt.want)
			}
		})
	}
}

// docs/agent-core.md §11 #68 and its counterpart.
func TestGenerateUsage(t *testing.T) {
	tests := []struct {
		name          string
		turn          modeltest.Turn
		wantEstimated bool
	}{
		{"usage chunk present", modeltest.Turn{Text: []string{"ok"}, Usage: &modeltest.Usage{Prompt: 40, Completion: 1}}, false},
		{"usage chunk absent", modeltest.Turn{Text: []string{"a fairly long answer"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := modeltest.New(t)
			srv.Script(modeltest.DefaultKey, tt.turn)
			m, _ := newTestModel(t, srv, nil)
			resp, err := m.Generate(testContext(t), userRequest("tell me"), nil)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			u := resp.Usage
			if u.Estimated != tt.wantEstimated {
				t.Errorf("estimated = %v, want %v (usage %+v)", u.Estimated, tt.wantEstimated, u)
			}
			if u.Prompt <= 0 || u.Completion <= 0 || u.Total != u.Prompt+u.Completion {
				t.Errorf("usage = %+v, want positive prompt and completion summing to total", u)
			}
			if tt.wantEstimated {
				// "You are terse." + "tell me" = 21 chars → 6 tokens;
				// "a fairly long answer" = 20 chars → 5 tokens.
				if u.Prompt != 6 || u.Completion != 5 {
					t.Errorf("estimate = %+v, want prompt 6 completion 5", u)
				}
			}
		})
	}
}

func TestGenerateRequestOnTheWire(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.Key("main/researcher", "t1"), modeltest.Text("ok"), modeltest.Text("ok"))
	temp := float32(0.5)
	m, _ := newTestModel(t, srv, func(c *Config) {
		c.MaxOutputTokens = 2048
		c.ParallelToolCalls = ptr(false)
		c.ExtraHeaders = map[string]string{"X-Tenant": "acme", HeaderRunID: "overridden"}
	})
	req := model.Request{
		Model: "qwen3-8b-instruct",
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "sys"},
			{Role: model.RoleUser, Content: "list", Name: "alice"},
			{Role: model.RoleAssistant, Content: "", ReasoningContent: "secret thoughts", ToolCalls: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}}},
			{Role: model.RoleTool, ToolCallID: "c1", Name: "ls", Content: "a.txt"},
		},
		Tools: []model.ToolDef{
			{Name: "ls", Description: "List files", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			{Name: "counter", Description: "Count"},
		},
		Temperature: &temp,
		MaxTokens:   100,
		Metadata:    model.Metadata{RunID: "run-7", AgentPath: "main/researcher", ParentToolCallID: "t1"},
	}
	ctx := testContext(t)
	if _, err := m.Generate(ctx, req, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	// A second call without tools and overrides.
	if _, err := m.Generate(ctx, model.Request{Messages: req.Messages[:2], Metadata: req.Metadata}, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}

	got := srv.Requests(modeltest.Key("main/researcher", "t1"))
	if len(got) != 2 {
		t.Fatalf("server saw %d requests for the key, want 2", len(got))
	}
	r := got[0]
	for h, want := range map[string]string{
		HeaderRunID:            "run-7",
		HeaderAgentPath:        "main/researcher",
		HeaderParentToolCallID: "t1",
		"X-Tenant":             "acme",
		"Authorization":        "Bearer sk-test",
	} {
		if v := r.Header.Get(h); v != want {
			t.Errorf("header %s = %q, want %q", h, v, want)
		}
	}
	b := r.Body
	if b.Model != "qwen3-8b-instruct" || !b.Stream || b.StreamOptions == nil || !b.StreamOptions.IncludeUsage {
		t.Errorf("model %q stream %v options %+v, want override, streaming with usage", b.Model, b.Stream, b.StreamOptions)
	}
	//lint:ignore SA1019 the test asserts that the deprecated max_tokens stays unset
	maxTokens := b.MaxTokens
	if b.MaxCompletionTokens != 100 || maxTokens != 0 || b.Temperature != 0.5 {
		t.Errorf("max_completion_tokens %d max_tokens %d temperature %v", b.MaxCompletionTokens, maxTokens, b.Temperature)
	}
	if b.ParallelToolCalls != false {
		t.Errorf("parallel_tool_calls = %v, want false", b.ParallelToolCalls)
	}
	if len(b.Tools) != 2 || b.Tools[0].Type != goopenai.ToolTypeFunction || b.Tools[0].Function.Name != "ls" {
		t.Fatalf("tools = %+v", b.Tools)
	}
	if params, _ := json.Marshal(b.Tools[1].Function.Parameters); string(params) != `{"properties":{},"type":"object"}` {
		t.Errorf("parameters of a tool without any = %s", params)
	}
	msgs := b.Messages
	if len(msgs) != 4 || msgs[1].Name != "alice" || msgs[2].ToolCalls[0].ID != "c1" || msgs[2].ToolCalls[0].Function.Arguments != `{"path":"/"}` ||
		msgs[3].Role != "tool" || msgs[3].ToolCallID != "c1" || msgs[3].Name != "" || msgs[3].Content != "a.txt" {
		t.Errorf("messages = %+v", msgs)
	}
	if strings.Contains(string(r.Raw), "secret thoughts") {
		t.Errorf("reasoning content was sent back to the provider: %s", r.Raw)
	}

	b2 := got[1].Body
	if b2.Model != "test-model" || b2.MaxCompletionTokens != 2048 || b2.ParallelToolCalls != nil || len(b2.Tools) != 0 {
		t.Errorf("second request: model %q max %d parallel %v tools %d; want defaults and no parallel_tool_calls without tools",
			b2.Model, b2.MaxCompletionTokens, b2.ParallelToolCalls, len(b2.Tools))
	}
	if strings.Contains(string(got[1].Raw), "temperature") {
		t.Errorf("temperature sent without being configured: %s", got[1].Raw)
	}
}

func TestGenerateOptionalFieldsOff(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.Text("ok"))
	m, _ := newTestModel(t, srv, func(c *Config) { c.StreamUsage = ptr(false); c.APIKey = "" })
	req := userRequest("x")
	req.Metadata = model.Metadata{}
	req.Tools = []model.ToolDef{{Name: "ls"}}
	if _, err := m.Generate(testContext(t), req, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	r := srv.AllRequests()[0]
	for _, field := range []string{"stream_options", "parallel_tool_calls", "max_completion_tokens"} {
		if strings.Contains(string(r.Raw), field) {
			t.Errorf("request has %s: %s", field, r.Raw)
		}
	}
	for _, h := range []string{"Authorization", HeaderRunID, HeaderAgentPath, HeaderParentToolCallID} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("header %s = %q, want none", h, v)
		}
	}
}

func TestGenerateInvalidToolSchema(t *testing.T) {
	srv := modeltest.New(t)
	m, _ := newTestModel(t, srv, nil)
	req := userRequest("x")
	req.Tools = []model.ToolDef{{Name: "bad", Parameters: json.RawMessage(`{"type":`)}}
	_, err := m.Generate(testContext(t), req, nil)
	if model.CodeOf(err) != model.CodeBadRequest {
		t.Fatalf("err = %v, want MODEL_BAD_REQUEST", err)
	}
	if n := len(srv.AllRequests()); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

func TestGenerateConcurrentCalls(t *testing.T) {
	srv := modeltest.New(t)
	paths := []string{"main/a", "main/b", "main/c", "main/d"}
	for _, p := range paths {
		srv.Script(p, modeltest.Text("from "+p), modeltest.Calls(modeltest.Call{ID: "x", Name: "echo", Args: `{"text":"` + p + `"}`}))
	}
	m, _ := newTestModel(t, srv, nil)
	ctx := testContext(t)
	errs := make(chan error, len(paths)*2)
	for _, p := range paths {
		go func() {
			for range 2 {
				req := userRequest("go")
				req.Metadata.AgentPath = p
				var rec recorder
				_, err := m.Generate(ctx, req, rec.on)
				errs <- err
			}
		}()
	}
	for range len(paths) * 2 {
		if err := <-errs; err != nil {
			t.Errorf("Generate: %v", err)
		}
	}
	for _, p := range paths {
		if n := srv.Count(p); n != 2 {
			t.Errorf("%s: %d requests, want 2", p, n)
		}
	}
}

// TestGenerateStreamsToolCallFragments: the arguments of tool calls reach
// onDelta fragment by fragment, as the scripted SSE server sends them, with
// each call's id and name once, before Generate returns the whole calls.
func TestGenerateStreamsToolCallFragments(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.Calls(
		modeltest.Call{ID: "c1", Name: "write_file", Args: `{"file_path":"/a.txt","content":"hello world"}`, Fragments: 4},
		modeltest.Call{ID: "c2", Name: "ls", Args: `{"path":"/"}`, Fragments: 3},
	))
	m, _ := newTestModel(t, srv, nil)
	var rec recorder
	resp, err := m.Generate(testContext(t), userRequest("hi"), rec.on)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	type call struct {
		id, name, args string
		fragments      int
	}
	got := map[int]*call{}
	for _, d := range rec.all() {
		if d.Attempt != 1 || d.Text != "" {
			t.Errorf("delta %+v", d)
		}
		for _, f := range d.ToolCalls {
			c := got[f.Index]
			if c == nil {
				c = &call{}
				got[f.Index] = c
			}
			if c.name != "" && f.Name != "" {
				t.Errorf("call %d: name sent twice", f.Index)
			}
			c.id += f.ID
			c.name += f.Name
			c.args += f.Args
			if f.Args != "" {
				c.fragments++
			}
		}
	}
	if len(got) != 2 || len(resp.Message.ToolCalls) != 2 {
		t.Fatalf("streamed %d calls, message has %+v", len(got), resp.Message.ToolCalls)
	}
	for i, want := range resp.Message.ToolCalls {
		c := got[i]
		if c.id != want.ID || c.name != want.Name || c.args != want.Args {
			t.Errorf("call %d streamed as %+v, message has %+v", i, *c, want)
		}
	}
	if got[0].fragments != 4 || got[1].fragments != 3 {
		t.Errorf("argument fragments %d and %d, want 4 and 3", got[0].fragments, got[1].fragments)
	}
}
