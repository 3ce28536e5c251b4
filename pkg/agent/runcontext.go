package agent

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
)

// Clock tells the time; tests substitute a fixed one.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// RunContext describes the agent context a hook or tool runs in and
// carries the run's event emitter. One RunContext exists per agent context
// and run segment.
type RunContext struct {
	// ThreadID and RunID identify the run.
	ThreadID, RunID string
	// Agent is the profile name of this context.
	Agent string
	// ModelKey is the configured model key in use (e.g. "smart").
	ModelKey string
	// AgentPath is "main" at the root, "main/<subagent>" below it.
	AgentPath string
	// ParentToolCallID is the task call that started this subagent.
	ParentToolCallID string
	// Depth is 0 at the root.
	Depth int
	// Backend is the thread's file backend; nil when none is configured.
	Backend backend.Backend
	// Clock is the run's clock.
	Clock Clock
	// Logger is named for the context; it carries run-id and agent-path.
	Logger *zap.Logger
	// StartedAt is when the run (its first segment) started.
	StartedAt time.Time
	// Limits are the limits in effect for this context.
	Limits Limits

	shared *runShared

	mu        sync.Mutex
	step      int
	usage     model.Usage
	reminders []Reminder
}

// runShared is what all contexts of one run share: the event sequence and
// the run's usage totals.
type runShared struct {
	mu     sync.Mutex
	seq    uint64
	sink   Sink
	total  model.Usage
	clock  Clock
	newID  func() string
	lg     *zap.Logger // carries run-id and thread-id
	tracer trace.Tracer
	closed bool
}

// nextSequence returns the sequence the next event will get.
func (s *runShared) nextSequence() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq + 1
}

func (s *runShared) emit(rc *RunContext, ps ...Payload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, p := range ps {
		s.seq++
		ev := Event{
			Sequence:         s.seq,
			Time:             s.clock.Now(),
			RunID:            rc.RunID,
			ThreadID:         rc.ThreadID,
			AgentPath:        rc.AgentPath,
			ParentToolCallID: rc.ParentToolCallID,
			Payload:          p,
		}
		if s.sink != nil {
			s.sink(ev)
		}
		if IsTerminal(p) {
			s.closed = true
			return
		}
	}
}

// Emit sends an event from this agent context. Events emitted after the
// stream's terminal event are dropped.
func (rc *RunContext) Emit(p Payload) { rc.shared.emit(rc, p) }

// emitAll sends events back to back, with no other event in between.
func (rc *RunContext) emitAll(ps ...Payload) { rc.shared.emit(rc, ps...) }

// Remind queues a reminder block for the current batch (docs/agent-core.md §3.3):
// call it from WrapModel after the model returned tool calls. The executor
// appends the queued blocks, at most one per kind (the last one queued
// wins), to the result of the batch's last call.
func (rc *RunContext) Remind(kind, text string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, r := range rc.reminders {
		if r.Kind == kind {
			rc.reminders[i].Text = text
			return
		}
	}
	rc.reminders = append(rc.reminders, Reminder{Kind: kind, Text: text})
}

func (rc *RunContext) takeReminders() []Reminder {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.reminders
	rc.reminders = nil
	return r
}

// Step returns the number of model calls this context made so far (in
// this run, Resume segments included).
func (rc *RunContext) Step() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.step
}

func (rc *RunContext) nextStep() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.step++
	return rc.step
}

// Usage returns this context's token usage so far.
func (rc *RunContext) Usage() model.Usage {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.usage
}

// RunUsage returns the whole run's token usage so far.
func (rc *RunContext) RunUsage() model.Usage {
	rc.shared.mu.Lock()
	defer rc.shared.mu.Unlock()
	return rc.shared.total
}

// ReportUsage adds one successful model call's usage to this context and
// the run, and emits a usage event. modelName is the provider model name.
func (rc *RunContext) ReportUsage(u model.Usage, purpose UsagePurpose, modelName string) {
	total := rc.accountUsage(u)
	rc.Emit(UsageReport{Call: u, Estimated: u.Estimated, Purpose: purpose, Model: modelName, RunTotal: total})
}

// accountUsage adds u to this context and the run and returns the run
// total.
func (rc *RunContext) accountUsage(u model.Usage) model.Usage {
	rc.mu.Lock()
	rc.usage = rc.usage.Add(u)
	rc.mu.Unlock()
	s := rc.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = s.total.Add(u)
	return s.total
}

// addUsage adds usage counted elsewhere (a resumed subagent's earlier
// segments) to this context only.
func (rc *RunContext) addUsage(u model.Usage) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.usage = rc.usage.Add(u)
}

// Now returns the clock's time.
func (rc *RunContext) Now() time.Time { return rc.Clock.Now() }

// NewID returns a fresh unique id (a ULID).
func (rc *RunContext) NewID() string { return rc.shared.newID() }

// child returns the run context of a subagent of rc.
func (rc *RunContext) child(agent, modelKey, taskCallID string, limits Limits, b backend.Backend) *RunContext {
	path := rc.AgentPath + "/" + agent
	return &RunContext{
		ThreadID:         rc.ThreadID,
		RunID:            rc.RunID,
		Agent:            agent,
		ModelKey:         modelKey,
		AgentPath:        path,
		ParentToolCallID: taskCallID,
		Depth:            rc.Depth + 1,
		Backend:          b,
		Clock:            rc.Clock,
		Logger:           rc.shared.lg.With(zap.String("agent-path", path), zap.String("parent-tool-call-id", taskCallID)),
		StartedAt:        rc.StartedAt,
		Limits:           limits,
		shared:           rc.shared,
	}
}
