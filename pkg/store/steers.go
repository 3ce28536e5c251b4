package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Steers is the durable stores' queue of steers: user input sent to a
// thread's running run (RunRequest on_busy STEER, docs/runs.md), on any
// replica, that the replica running it delivers at the run's next model
// call (agent.SteerStore; the checkpoint that appends the input consumes
// the steer, agent.Checkpoint.ConsumeSteers, so it is delivered once).
// Steers go with their thread. Every implementation must pass
// storetest.RunSteers.
type Steers interface {
	agent.SteerStore
	// AddSteer stores input for run runID of thread threadID and returns
	// the steer's id. A run that is not RUNNING (it ended, waits for
	// decisions, or is not the thread's) is ErrRunNotRunning: its
	// record's status is read and the steer stored in one transaction
	// that the run's final checkpoint cannot interleave with, so a steer
	// is never left behind an ended run.
	AddSteer(ctx context.Context, threadID, runID string, input []string, at time.Time) (int64, error)
	// SteersToQueue turns the steers of run runID that it did not take
	// before it ended into one QUEUED run of the thread (rec, its RunID,
	// Spec and CreatedAt set; Input becomes the steers' input in order),
	// in one transaction, and reports whether there were any.
	SteersToQueue(ctx context.Context, threadID, runID string, rec agent.RunRecord) (bool, error)
}

// ErrRunNotRunning: AddSteer named a run that is not RUNNING.
var ErrRunNotRunning = errors.New("the run is not running")

// SteerInput encodes a steer's input for the stores.
func SteerInput(input []string) (string, error) {
	if len(input) == 0 {
		return "", fmt.Errorf("a steer without input: %w", agent.ErrInvalidInput)
	}
	return JSON(input)
}

// ScanSteer reads one row of (id, input, created_at).
func ScanSteer(r Scanner) (agent.Steer, error) {
	var (
		st agent.Steer
		in string
		at int64
	)
	if err := r.Scan(&st.ID, &in, &at); err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(in), &st.Input); err != nil {
		return st, fmt.Errorf("steer %d: %w", st.ID, err)
	}
	st.CreatedAt = FromNanos(at)
	return st, nil
}

// QueuedFromSteers is the queued run record SteersToQueue stores for
// steers.
func QueuedFromSteers(rec agent.RunRecord, steers []agent.Steer) (string, error) {
	rec.Status, rec.Input = agent.StatusQueued, nil
	for _, st := range steers {
		rec.Input = append(rec.Input, st.Input...)
	}
	return JSON(rec)
}
