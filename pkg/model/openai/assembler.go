package openai

import (
	"slices"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model"
)

// assembler folds the chunks of one streamed chat completion into a single
// assistant message, following docs/agent-core.md §9 "Assembly". It is pure: no I/O,
// no clock, so the slot rules can be tested chunk by chunk.
type assembler struct {
	// newID makes an id for a call the provider sent without one.
	newID func() string

	text      strings.Builder
	reasoning strings.Builder

	slots   []*slot          // in opening order
	byIndex map[int]*slot    // the slot each index is currently bound to
	byID    map[string]*slot // the latest slot opened with each id

	finishReason string
	usage        *goopenai.Usage
}

// slot accumulates the fragments of one tool call.
type slot struct {
	id, name string
	args     strings.Builder
}

func newAssembler(newID func() string) *assembler {
	return &assembler{
		newID:   newID,
		byIndex: make(map[int]*slot),
		byID:    make(map[string]*slot),
	}
}

// newCallID makes an id for a call that arrived without one.
func newCallID() string { return "call_" + ulid.Make().String() }

// add folds one chunk in and returns the visible text, reasoning text and
// tool-call fragments it contributed, for streaming to the caller. Only
// choice 0 is considered.
func (a *assembler) add(chunk goopenai.ChatCompletionStreamResponse) (text, reasoning string, calls []model.ToolCallDelta) {
	if chunk.Usage != nil {
		// Providers that repeat usage on every chunk send running totals, so
		// the last one wins.
		a.usage = chunk.Usage
	}
	var tb, rb strings.Builder
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		// A refusal is the model's visible answer, so it is treated as text.
		tb.WriteString(d.Content)
		tb.WriteString(d.Refusal)
		rb.WriteString(d.ReasoningContent)
		for _, tc := range d.ToolCalls {
			if cd, ok := a.addToolCall(tc); ok {
				calls = append(calls, cd)
			}
		}
		if ch.FinishReason != "" && ch.FinishReason != goopenai.FinishReasonNull {
			a.finishReason = string(ch.FinishReason)
		}
	}
	a.text.WriteString(tb.String())
	a.reasoning.WriteString(rb.String())
	return tb.String(), rb.String(), calls
}

// addToolCall applies one tool-call fragment (steps 2 and 3) and returns
// what it added to its slot: the id and name when they first became known,
// and the argument text; ok is false when it added nothing.
func (a *assembler) addToolCall(tc goopenai.ToolCall) (d model.ToolCallDelta, ok bool) {
	s := a.slotFor(tc)
	d.Index = slices.Index(a.slots, s)
	if s.id == "" && tc.ID != "" {
		s.id, d.ID = tc.ID, tc.ID
		a.byID[tc.ID] = s
	}
	if s.name == "" && tc.Function.Name != "" {
		s.name, d.Name = tc.Function.Name, tc.Function.Name
	}
	s.args.WriteString(tc.Function.Arguments)
	d.Args = tc.Function.Arguments
	return d, d.ID != "" || d.Name != "" || d.Args != ""
}

// slotFor picks the slot a fragment belongs to, opening one if needed.
func (a *assembler) slotFor(tc goopenai.ToolCall) *slot {
	if tc.Index != nil {
		s := a.byIndex[*tc.Index]
		// A different id on a bound index is a new call: some providers send
		// every call as index 0.
		if s == nil || (tc.ID != "" && s.id != "" && tc.ID != s.id) {
			s = a.open()
			a.byIndex[*tc.Index] = s
		}
		return s
	}
	if tc.ID != "" {
		if s, ok := a.byID[tc.ID]; ok {
			return s
		}
		return a.open()
	}
	if n := len(a.slots); n > 0 {
		return a.slots[n-1]
	}
	return a.open()
}

func (a *assembler) open() *slot {
	s := &slot{}
	a.slots = append(a.slots, s)
	return s
}

// complete reports whether the stream ended properly (step 4): with [DONE],
// or at EOF after a finish_reason. Anything else is a truncated stream.
func (a *assembler) complete(sawDone bool) bool {
	return sawDone || a.finishReason != ""
}

// result builds the assistant message and the finish reason (step 4).
func (a *assembler) result() (model.Message, string) {
	msg := model.Message{
		Role:             model.RoleAssistant,
		Content:          a.text.String(),
		ReasoningContent: a.reasoning.String(),
	}
	used := make(map[string]bool, len(a.slots))
	for _, s := range a.slots {
		if s.id == "" && s.name == "" && s.args.Len() == 0 {
			continue // an empty fragment, not a call
		}
		id := s.id
		if id == "" {
			id = a.newID()
		}
		if used[id] {
			base := id
			for n := 2; used[id]; n++ {
				id = base + "_" + strconv.Itoa(n)
			}
		}
		used[id] = true
		args := s.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: id, Name: s.name, Args: args})
	}
	finish := a.finishReason
	if finish == "" {
		finish = model.FinishStop
		if len(msg.ToolCalls) > 0 {
			finish = model.FinishToolCalls
		}
	}
	return msg, finish
}

// reportedUsage converts the provider's usage, if it sent any.
func (a *assembler) reportedUsage() (model.Usage, bool) {
	if a.usage == nil {
		return model.Usage{}, false
	}
	u := model.Usage{
		Prompt:     a.usage.PromptTokens,
		Completion: a.usage.CompletionTokens,
		Total:      a.usage.TotalTokens,
	}
	if d := a.usage.PromptTokensDetails; d != nil {
		u.Cached = d.CachedTokens
	}
	if d := a.usage.CompletionTokensDetails; d != nil {
		u.Reasoning = d.ReasoningTokens
	}
	if u.Total == 0 {
		u.Total = u.Prompt + u.Completion
	}
	return u, true
}
