package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Runs is the durable stores' view of run records as resources: the
// record every run's checkpoints keep in the runs table (agent.RunRecord),
// read by id or listed, and the queue of runs waiting for their thread
// (status QUEUED, RunRequest.on_busy ENQUEUE). Every implementation must
// pass storetest.RunRuns.
//
// A queued run is a run record that no checkpoint wrote yet: its first
// checkpoint (the runtime started it under the id it was queued with)
// turns it RUNNING in place, so it keeps its place in the thread's order.
// A thread's "last run" (ThreadData.LastRun, the derived thread status,
// the event log's run) never is a queued one.
type Runs interface {
	// GetRun returns a run's record, or ErrRunNotFound.
	GetRun(ctx context.Context, runID string) (RunInfo, error)
	// ListRuns returns one page of run records, newest first (by the
	// order the runs were started or queued in), and the next page's
	// token ("" at the end). A token it did not issue is
	// ErrBadPageToken.
	ListRuns(ctx context.Context, q RunQuery) ([]RunInfo, string, error)
	// EnqueueRun stores rec (its RunID, Spec, Input and CreatedAt set) as
	// a QUEUED run of thread threadID, after every run the thread has. A
	// missing thread is agent.ErrThreadNotFound; a run id that exists is
	// agent.ErrConflict.
	EnqueueRun(ctx context.Context, threadID string, rec agent.RunRecord) error
	// NextQueuedRun returns the thread's oldest QUEUED run, or nil.
	NextQueuedRun(ctx context.Context, threadID string) (*RunInfo, error)
	// QueuedThreads lists the threads that have a QUEUED run (at most
	// limit), oldest queued run first.
	QueuedThreads(ctx context.Context, limit int) ([]string, error)
	// EndQueuedRun ends a QUEUED run that did not start: its status
	// becomes status (FAILED or CANCELLED), with rerr and finishedAt. A
	// run that is no longer QUEUED (it started, or was ended) is
	// ErrNotQueued; a missing one ErrRunNotFound.
	EndQueuedRun(ctx context.Context, runID string, status agent.RunStatus, rerr *agent.RunError, finishedAt time.Time) error
}

// Errors of Runs.
var (
	// ErrRunNotFound: no run with that id.
	ErrRunNotFound = errors.New("run not found")
	// ErrNotQueued: the run is not (or no longer) QUEUED.
	ErrNotQueued = errors.New("the run is not queued")
)

// RunInfo is a stored run record and the thread it belongs to.
type RunInfo struct {
	// ThreadID is the run's thread.
	ThreadID string
	// Tenant is the thread's tenant.
	Tenant string
	// Record is the run's record.
	Record agent.RunRecord
}

// RunQuery selects a page of run records.
type RunQuery struct {
	// Tenant, if set, keeps only the runs of that tenant's threads
	// ("default" also matches threads stored without a tenant).
	Tenant string
	// ThreadID, if set, keeps only that thread's runs.
	ThreadID string
	// Status, if set, keeps only runs with that status.
	Status agent.RunStatus
	// PageSize bounds the page (default 50, max 500).
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
}

// Size is the page size the query asks for, defaulted and capped.
func (q RunQuery) Size() int {
	if q.PageSize <= 0 {
		return 50
	}
	return min(q.PageSize, 500)
}

// EncodeRunPageToken is the token of the page after the run stored at
// position ord (the runs table's order column).
func EncodeRunPageToken(ord int64) string {
	return EncodePageToken(ord, "run")
}

// DecodeRunPageToken returns the position a token continues before, or
// ErrBadPageToken.
func DecodeRunPageToken(tok string) (int64, error) {
	n, kind, err := DecodePageToken(tok)
	if err != nil || kind != "run" || n <= 0 {
		return 0, ErrBadPageToken
	}
	return n, nil
}

// ListableRunStatus reports whether s is a status ListRuns filters by.
func ListableRunStatus(s agent.RunStatus) bool {
	switch s {
	case agent.StatusQueued, agent.StatusRunning, agent.StatusInterrupted, agent.StatusCompleted,
		agent.StatusMaxIterations, agent.StatusCancelled, agent.StatusDeadlineExceeded, agent.StatusFailed:
		return true
	}
	return false
}

// EndQueued returns the stored record (JSON) of a queued run ended with
// status without starting (see Runs.EndQueuedRun).
func EndQueued(record string, status agent.RunStatus, rerr *agent.RunError, finishedAt time.Time) (string, error) {
	var r agent.RunRecord
	if err := json.Unmarshal([]byte(record), &r); err != nil {
		return "", fmt.Errorf("run record: %w", err)
	}
	r.Status, r.Error, r.FinishedAt = status, rerr, finishedAt
	return JSON(r)
}

// RunColumns are the columns ScanRun reads, from runs r joined with
// threads t.
const RunColumns = `r.ord, r.thread_id, t.tenant, r.record`

// ScanRun reads one row of RunColumns: the run and its order (what run
// page tokens hold).
func ScanRun(r Scanner) (RunInfo, int64, error) {
	var (
		ri  RunInfo
		ord int64
		rec string
	)
	if err := r.Scan(&ord, &ri.ThreadID, &ri.Tenant, &rec); err != nil {
		return ri, 0, err
	}
	if err := json.Unmarshal([]byte(rec), &ri.Record); err != nil {
		return ri, 0, fmt.Errorf("run record: %w", err)
	}
	return ri, ord, nil
}
