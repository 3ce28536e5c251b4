package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/model"
)

// Origin says how a tool result was produced (docs/agent-core.md §8 tool_result).
type Origin string

// Tool result origins.
const (
	// OriginExecuted: the tool ran.
	OriginExecuted Origin = "EXECUTED"
	// OriginInvalidCall: unknown tool or bad arguments; the tool did not run.
	OriginInvalidCall Origin = "INVALID_CALL"
	// OriginBlocked: a hook or a batch rule refused the call.
	OriginBlocked Origin = "BLOCKED"
	// OriginRejected: a human rejected the call.
	OriginRejected Origin = "REJECTED"
	// OriginResponded: a human or the client answered the call.
	OriginResponded Origin = "RESPONDED"
)

// originOf is the origin of res, where "" means EXECUTED.
func originOf(res *ToolResult) Origin {
	if res.Origin == "" {
		return OriginExecuted
	}
	return res.Origin
}

// ToolFunc is a tool implementation. It returns the result the model sees,
// or an error: a plain error becomes "<name> failed: <err>", and an
// *Interrupt pauses the call.
type ToolFunc func(ctx context.Context, req *ToolRequest) (ToolResult, error)

// Tool is a callable the model may use.
type Tool struct {
	// Name is unique within an agent context.
	Name string
	// Description is shown to the model.
	Description string
	// Schema is the JSON Schema of the arguments object; nil means an
	// object without properties.
	Schema json.RawMessage
	// ValidationSchema, when set, is enforced instead of Schema: a tool may
	// show the model a stricter schema (an enum) and answer violations of
	// it with its own message.
	ValidationSchema json.RawMessage
	// InvalidArgs, if set, rewrites the executor's invalid-arguments
	// message for this tool (the file tools render it as
	// "Error [invalid_argument]: …").
	InvalidArgs func(text string) string
	// Func runs the call.
	Func ToolFunc
	// Timeout overrides limits.tool_timeout for this tool; a negative value
	// disables the executor's timeout (the tool bounds itself, as task does).
	Timeout time.Duration
	// Subagent marks tools that run a subagent: they also count against
	// limits.max_parallel_subagents.
	Subagent bool
	// Client marks a tool declared by the client for one run; its calls are
	// CLIENT_TOOL interrupts and hitl never gates them.
	Client bool
	// Hidden tools are not offered to the model but still answer calls by
	// name without argument validation (task at the depth limit explains
	// why it is unavailable).
	Hidden bool
	// Capabilities are what the tool can do besides answering (run code,
	// touch files, reach the network). Approval gates are about them: a
	// gate on one tool also covers every tool that can do at least as
	// much (see the hitl middleware). Built-in tools get theirs from
	// tools.CapabilitiesOf; a tool that runs code must declare it.
	Capabilities Capability
}

// Capability is a set of things a tool can do to the world.
type Capability uint8

// Capabilities of tools.
const (
	// CapReadsFiles: the tool reads files of the thread's backend.
	CapReadsFiles Capability = 1 << iota
	// CapWritesFiles: the tool creates, changes or deletes files.
	CapWritesFiles
	// CapExecutes: the tool runs code or commands (a shell, an
	// interpreter, an MCP server started inside the sandbox).
	CapExecutes
	// CapNetwork: the tool reaches hosts outside agentd.
	CapNetwork
)

// CapAll is every capability: what running arbitrary code can do.
const CapAll = CapReadsFiles | CapWritesFiles | CapExecutes | CapNetwork

// Covers reports whether c holds every capability of o (a tool with c
// can do whatever a tool with o can).
func (c Capability) Covers(o Capability) bool { return o != 0 && c&o == o }

// Definition returns the model-facing definition of t.
func (t *Tool) Definition() model.ToolDef {
	schema := t.Schema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return model.ToolDef{Name: t.Name, Description: t.Description, Parameters: schema}
}

// ToolRequest is one call as it travels the WrapTool chain.
type ToolRequest struct {
	// Call is the effective call. Middleware may replace Call.Args (a pre
	// hook rewriting arguments) before calling next; the arguments are a
	// JSON object validated against the tool's schema.
	Call model.ToolCall
	// Index is the call's position in Batch.
	Index int
	// Batch holds every call of the step, in call order, as the model sent
	// them.
	Batch []model.ToolCall
	// FinishReason is the finish reason of the assistant message.
	FinishReason string
	// Tool is the resolved tool.
	Tool *Tool
	// Decision is the resume decision for this call, if any.
	Decision *Decision
	// Resume is set for a task call whose subagent was suspended: the
	// saved subagent and the decisions that reach it.
	Resume *SubagentResume
	// State is the agent context's state.
	State *State
	// Run is the agent context's run context.
	Run *RunContext

	batch      *batch
	mu         sync.Mutex
	started    bool
	holdOutput bool
	after      []Payload
}

// HoldOutput keeps the call's output from being streamed as tool_output
// events while it runs. A middleware that rewrites results on their way
// back (a redaction hook) calls it before next, so that clients only ever
// see what it lets through.
func (r *ToolRequest) HoldOutput() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdOutput = true
}

// OutputStream returns a stream for the call's output as it is produced,
// or nil when the output is held or the request belongs to no run. The
// tool must Close it before it returns.
func (r *ToolRequest) OutputStream() *OutputStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holdOutput || r.Run == nil {
		return nil
	}
	return newOutputStream(r.Run, r.Call)
}

// DecodeArgs unmarshals the call's arguments into v.
func (r *ToolRequest) DecodeArgs(v any) error {
	args := r.Call.Args
	if args == "" {
		args = "{}"
	}
	if err := json.Unmarshal([]byte(args), v); err != nil {
		return fmt.Errorf("decode %s arguments: %w", r.Call.Name, err)
	}
	return nil
}

// EmitAfterResult queues an event that the executor emits directly after
// this call's tool_result, with nothing in between (todos_updated).
func (r *ToolRequest) EmitAfterResult(p Payload) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after = append(r.after, p)
}

// MarkStarted emits tool_call_started for the call unless it was already
// emitted. The tool endpoint calls it right before invoking the tool; a
// wrapper that runs the work itself (a subagent) may call it earlier.
func (r *ToolRequest) MarkStarted() {
	if r.batch != nil {
		r.batch.mu.Lock()
		defer r.batch.mu.Unlock()
		if r.batch.closed {
			return
		}
	}
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return
	}
	r.started = true
	r.mu.Unlock()
	r.Run.Emit(ToolCallStarted{ID: r.Call.ID, Name: r.Call.Name, Args: r.Call.Args})
}

func (r *ToolRequest) wasStarted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

func (r *ToolRequest) takeAfter() []Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.after
	r.after = nil
	return a
}

// ToolResult is what a call produced (docs/agent-core.md §3.1).
type ToolResult struct {
	// Content is exactly what the model sees, reminders included once the
	// executor appended them.
	Content string `json:"content"`
	// IsError marks a failure.
	IsError bool `json:"is_error,omitempty"`
	// ExitCode is the command's exit code (execute only).
	ExitCode *int `json:"exit_code,omitempty"`
	// OffloadedPath is where an evicted result was saved.
	OffloadedPath string `json:"offloaded_path,omitempty"`
	// Images go to the model with Content (read_file of an image for a
	// vision-capable model); Content says what they are. They are kept in
	// the log but not in tool_result events.
	Images []model.Image `json:"images,omitempty"`
	// Reminders lists the reminder blocks appended to Content.
	Reminders []Reminder `json:"reminders,omitempty"`
	// Origin says how the result was produced; "" means EXECUTED.
	Origin Origin `json:"origin,omitempty"`
	// Duration is the call's wall time.
	Duration time.Duration `json:"duration,omitempty"`
}

// Reminder is one <system-reminder> block (docs/agent-core.md §3.3).
type Reminder struct {
	// Kind names the block; each kind is owned by one middleware.
	Kind string `json:"kind"`
	// Text is the block's body.
	Text string `json:"text"`
}

// ReminderBlock renders r as it is appended to a tool result.
func ReminderBlock(text string) string {
	return "\n\n<system-reminder>\n" + text + "\n</system-reminder>"
}

// withReminders appends the blocks to res.
func withReminders(res ToolResult, rs []Reminder) ToolResult {
	for _, r := range rs {
		res.Content += ReminderBlock(r.Text)
		res.Reminders = append(res.Reminders, r)
	}
	return res
}

// ErrorResult is a convenience for an error result with origin EXECUTED.
func ErrorResult(format string, args ...any) ToolResult {
	return ToolResult{Content: fmt.Sprintf(format, args...), IsError: true}
}
