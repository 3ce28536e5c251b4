package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/plumbhq/plumb/pkg/model"
)

// State is the state of one agent context (docs/agent-core.md §2.1): the message log,
// the latest summary, the todo list, private middleware state and the
// pending step. Its methods are safe for concurrent use: tools of one step
// run concurrently and may touch todos and private state.
//
// The log is append-only. Middleware may append (PatchToolCalls does); the
// executor persists everything appended since the last checkpoint.
type State struct {
	mu       sync.Mutex
	messages []Message
	summary  *Summary
	todos    []Todo
	private  map[string]json.RawMessage
	pending  *PendingStep
}

// NewState returns an empty State.
func NewState() *State { return &State{} }

// Snapshot is the serializable form of a State.
type Snapshot struct {
	// Messages is the whole log.
	Messages []Message `json:"messages"`
	// Summary is the latest summary, if any.
	Summary *Summary `json:"summary,omitempty"`
	// Todos is the todo list.
	Todos []Todo `json:"todos,omitempty"`
	// Private is middleware scratch state by middleware name.
	Private map[string]json.RawMessage `json:"private,omitempty"`
	// Pending is the open step, if any.
	Pending *PendingStep `json:"pending,omitempty"`
}

// RestoreState builds a State from a snapshot; it takes ownership of s's
// slices and maps.
func RestoreState(s Snapshot) *State {
	return &State{messages: s.Messages, summary: s.Summary, todos: s.Todos, private: s.Private, pending: s.Pending}
}

// Snapshot returns a deep copy of the state.
func (s *State) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Snapshot{
		Messages: cloneMessages(s.messages),
		Summary:  cloneSummary(s.summary),
		Todos:    slices.Clone(s.todos),
		Private:  clonePrivate(s.private),
		Pending:  s.pending.clone(),
	}
}

// parts returns copies of everything but the log.
func (s *State) parts() (todos []Todo, sum *Summary, private map[string]json.RawMessage, pending *PendingStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.todos), cloneSummary(s.summary), clonePrivate(s.private), s.pending.clone()
}

// Len returns the number of messages in the log.
func (s *State) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

// Messages returns a copy of the whole log.
func (s *State) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneMessages(s.messages)
}

// MessagesFrom returns a copy of the log from index i on.
func (s *State) MessagesFrom(i int) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.messages) {
		return nil
	}
	return cloneMessages(s.messages[max(i, 0):])
}

// Append adds messages to the end of the log.
func (s *State) Append(msgs ...Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages = append(s.messages, msgs...)
}

// replaceCallArgs sets the args of call id in the assistant message at
// index i (an EDIT decision). It reports whether the call was found.
func (s *State) replaceCallArgs(i int, id, args string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.messages) {
		return false
	}
	m := &s.messages[i]
	for j := range m.ToolCalls {
		if m.ToolCalls[j].ID == id {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			m.ToolCalls[j].Args = args
			return true
		}
	}
	return false
}

// Summary returns a copy of the latest summary, or nil.
func (s *State) Summary() *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneSummary(s.summary)
}

// SetSummary records a new summary. Its Cutoff must not be below the
// previous one's.
func (s *State) SetSummary(sum Summary) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.summary != nil && sum.Cutoff < s.summary.Cutoff {
		return fmt.Errorf("summary cutoff %d below the previous cutoff %d", sum.Cutoff, s.summary.Cutoff)
	}
	if sum.Cutoff < 0 || sum.Cutoff > len(s.messages) {
		return fmt.Errorf("summary cutoff %d outside the log (%d messages)", sum.Cutoff, len(s.messages))
	}
	s.summary = &sum
	return nil
}

// Todos returns a copy of the todo list.
func (s *State) Todos() []Todo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.todos)
}

// SetTodos replaces the todo list and reports whether it changed.
func (s *State) SetTodos(todos []Todo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(s.todos, todos) {
		return false
	}
	s.todos = slices.Clone(todos)
	return true
}

// Private decodes the private state stored under name into v and reports
// whether there was any.
func (s *State) Private(name string, v any) (bool, error) {
	s.mu.Lock()
	raw, ok := s.private[name]
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("private state %s: %w", name, err)
	}
	return true, nil
}

// SetPrivate stores v (JSON-encoded) as the private state of name; a nil
// v deletes it. Private state is persisted at checkpoints and never shared
// with subagents.
func (s *State) SetPrivate(name string, v any) error {
	var raw json.RawMessage
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("private state %s: %w", name, err)
		}
		raw = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if raw == nil {
		delete(s.private, name)
		return nil
	}
	if s.private == nil {
		s.private = make(map[string]json.RawMessage)
	}
	s.private[name] = raw
	return nil
}

// Pending returns a copy of the open step, or nil.
func (s *State) Pending() *PendingStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.clone()
}

func (s *State) setPending(p *PendingStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = p
}

// Effective returns what the model sees of the log (docs/agent-core.md §2.1): the
// summary message followed by Messages[Summary.Cutoff:], or the whole log
// when there is no summary. Each item carries its absolute log index (-1
// for the summary message).
//
// The view also restores the call-order invariant that an append-only log
// cannot: every tool message is placed right after the assistant message
// that issued its call, in call order, wherever it was appended (a result
// patched in after a later user message, or a sibling that completed after
// a cancellation). Tool messages whose call is not in view are dropped.
func (s *State) Effective() []ViewMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var view []ViewMessage
	start := 0
	if s.summary != nil {
		view = append(view, ViewMessage{Index: -1, Message: Message{
			Message: model.Message{Role: model.RoleUser, Content: s.summary.Message},
			Source:  SourceSummarization,
		}})
		start = s.summary.Cutoff
	}
	return append(view, normalizeView(s.messages, start)...)
}

// ViewMessage is one message of State.Effective with its log index.
type ViewMessage struct {
	Message
	// Index is the absolute log index, -1 for a synthetic message.
	Index int
}

// callKey names one tool call: its assistant message's log index and its
// position in that message.
type callKey struct {
	assistant int
	call      int
}

// matchResults maps each call in msgs[start:] to the index of the tool
// message answering it. A tool message answers the latest unanswered call
// with its id that precedes it: providers may reuse ids across steps.
func matchResults[T any](msgs []T, start int, get func(*T) *model.Message) map[callKey]int {
	open := make(map[string][]callKey)
	results := make(map[callKey]int)
	for i := start; i < len(msgs); i++ {
		m := get(&msgs[i])
		switch m.Role {
		case model.RoleAssistant:
			for j, c := range m.ToolCalls {
				open[c.ID] = append(open[c.ID], callKey{i, j})
			}
		case model.RoleTool:
			if ks := open[m.ToolCallID]; len(ks) > 0 {
				results[ks[len(ks)-1]] = i
				open[m.ToolCallID] = ks[:len(ks)-1]
			}
		}
	}
	return results
}

// slot is one position of an arranged transcript: the message at index
// msg, or, when msg is -1, the missing result of the call at key.
type slot struct {
	msg int
	key callKey
}

// arrange orders msgs[start:] the way a model must see them: every message
// but tool messages, each assistant message directly followed by the
// results of its calls in call order, wherever they were appended. A call
// without a result gets a slot of its own (msg -1); a tool message that
// answers no call in msgs[start:] gets none.
func arrange[T any](msgs []T, start int, get func(*T) *model.Message) []slot {
	results := matchResults(msgs, start, get)
	out := make([]slot, 0, len(msgs)-start)
	for i := start; i < len(msgs); i++ {
		m := get(&msgs[i])
		if m.Role == model.RoleTool {
			continue
		}
		out = append(out, slot{msg: i})
		if m.Role != model.RoleAssistant {
			continue
		}
		for j := range m.ToolCalls {
			k := callKey{i, j}
			if r, ok := results[k]; ok {
				out = append(out, slot{msg: r})
			} else {
				out = append(out, slot{msg: -1, key: k})
			}
		}
	}
	return out
}

func logMessage(m *Message) *model.Message { return &m.Message }

// normalizeView returns msgs[start:] with tool messages moved right after
// their assistant message, in call order. Calls without a result stay
// unanswered in the view: patch_tool_calls answers them in the log, and
// the model boundary (PairToolCalls) in the request.
func normalizeView(msgs []Message, start int) []ViewMessage {
	var out []ViewMessage
	for _, s := range arrange(msgs, start, logMessage) {
		if s.msg >= 0 {
			out = append(out, ViewMessage{Message: msgs[s.msg], Index: s.msg})
		}
	}
	return out
}

// ModelMessages converts view messages to the model's message type.
func ModelMessages(view []ViewMessage) []model.Message {
	out := make([]model.Message, len(view))
	for i, v := range view {
		out[i] = v.Message.Message
	}
	return out
}

// PairToolCalls returns msgs as a provider accepts them: every assistant
// tool call directly followed by exactly one tool message answering it, in
// call order. A call without a result gets a synthetic one
// (DanglingCallResult); a tool message that answers no call is dropped; a
// result appended after later messages moves up to its call. unanswered
// and orphans count the repairs.
func PairToolCalls(msgs []model.Message) (out []model.Message, unanswered, orphans int) {
	slots := arrange(msgs, 0, func(m *model.Message) *model.Message { return m })
	out = make([]model.Message, 0, len(slots))
	used := 0
	for _, s := range slots {
		if s.msg >= 0 {
			out = append(out, msgs[s.msg])
			if msgs[s.msg].Role == model.RoleTool {
				used++
			}
			continue
		}
		out = append(out, DanglingCallResult(msgs[s.key.assistant].ToolCalls[s.key.call]))
		unanswered++
	}
	for _, m := range msgs {
		if m.Role == model.RoleTool {
			orphans++
		}
	}
	return out, unanswered, orphans - used
}

// DanglingCallResult is the synthetic result of a call that never got one
// (docs/agent-core.md §3.2 #5): the run stopped before the call completed, or its
// arguments were not valid JSON so it never ran. A call without a name is
// answered as "unknown".
func DanglingCallResult(c model.ToolCall) model.Message {
	name := c.Name
	if name == "" {
		name = "unknown"
	}
	text := fmt.Sprintf("Tool call %s (%s) did not complete: the run stopped before it returned a result.", name, c.ID)
	var v map[string]any
	if c.Args != "" && json.Unmarshal([]byte(c.Args), &v) != nil {
		text = fmt.Sprintf("Tool call %s (%s) was never executed: its arguments were not valid JSON.", name, c.ID)
	}
	return model.Message{Role: model.RoleTool, Content: text, ToolCallID: c.ID, Name: name}
}

// DanglingCalls returns the tool calls in msgs that have no tool message
// answering them anywhere after their assistant message, in log order.
func DanglingCalls(msgs []Message) []DanglingCall {
	var out []DanglingCall
	for _, s := range arrange(msgs, 0, logMessage) {
		if s.msg < 0 {
			out = append(out, DanglingCall{MessageIndex: s.key.assistant, Call: msgs[s.key.assistant].ToolCalls[s.key.call]})
		}
	}
	return out
}

// DanglingCall is an assistant tool call without a result.
type DanglingCall struct {
	// MessageIndex is the log index of the assistant message.
	MessageIndex int
	// Call is the call.
	Call model.ToolCall
}

func cloneSummary(s *Summary) *Summary {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

func clonePrivate(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}
