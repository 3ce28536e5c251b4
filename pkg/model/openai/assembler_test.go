package openai

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model"
)

// Chunk builders for the assembler table.

func chunkOf(d goopenai.ChatCompletionStreamChoiceDelta) goopenai.ChatCompletionStreamResponse {
	return goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{{Delta: d}}}
}

func content(s string) goopenai.ChatCompletionStreamResponse {
	return chunkOf(goopenai.ChatCompletionStreamChoiceDelta{Content: s})
}

func thinking(s string) goopenai.ChatCompletionStreamResponse {
	return chunkOf(goopenai.ChatCompletionStreamChoiceDelta{ReasoningContent: s})
}

// noIdx marks a fragment without an index.
const noIdx = -1

func frag(index int, id, name, args string) goopenai.ChatCompletionStreamResponse {
	tc := goopenai.ToolCall{ID: id, Function: goopenai.FunctionCall{Name: name, Arguments: args}}
	if index != noIdx {
		tc.Index = &index
	}
	return chunkOf(goopenai.ChatCompletionStreamChoiceDelta{ToolCalls: []goopenai.ToolCall{tc}})
}

func finish(reason string) goopenai.ChatCompletionStreamResponse {
	return goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{{FinishReason: goopenai.FinishReason(reason)}}}
}

func usageChunk(prompt, completion, cached, reasoning int) goopenai.ChatCompletionStreamResponse {
	return goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{}, Usage: &goopenai.Usage{
		PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails:     &goopenai.PromptTokensDetails{CachedTokens: cached},
		CompletionTokensDetails: &goopenai.CompletionTokensDetails{ReasoningTokens: reasoning},
	}}
}

func calls(cs ...model.ToolCall) []model.ToolCall { return cs }

func call(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Args: args}
}

func TestAssembler(t *testing.T) {
	tests := []struct {
		name    string
		chunks  []goopenai.ChatCompletionStreamResponse
		sawDone bool

		wantText, wantReasoning string
		wantTextDeltas          []string
		wantCalls               []model.ToolCall
		wantFinish              string
		wantComplete            bool
		wantUsage               *model.Usage
	}{
		{
			name:           "text in three chunks with usage",
			chunks:         []goopenai.ChatCompletionStreamResponse{content("He"), content("ll"), content("o"), finish("stop"), usageChunk(12, 3, 4, 0)},
			sawDone:        true,
			wantText:       "Hello",
			wantTextDeltas: []string{"He", "ll", "o"},
			wantFinish:     "stop",
			wantComplete:   true,
			wantUsage:      &model.Usage{Prompt: 12, Completion: 3, Total: 15, Cached: 4},
		},
		{
			name:          "reasoning then text",
			chunks:        []goopenai.ChatCompletionStreamResponse{thinking("let me "), thinking("think"), content("ok"), finish("stop"), usageChunk(5, 9, 0, 7)},
			sawDone:       true,
			wantText:      "ok",
			wantReasoning: "let me think",
			wantFinish:    "stop",
			wantComplete:  true,
			wantUsage:     &model.Usage{Prompt: 5, Completion: 9, Total: 14, Reasoning: 7},
		},
		{
			// docs/agent-core.md §11 #10.
			name: "interleaved fragments with index",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "c1", "ls", ""),
				frag(1, "c2", "glob", `{"pat`),
				frag(0, "", "", `{"path":"/"}`),
				frag(1, "", "", `tern":"*"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`), call("c2", "glob", `{"pattern":"*"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #11: fragments without index follow the id, and
			// id-less fragments go to the most recently opened slot.
			name: "fragments without index",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(noIdx, "c1", "ls", ""),
				frag(noIdx, "", "", `{"path":"/"}`),
				frag(noIdx, "c2", "glob", `{"pat`),
				frag(noIdx, "", "", `tern":"*"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`), call("c2", "glob", `{"pattern":"*"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name: "fragments without index routed by repeated id",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(noIdx, "c1", "ls", `{"pa`),
				frag(noIdx, "c2", "glob", `{"pattern"`),
				frag(noIdx, "c1", "", `th":"/"}`),
				frag(noIdx, "c2", "", `:"*"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`), call("c2", "glob", `{"pattern":"*"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #12.
			name: "every call sent as index 0",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "c1", "ls", `{"path"`),
				frag(0, "", "", `:"/"}`),
				frag(0, "c2", "glob", `{"pattern":"*"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`), call("c2", "glob", `{"pattern":"*"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name: "identical id and name repeated on every fragment",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "c1", "ls", `{"path"`),
				frag(0, "c1", "ls", `:"/"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name: "id arrives after the index was bound",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "", "ls", `{"path"`),
				frag(0, "c9", "", `:"/"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("c9", "ls", `{"path":"/"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #13, first half.
			name: "empty ids are synthesized",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "", "ls", `{}`),
				frag(1, "", "glob", `{"pattern":"*"}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("call_01", "ls", `{}`), call("call_02", "glob", `{"pattern":"*"}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #13, second half.
			name: "duplicate ids get suffixes",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "x", "ls", `{}`),
				frag(1, "x", "ls", `{}`),
				frag(2, "x", "ls", `{}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("x", "ls", `{}`), call("x_2", "ls", `{}`), call("x_3", "ls", `{}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name: "suffix skips an id already taken",
			chunks: []goopenai.ChatCompletionStreamResponse{
				frag(0, "x", "ls", `{}`),
				frag(1, "x_2", "ls", `{}`),
				frag(2, "x", "ls", `{}`),
				finish("tool_calls"),
			},
			sawDone:      true,
			wantCalls:    calls(call("x", "ls", `{}`), call("x_2", "ls", `{}`), call("x_3", "ls", `{}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #14: the calls decide, not the finish reason.
			name:         "tool call with finish_reason stop",
			chunks:       []goopenai.ChatCompletionStreamResponse{frag(0, "c1", "ls", `{"path":"/"}`), finish("stop")},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{"path":"/"}`)),
			wantFinish:   "stop",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §11 #15: args are kept as cut; the executor reports
			// the output token limit.
			name:         "finish_reason length cuts the args",
			chunks:       []goopenai.ChatCompletionStreamResponse{frag(0, "c1", "write_file", `{"file_path":"/a.txt","content":"abc`), finish("length")},
			sawDone:      true,
			wantCalls:    calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"abc`)),
			wantFinish:   "length",
			wantComplete: true,
		},
		{
			name:         "empty args become an empty object",
			chunks:       []goopenai.ChatCompletionStreamResponse{frag(0, "c1", "counter", ""), finish("tool_calls")},
			sawDone:      true,
			wantCalls:    calls(call("c1", "counter", `{}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name:         "text and a call in one message",
			chunks:       []goopenai.ChatCompletionStreamResponse{content("Let me look."), frag(0, "c1", "ls", `{}`), finish("tool_calls")},
			sawDone:      true,
			wantText:     "Let me look.",
			wantCalls:    calls(call("c1", "ls", `{}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name: "choices other than 0 are ignored",
			chunks: []goopenai.ChatCompletionStreamResponse{
				{Choices: []goopenai.ChatCompletionStreamChoice{
					{Index: 1, Delta: goopenai.ChatCompletionStreamChoiceDelta{Content: "other"}},
					{Index: 0, Delta: goopenai.ChatCompletionStreamChoiceDelta{Content: "mine"}},
				}},
				finish("stop"),
			},
			sawDone:      true,
			wantText:     "mine",
			wantFinish:   "stop",
			wantComplete: true,
		},
		{
			name:         "missing finish reason is derived from the calls",
			chunks:       []goopenai.ChatCompletionStreamResponse{frag(0, "c1", "ls", `{}`)},
			sawDone:      true,
			wantCalls:    calls(call("c1", "ls", `{}`)),
			wantFinish:   "tool_calls",
			wantComplete: true,
		},
		{
			name:         "finish reason then EOF without DONE is complete",
			chunks:       []goopenai.ChatCompletionStreamResponse{content("ok"), finish("stop")},
			wantText:     "ok",
			wantFinish:   "stop",
			wantComplete: true,
		},
		{
			// docs/agent-core.md §9 step 5.
			name:         "EOF without DONE or finish reason is truncated",
			chunks:       []goopenai.ChatCompletionStreamResponse{content("par"), content("tial")},
			wantText:     "partial",
			wantFinish:   "stop",
			wantComplete: false,
		},
		{
			name: "last usage wins",
			chunks: []goopenai.ChatCompletionStreamResponse{
				content("a"), usageChunk(1, 1, 0, 0), finish("stop"), usageChunk(20, 2, 0, 0),
			},
			sawDone:      true,
			wantText:     "a",
			wantFinish:   "stop",
			wantComplete: true,
			wantUsage:    &model.Usage{Prompt: 20, Completion: 2, Total: 22},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			a := newAssembler(func() string { n++; return fmt.Sprintf("call_%02d", n) })
			var textDeltas []string
			var reasoning strings.Builder
			streamed := map[int]*model.ToolCall{}
			for _, c := range tt.chunks {
				text, r, calls := a.add(c)
				if text != "" {
					textDeltas = append(textDeltas, text)
				}
				reasoning.WriteString(r)
				for _, d := range calls {
					sc := streamed[d.Index]
					if sc == nil {
						sc = &model.ToolCall{}
						streamed[d.Index] = sc
					}
					if (d.ID != "" && sc.ID != "") || (d.Name != "" && sc.Name != "") {
						t.Errorf("call %d: id or name streamed twice: %+v after %+v", d.Index, d, *sc)
					}
					sc.ID += d.ID
					sc.Name += d.Name
					sc.Args += d.Args
				}
			}
			// The fragments streamed for each slot add up to what it assembled.
			for i, sl := range a.slots {
				got := streamed[i]
				if got == nil {
					got = &model.ToolCall{}
				}
				if got.ID != sl.id || got.Name != sl.name || got.Args != sl.args.String() {
					t.Errorf("call %d streamed as %+v, assembled id=%q name=%q args=%q", i, *got, sl.id, sl.name, sl.args.String())
				}
			}
			if got := a.complete(tt.sawDone); got != tt.wantComplete {
				t.Errorf("complete = %v, want %v", got, tt.wantComplete)
			}
			msg, fin := a.result()
			if msg.Role != model.RoleAssistant {
				t.Errorf("role = %q, want assistant", msg.Role)
			}
			if msg.Content != tt.wantText {
				t.Errorf("text = %q, want %q", msg.Content, tt.wantText)
			}
			if msg.ReasoningContent != tt.wantReasoning || reasoning.String() != tt.wantReasoning {
				t.Errorf("reasoning = %q (streamed %q), want %q", msg.ReasoningContent, reasoning.String(), tt.wantReasoning)
			}
			if tt.wantTextDeltas != nil && !reflect.DeepEqual(textDeltas, tt.wantTextDeltas) {
				t.Errorf("text deltas = %q, want %q", textDeltas, tt.wantTextDeltas)
			}
			if !reflect.DeepEqual(msg.ToolCalls, tt.wantCalls) {
				t.Errorf("calls = %+v, want %+v", msg.ToolCalls, tt.wantCalls)
			}
			if fin != tt.wantFinish {
				t.Errorf("finish = %q, want %q", fin, tt.wantFinish)
			}
			u, ok := a.reportedUsage()
			switch {
			case tt.wantUsage == nil && ok:
				t.Errorf("usage = %+v, want none", u)
			case tt.wantUsage != nil && !ok:
				t.Errorf("usage missing, want %+v", *tt.wantUsage)
			case tt.wantUsage != nil && u != *tt.wantUsage:
				t.Errorf("usage = %+v, want %+v", u, *tt.wantUsage)
			}
		})
	}
}

func TestNewCallID(t *testing.T) {
	re := regexp.MustCompile(`^call_[0-9A-HJKMNP-TV-Z]{26}$`)
	a, b := newCallID(), newCallID()
	if !re.MatchString(a) || !re.MatchString(b) {
		t.Fatalf("ids %q, %q do not look like call_<ULID>", a, b)
	}
	if a == b {
		t.Fatalf("two ids are equal: %q", a)
	}
}
