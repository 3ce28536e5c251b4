package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/model/chatwire"
)

// Model is the model name the server reports.
const Model = "plumb-demo"

// Workspace is the directory the demo writes into.
const Workspace = "/workspace"

// HeaderParentToolCallID is set by agentd's model client on a subagent's
// requests (pkg/model/openai).
const HeaderParentToolCallID = "X-Plumb-Parent-Tool-Call-Id"

// Server is the demo model on a loopback listener.
type Server struct {
	srv *http.Server
	lis net.Listener
	url string
}

// Start serves the demo model on 127.0.0.1 (a port of its own).
func Start() (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo model: %w", err)
	}
	s := &Server{lis: lis, url: "http://" + lis.Addr().String() + "/v1"}
	s.srv = &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// URL is the OpenAI base URL of the server (…/v1).
func (s *Server) URL() string { return s.url }

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// Handler answers POST /v1/chat/completions (streamed or not).
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", completions)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"plumb"}]}`, Model)
	})
	return mux
}

// request is the part of a chat completions request the demo reads.
type request struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []message `json:"messages"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text is a message's content as text (a string, or the text parts).
func (m message) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Call is one tool call of a turn.
type Call struct {
	Name string
	Args any
}

// Turn is one answer: text, then tool calls.
type Turn struct {
	Text  string
	Calls []Call
}

// Next is the demo's answer to a conversation: msgs are its messages
// (role and text), sub says whether a subagent asks.
func Next(msgs []Msg, sub bool) Turn {
	lastUser, results := -1, 0
	for i, m := range msgs {
		switch m.Role {
		case "user":
			lastUser, results = i, 0
		case "tool":
			if lastUser >= 0 {
				results++
			}
		}
	}
	ask := ""
	if lastUser >= 0 {
		ask = msgs[lastUser].Text
	}
	if sub {
		if results == 0 {
			return Turn{Text: "Looking at the workspace.", Calls: []Call{{"ls", map[string]any{"path": Workspace}}}}
		}
		listing := ""
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == "tool" {
				listing = msgs[i].Text
				break
			}
		}
		return Turn{Text: "The workspace holds:\n" + listing}
	}
	todos := func(done int) Call {
		items := []string{"Write a script in the box", "Run it (waits for your approval)", "Ask a subagent to check the workspace", "Report back"}
		var list []map[string]string
		for i, it := range items {
			st := "pending"
			switch {
			case i < done:
				st = "completed"
			case i == done:
				st = "in_progress"
			}
			list = append(list, map[string]string{"content": it, "status": st})
		}
		return Call{"write_todos", map[string]any{"todos": list}}
	}
	script := "#!/bin/sh\necho \"hello from the plumb demo, running in $(hostname)\"\necho \"files here: $(ls | wc -l)\"\n"
	switch results {
	case 0:
		return Turn{Text: "This is plumb's built-in DEMO model (no real model is configured). You asked: " + ask +
			"\nHere is the plan.", Calls: []Call{todos(0)}}
	case 1:
		return Turn{Text: "Writing the script.", Calls: []Call{{"write_file", map[string]any{"file_path": Workspace + "/hello.sh", "content": script}}}}
	case 2:
		return Turn{Text: "Running it: this call is gated, approve it in the console or with agentctl.", Calls: []Call{todos(1), {"execute", map[string]any{"command": "sh " + Workspace + "/hello.sh"}}}}
	case 4:
		return Turn{Text: "Asking a subagent to look around.", Calls: []Call{todos(2), {"task", map[string]any{"subagent_type": "general-purpose", "description": "List the files in " + Workspace + " and report what you find."}}}}
	case 6:
		return Turn{Calls: []Call{todos(4)}}
	}
	if results < 6 {
		// An odd count: a call was rejected or answered out of the
		// script; go on from the next step.
		return Next(append(msgs, Msg{Role: "tool"}), sub)
	}
	return Turn{Text: "Done: the script is in " + Workspace + "/hello.sh, it ran in the box, and a subagent checked the workspace. " +
		"Configure a real model (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL) to do real work."}
}

// Msg is one message of a conversation as Next reads it.
type Msg struct{ Role, Text string }

func completions(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	msgs := make([]Msg, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = Msg{Role: m.Role, Text: m.text()}
	}
	turn := Next(msgs, r.Header.Get(HeaderParentToolCallID) != "")
	id := fmt.Sprintf("chatcmpl-demo-%d", time.Now().UnixNano())
	calls := make([]chatwire.ToolCall, len(turn.Calls))
	for i, c := range turn.Calls {
		args, _ := json.Marshal(c.Args)
		idx := i
		calls[i] = chatwire.ToolCall{Index: &idx, ID: fmt.Sprintf("call_demo_%d_%d", time.Now().UnixNano(), i), Type: "function",
			Function: chatwire.Function{Name: c.Name, Arguments: string(args)}}
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	usage := &chatwire.Usage{PromptTokens: 100 * len(msgs), CompletionTokens: 20 + len(turn.Text)/4}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		out := map[string]any{
			"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
				"message": map[string]any{"role": "assistant", "content": turn.Text, "tool_calls": nilIfEmpty(calls)}}},
			"usage": usage,
		}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	send := func(c chatwire.Chunk) error {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", time.Now().Unix(), Model
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	first := true
	// The text in a few pieces, as a model streams it.
	for _, piece := range pieces(turn.Text, 24) {
		d := chatwire.Delta{Content: piece}
		if first {
			d.Role, first = "assistant", false
		}
		if send(chatwire.Chunk{Choices: []chatwire.Choice{{Delta: d}}}) != nil {
			return
		}
	}
	if len(calls) > 0 {
		d := chatwire.Delta{ToolCalls: calls}
		if first {
			d.Role = "assistant"
		}
		if send(chatwire.Chunk{Choices: []chatwire.Choice{{Delta: d}}}) != nil {
			return
		}
	}
	if send(chatwire.Chunk{Choices: []chatwire.Choice{{FinishReason: &finish}}}) != nil {
		return
	}
	if send(chatwire.Chunk{Choices: []chatwire.Choice{}, Usage: usage}) != nil {
		return
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func nilIfEmpty(c []chatwire.ToolCall) any {
	if len(c) == 0 {
		return nil
	}
	return c
}

// pieces splits s into chunks of about n bytes at rune boundaries.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && !utf8Start(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
