package demo

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"
)

func TestNextPlaysTheScript(t *testing.T) {
	user := Msg{Role: "user", Text: "hi <b>"}
	tool := Msg{Role: "tool", Text: "ok"}
	conv := func(results int) []Msg {
		m := []Msg{{Role: "system", Text: "sys"}, user}
		for range results {
			m = append(m, Msg{Role: "assistant"}, tool)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		msgs  []Msg
		sub   bool
		calls []string
		text  string
	}{
		{"plan", conv(0), false, []string{"write_todos"}, "You asked: hi <b>"},
		{"write", conv(1), false, []string{"write_file"}, "Writing"},
		{"run, gated", conv(2), false, []string{"write_todos", "execute"}, "gated"},
		{"out of script goes on", conv(3), false, []string{"write_todos", "task"}, "subagent"},
		{"subagent", conv(4), false, []string{"write_todos", "task"}, "subagent"},
		{"last todos", conv(6), false, []string{"write_todos"}, ""},
		{"summary", conv(7), false, nil, "Done"},
		{"a new message starts over", append(conv(7), Msg{Role: "user", Text: "again"}), false, []string{"write_todos"}, "again"},
		{"subagent looks", []Msg{{Role: "user", Text: "List"}}, true, []string{"ls"}, ""},
		{"subagent reports", []Msg{{Role: "user", Text: "List"}, {Role: "assistant"}, {Role: "tool", Text: "hello.sh"}}, true, nil, "hello.sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turn := Next(tc.msgs, tc.sub)
			var names []string
			for _, c := range turn.Calls {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.calls, ",") {
				t.Errorf("calls %v, want %v", names, tc.calls)
			}
			if !strings.Contains(turn.Text, tc.text) {
				t.Errorf("text %q lacks %q", turn.Text, tc.text)
			}
		})
	}
}

// TestServerSpeaksOpenAI streams a turn through go-openai, the client
// agentd's model adapter is built on.
func TestServerSpeaksOpenAI(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := goopenai.DefaultConfig("unused")
	cfg.BaseURL = s.URL()
	c := goopenai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := goopenai.ChatCompletionRequest{Model: Model, Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "show me"}}}

	resp, err := c.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.ToolCalls; len(got) != 1 || got[0].Function.Name != "write_todos" {
		t.Fatalf("tool calls %+v, want write_todos", got)
	}

	req.Stream = true
	st, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var text, args strings.Builder
	var finish goopenai.FinishReason
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range r.Choices {
			text.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if !strings.Contains(text.String(), "DEMO") || !strings.Contains(args.String(), `"todos"`) || finish != goopenai.FinishReasonToolCalls {
		t.Fatalf("streamed text %q, args %q, finish %q", text.String(), args.String(), finish)
	}
}

// FuzzNext: any conversation gets an answer, never a panic, and every
// call it makes has arguments that marshal.
func FuzzNext(f *testing.F) {
	f.Add("user,tool,tool,user,tool", "hi", false)
	f.Add("tool,assistant,tool", "", true)
	f.Fuzz(func(t *testing.T, roles, text string, sub bool) {
		var msgs []Msg
		for _, r := range strings.Split(roles, ",") {
			msgs = append(msgs, Msg{Role: r, Text: text})
		}
		turn := Next(msgs, sub)
		if turn.Text == "" && len(turn.Calls) == 0 {
			t.Fatalf("empty turn for %q", roles)
		}
		for _, c := range turn.Calls {
			if _, err := json.Marshal(c.Args); err != nil {
				t.Fatal(err)
			}
		}
	})
}
