package agent

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/plumbhq/plumb/pkg/model"
)

// Store is what the executor persists (docs/agent-core.md §2.3): threads, the
// append-only message log, checkpoints with the state beside the log, the
// pending interrupt, and run records. It is defined here, by its consumer;
// MemoryStore is the ephemeral implementation; the SQLite and PostgreSQL
// stores (pkg/store) are the durable ones. Every implementation must pass
// storetest.Run.
//
// Contract:
//   - SaveCheckpoint is atomic: either everything in the Checkpoint is
//     applied or nothing is (one database transaction).
//   - Messages are stored once and never rewritten, with one exception:
//     Checkpoint.EditCalls replaces the arguments of a stored assistant
//     call (an EDIT decision). Checkpoints reference a message count.
//   - Checkpoint.Base must equal the thread's stored message count; a
//     mismatch returns ErrConflict and changes nothing.
//   - Run records are upserted by RunID; a thread's last run is the one
//     started last.
//   - A Checkpoint with a Fence (replicated agentd) is committed only while
//     the fence is the thread's current lease (same holder and epoch), checked
//     in the commit's own transaction; otherwise ErrLeaseLost and nothing
//     changes. Stores without leases (MemoryStore) ignore fences.
//   - LoadThread returns copies; callers may mutate them freely.
//   - Implementations are safe for concurrent use.
type Store interface {
	// CreateThread stores a new thread; an existing id is ErrConflict.
	CreateThread(ctx context.Context, t Thread) error
	// LoadThread returns a thread with its log and latest state, or
	// ErrThreadNotFound.
	LoadThread(ctx context.Context, threadID string) (*ThreadData, error)
	// SaveCheckpoint applies one checkpoint atomically.
	SaveCheckpoint(ctx context.Context, cp *Checkpoint) error
	// FailRunningRuns marks every run record still RUNNING as FAILED with
	// the given message (agentd restarted) and returns how many it changed.
	FailRunningRuns(ctx context.Context, message string) (int, error)
}

// Store errors.
var (
	// ErrThreadNotFound: no thread with that id.
	ErrThreadNotFound = errors.New("thread not found")
	// ErrConflict: a checkpoint's Base does not match the stored log, or a
	// thread id already exists.
	ErrConflict = errors.New("store conflict")
	// ErrLeaseLost: the thread's lease (Checkpoint.Fence) is no longer the
	// writer's: it expired and another agentd replica took the thread
	// over, or it was released. The writer must stop working on the
	// thread. store.ErrLeaseLost is the same value.
	ErrLeaseLost = errors.New("thread lease lost")
)

// Fence is the lease a run writes its checkpoints under when several
// agentd replicas share a store: its holder and epoch (store.Lease). A
// store refuses a fenced checkpoint with ErrLeaseLost once the thread's
// lease has another epoch, so that a replica that lost the thread (paused,
// partitioned, presumed dead) cannot commit over the one that took it
// over.
type Fence struct {
	Holder string `json:"holder"`
	Epoch  int64  `json:"epoch"`
}

// Thread is a thread's record.
type Thread struct {
	// ID is the thread id (a ULID).
	ID string `json:"id"`
	// CreatedAt and UpdatedAt are maintained by the store from checkpoint
	// times.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Metadata are the thread's labels.
	Metadata map[string]string `json:"metadata,omitempty"`
	// SandboxID is the thread's sandbox, if any (set by the sandbox
	// integration, not by the executor).
	SandboxID string `json:"sandbox_id,omitempty"`
	// Tenant owns the thread (agentd's credentials name tenants); the
	// durable stores keep "" as "default".
	Tenant string `json:"tenant,omitempty"`
}

// ThreadStatus is derived from the last run and the pending interrupt.
type ThreadStatus string

// Thread statuses.
const (
	ThreadIdle        ThreadStatus = "IDLE"
	ThreadRunning     ThreadStatus = "RUNNING"
	ThreadInterrupted ThreadStatus = "INTERRUPTED"
)

// ThreadData is a thread with its log and latest checkpointed state.
type ThreadData struct {
	Thread Thread `json:"thread"`
	// Messages is the whole log.
	Messages []Message `json:"messages"`
	// Todos, Summary, Private and Pending are the root context's state at
	// the last checkpoint.
	Todos   []Todo                     `json:"todos,omitempty"`
	Summary *Summary                   `json:"summary,omitempty"`
	Private map[string]json.RawMessage `json:"private,omitempty"`
	Pending *PendingStep               `json:"pending,omitempty"`
	// Interrupt is the pending interrupt, if any.
	Interrupt *PendingInterrupt `json:"interrupt,omitempty"`
	// LastRun is the most recently started run, if any.
	LastRun *RunRecord `json:"last_run,omitempty"`
	// Usage is the thread's cumulative usage over all runs.
	Usage model.Usage `json:"usage"`
	// Checkpoints are the retained checkpoints, oldest first.
	Checkpoints []CheckpointInfo `json:"checkpoints,omitempty"`
	// Files are the thread's State-backend files by path, each an opaque
	// JSON document owned by the State backend.
	Files map[string]json.RawMessage `json:"files,omitempty"`
}

// Status derives the thread status.
func (d *ThreadData) Status() ThreadStatus {
	switch {
	case d.Interrupt != nil:
		return ThreadInterrupted
	case d.LastRun != nil && d.LastRun.Status == StatusRunning:
		return ThreadRunning
	}
	return ThreadIdle
}

// Phase is the point of a step a checkpoint was written at.
type Phase string

// Checkpoint phases (docs/agent-core.md §2.3).
const (
	PhaseInput     Phase = "INPUT"
	PhaseModel     Phase = "MODEL"
	PhaseTools     Phase = "TOOLS"
	PhaseInterrupt Phase = "INTERRUPT"
	PhaseFinal     Phase = "FINAL"
)

// Checkpoint is one atomic write of the executor.
type Checkpoint struct {
	// ThreadID is the thread written.
	ThreadID string `json:"thread_id"`
	// Phase says where in the step it was written.
	Phase Phase `json:"phase"`
	// Step is the run's model calls so far.
	Step int `json:"step"`
	// Base is the message count the writer believes is stored; Append
	// continues the log from there.
	Base int `json:"base"`
	// Append are new messages, stored at Base, Base+1, ...
	Append []Message `json:"append,omitempty"`
	// Truncate cuts the stored log back to Base messages first (Base
	// must not exceed the stored count): a run rolled back for a newer
	// one (RunInput.Rollback) discards the messages it added.
	Truncate bool `json:"truncate,omitempty"`
	// ConsumeSteers are the ids of the steers (SteerStore) whose input
	// Append delivers: the commit deletes them, and fails with
	// ErrConflict when one is gone (delivered already), so a steer is
	// delivered once.
	ConsumeSteers []int64 `json:"consume_steers,omitempty"`
	// EditCalls replace arguments of stored assistant calls (applied
	// before Append).
	EditCalls []CallEdit `json:"edit_calls,omitempty"`
	// Metadata, when non-nil, is merged into the thread's labels.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Todos, Summary, Private and Pending replace the stored state.
	Todos   []Todo                     `json:"todos,omitempty"`
	Summary *Summary                   `json:"summary,omitempty"`
	Private map[string]json.RawMessage `json:"private,omitempty"`
	Pending *PendingStep               `json:"pending,omitempty"`
	// Interrupt replaces the pending interrupt; nil clears it.
	Interrupt *PendingInterrupt `json:"interrupt,omitempty"`
	// Files is the State-backend delta since the previous checkpoint: a
	// document upserts the path, a nil value deletes it.
	Files map[string]json.RawMessage `json:"files,omitempty"`
	// Run is upserted by RunID.
	Run RunRecord `json:"run"`
	// Fence, when set, is the lease the checkpoint must be committed
	// under (see Store).
	Fence *Fence `json:"fence,omitempty"`
	// CreatedAt is when the checkpoint was written.
	CreatedAt time.Time `json:"created_at"`
}

// CallEdit replaces the arguments of one stored tool call.
type CallEdit struct {
	// MessageIndex is the log index of the assistant message.
	MessageIndex int `json:"message_index"`
	// CallID is the call's id within that message.
	CallID string `json:"call_id"`
	// Args are the new JSON arguments.
	Args string `json:"args"`
}

// CheckpointInfo describes a retained checkpoint.
type CheckpointInfo struct {
	// ID increases per store.
	ID int64 `json:"id"`
	// RunID is the run that wrote it.
	RunID string `json:"run_id"`
	// Phase and Step say where.
	Phase Phase `json:"phase"`
	Step  int   `json:"step"`
	// MessageCount is the log length after it.
	MessageCount int `json:"message_count"`
	// CreatedAt is when it was written.
	CreatedAt time.Time `json:"created_at"`
}

// PendingInterrupt is a thread's open interrupt.
type PendingInterrupt struct {
	// InterruptID is what Resume must name.
	InterruptID string `json:"interrupt_id"`
	// RunID is the interrupted run.
	RunID string `json:"run_id"`
	// Requests are the waiting calls, as emitted in `interrupted`.
	Requests []InterruptRequest `json:"requests"`
	// CreatedAt is when the run paused.
	CreatedAt time.Time `json:"created_at"`
}

// RunRecord summarizes one run.
type RunRecord struct {
	// RunID is the run's ULID.
	RunID string `json:"run_id"`
	// Spec is how the run was configured; Resume rebuilds it from here.
	Spec RunSpec `json:"spec"`
	// Status is RUNNING until the run ends or pauses.
	Status RunStatus `json:"status"`
	// Usage is the run's usage so far.
	Usage model.Usage `json:"usage"`
	// FinalText is the last non-empty assistant text when finished.
	FinalText string `json:"final_text,omitempty"`
	// Error describes a FAILED run.
	Error *RunError `json:"error,omitempty"`
	// StartedAt and FinishedAt bound the run.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitempty"`
	// Steps counts root model calls, Resume segments included.
	Steps int `json:"steps"`
	// LastSequence is the sequence of the run's last event so far.
	LastSequence uint64 `json:"last_sequence"`
	// Elapsed is the run's active wall time (interrupted time excluded).
	Elapsed time.Duration `json:"elapsed"`
	// FirstMessage is the log length when the run started; the run's
	// messages are Messages[FirstMessage:].
	FirstMessage int `json:"first_message"`
	// Input are the run's user messages (RunInput.Input).
	Input []string `json:"input,omitempty"`
	// CreatedAt is when the run was asked for: StartedAt, or earlier for a
	// run that waited in its thread's queue.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Holder names the replica (the lease holder) that ran the run's
	// latest segment; "" without leases.
	Holder string `json:"holder,omitempty"`
	// Metadata are a queued run's labels, merged into the thread's when
	// it starts (RunInput.Metadata).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Baseline is the thread's state when the run started, what a
	// rollback (RunInput.Rollback) restores. Set by Run.
	Baseline *RunBaseline `json:"baseline,omitempty"`
}

// MaxBaselineFiles bounds the State-backend files a run's baseline copies
// (their encoded size): a thread with more has its files left as they are
// by a rollback (RunBaseline.FilesOmitted).
const MaxBaselineFiles = 256 << 10

// RunBaseline is the thread's state when a run started (RunRecord.Baseline):
// its todos, summary and middleware state and, when they are small
// (MaxBaselineFiles), its State-backend files. The log's length then is
// RunRecord.FirstMessage.
type RunBaseline struct {
	Todos   []Todo                     `json:"todos,omitempty"`
	Summary *Summary                   `json:"summary,omitempty"`
	Private map[string]json.RawMessage `json:"private,omitempty"`
	Files   map[string]json.RawMessage `json:"files,omitempty"`
	// FilesOmitted: the files were over MaxBaselineFiles and are not in
	// Files; a rollback leaves them as they are.
	FilesOmitted bool `json:"files_omitted,omitempty"`
}

// NewBaseline returns td's state as a run's baseline.
func NewBaseline(td *ThreadData) *RunBaseline {
	b := &RunBaseline{Todos: slices.Clone(td.Todos), Summary: td.Summary, Private: maps.Clone(td.Private)}
	size := 0
	for p, f := range td.Files {
		size += len(p) + len(f)
	}
	if size > MaxBaselineFiles {
		b.FilesOmitted = true
		return b
	}
	b.Files = maps.Clone(td.Files)
	return b
}

// RunSpec is the persisted configuration of a run: what a Resume needs to
// rebuild the same agent.
type RunSpec struct {
	// Agent is the primary profile; "" means the default.
	Agent string `json:"agent,omitempty"`
	// Model is a model key override; "" uses the profile's.
	Model string `json:"model,omitempty"`
	// ClientTools are the client-declared tools of the run.
	ClientTools []ClientToolDef `json:"client_tools,omitempty"`
	// MaxIterations lowers limits.max_iterations when positive.
	MaxIterations int `json:"max_iterations,omitempty"`
	// Timeout lowers limits.run_timeout when positive.
	Timeout time.Duration `json:"timeout,omitempty"`
	// WebhookURL, if set, is told when the run ends or pauses
	// (RunRequest.webhook_url; agentd's internal/webhooks reads it from
	// the run record, so a replica that takes the run over knows it).
	WebhookURL string `json:"webhook_url,omitempty"`
}

// ClientToolDef is a client-declared tool.
type ClientToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Steer is user input sent to a running run (RunRequest on_busy STEER,
// docs/runs.md), waiting for the run's next model call.
type Steer struct {
	// ID orders the steers of a run and names one to consume.
	ID int64
	// Input are its user messages.
	Input []string
	// CreatedAt is when it was sent.
	CreatedAt time.Time
}

// SteerStore is what a Store implements to deliver steers: the run reads
// its pending steers before each model call of its root agent, appends
// their input and commits a checkpoint consuming them
// (Checkpoint.ConsumeSteers).
type SteerStore interface {
	// PendingSteers returns the steers of run runID of thread threadID
	// not consumed yet, oldest first.
	PendingSteers(ctx context.Context, threadID, runID string) ([]Steer, error)
}
