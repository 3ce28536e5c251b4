package store

import (
	"context"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Lease is one replica's claim on running a thread: while it has not
// expired and was not released, no other holder may run the thread. Epoch
// grows with every new claim, so a replica that lost its lease can tell
// (and be told) that a later one exists.
type Lease struct {
	ThreadID string
	Holder   string
	Epoch    int64
	Expires  time.Time
	// Released reports that the holder gave the lease up (as opposed to
	// letting it expire, which is what a dead replica does).
	Released bool
	// CancelRequested reports that a replica was asked to cancel the
	// thread's run (Leases.RequestCancel): the holder cancels it, and a
	// replica that takes the lease over ends the run CANCELLED instead
	// of continuing it. Releasing the lease clears it.
	CancelRequested bool
	// StopRequested is a newer run's request that the thread's run stop
	// at its next checkpoint (Leases.RequestStop; double-texting,
	// docs/runs.md): StopInterrupt keeps what the run did, StopRollback
	// discards it. "" is none. Like CancelRequested it stays with the
	// lease through a takeover and goes with its release.
	StopRequested StopMode
}

// StopMode is how a newer run asks the thread's current run to stop
// (Lease.StopRequested).
type StopMode string

// Stop modes.
const (
	// StopInterrupt: the run ends at its next checkpoint, CANCELLED with
	// agent.CodeSuperseded, keeping what it committed.
	StopInterrupt StopMode = "interrupt"
	// StopRollback: the run ends at its next checkpoint, CANCELLED with
	// agent.CodeRolledBack, and the thread goes back to where it was
	// before the run started.
	StopRollback StopMode = "rollback"
)

// Valid reports whether m is a stop mode a request may carry.
func (m StopMode) Valid() bool { return m == StopInterrupt || m == StopRollback }

// MergeStop is the stop mode of a lease asked to stop with m while it
// carries cur: a rollback is never weakened into an interrupt.
func MergeStop(cur, m StopMode) StopMode {
	if cur == StopRollback {
		return cur
	}
	return m
}

// Live reports whether l still excludes other holders at now.
func (l Lease) Live(now time.Time) bool { return !l.Released && l.Expires.After(now) }

// Leases is the part of a durable store that lets several agentd replicas
// share it. Times come from the caller (the replicas' clocks must agree to
// well within a lease's TTL). Every implementation must pass
// storetest.RunLeases.
type Leases interface {
	// AcquireLease gives holder the lease of thread id until now+ttl when
	// nobody holds a live one, or when holder already does (which renews
	// it under the same epoch). A live lease of another holder is a
	// *HeldError; a missing thread is agent.ErrThreadNotFound.
	AcquireLease(ctx context.Context, id, holder string, now time.Time, ttl time.Duration) (Lease, error)
	// RenewLease extends l to now+ttl if it is still the thread's live
	// lease (same holder and epoch); otherwise ErrLeaseLost.
	RenewLease(ctx context.Context, l Lease, now time.Time, ttl time.Duration) (Lease, error)
	// ReleaseLease gives l up; a lease that is no longer current is not
	// an error.
	ReleaseLease(ctx context.Context, l Lease) error
	// HandOffLease ends l at now without releasing it, so that
	// ExpiredLeases lists it at once and another holder takes the thread
	// over (a replica that stops gracefully hands its runs on). Until
	// then l still fences, as an expired lease does. A lease that is no
	// longer current is not an error.
	HandOffLease(ctx context.Context, l Lease, now time.Time) error
	// ExpiredLeases lists the leases that expired without being released
	// by now: threads whose replica stopped while running them, or handed
	// them off.
	ExpiredLeases(ctx context.Context, now time.Time) ([]Lease, error)
	// RequestCancel asks for the run of thread id to be cancelled, on
	// whichever replica runs it: it marks the thread's lease, live or
	// expired, as long as it was not released, and returns it marked
	// (nil when no lease of the thread is held: no run to cancel). The
	// mark stays with the lease through a takeover and goes with its
	// release.
	RequestCancel(ctx context.Context, id string) (*Lease, error)
	// CancelRequests lists holder's unreleased leases that carry a
	// cancel request or a stop request (RequestStop): one query for all
	// the runs of a replica.
	CancelRequests(ctx context.Context, holder string) ([]Lease, error)
	// RequestStop asks for the run of thread id to stop at its next
	// checkpoint for a newer run (mode StopInterrupt or StopRollback),
	// on whichever replica runs it: as RequestCancel, it marks the
	// thread's unreleased lease and returns it (nil when none is held).
	// A lease marked StopRollback stays so (MergeStop).
	RequestStop(ctx context.Context, id string, mode StopMode) (*Lease, error)
	// ThreadLeases returns the lease rows of the threads ids (released
	// and expired ones included); threads without one are left out.
	ThreadLeases(ctx context.Context, ids []string) ([]Lease, error)
}

// ErrLeaseLost: the lease expired and was taken, or was released; its
// holder must stop working on the thread. RenewLease returns it, and so
// does SaveCheckpoint for a checkpoint whose Fence is not the thread's
// current lease. It is agent.ErrLeaseLost, so the agent core can tell it
// apart without importing this package.
var ErrLeaseLost = agent.ErrLeaseLost

// Fence is the checkpoint fence of l.
func (l Lease) Fence() *agent.Fence { return &agent.Fence{Holder: l.Holder, Epoch: l.Epoch} }

// CheckFence decides a fenced commit: cur is the thread's lease row (nil
// when it has none). A fence commits only under the lease it names, even
// past its expiry as long as nobody took the thread over (an epoch grows
// with every new claim); a released lease no longer fences anything.
func CheckFence(threadID string, f *agent.Fence, cur *Lease) error {
	if f == nil {
		return nil
	}
	if cur == nil || cur.Released || cur.Epoch != f.Epoch || cur.Holder != f.Holder {
		now := "no lease"
		if cur != nil {
			now = fmt.Sprintf("lease epoch %d of %s", cur.Epoch, cur.Holder)
			if cur.Released {
				now += ", released"
			}
		}
		return fmt.Errorf("checkpoint %s under lease epoch %d of %s, the thread has %s: %w", threadID, f.Epoch, f.Holder, now, ErrLeaseLost)
	}
	return nil
}

// HeldError is AcquireLease's answer when another holder has a live lease.
type HeldError struct{ Lease Lease }

// Is makes a held lease an agent.ErrThreadBusy: the thread is running,
// on another replica.
func (e *HeldError) Is(target error) bool { return target == agent.ErrThreadBusy }

func (e *HeldError) Error() string {
	return fmt.Sprintf("thread %s is running on %s (lease until %s)", e.Lease.ThreadID, e.Lease.Holder, e.Lease.Expires.UTC().Format(time.RFC3339Nano))
}

// NextLease decides an acquisition: cur is the thread's lease row, if any.
// The stores call it with the row locked and write what it returns.
func NextLease(cur *Lease, id, holder string, now time.Time, ttl time.Duration) (Lease, error) {
	next := Lease{ThreadID: id, Holder: holder, Epoch: 1, Expires: now.Add(ttl)}
	switch {
	case cur == nil:
	case cur.Live(now) && cur.Holder != holder:
		return Lease{}, &HeldError{Lease: *cur}
	case cur.Live(now):
		next.Epoch = cur.Epoch // a renewal by its own holder
	default:
		next.Epoch = cur.Epoch + 1
	}
	// A cancel request outlives a takeover (the new holder ends the run
	// CANCELLED), not a release (the run it was meant for is over).
	next.CancelRequested = cur != nil && !cur.Released && cur.CancelRequested
	if cur != nil && !cur.Released {
		next.StopRequested = cur.StopRequested
	}
	return next, nil
}

// Event is one event of a run as the run event log keeps it: opaque bytes
// (agentd stores encoded plumb.v1 events) with the run's sequence number.
type Event struct {
	RunID    string
	Sequence uint64
	// Start marks a segment's first event (run_started); Terminal its
	// last (run_finished, interrupted, error).
	Start, Terminal bool
	Body            []byte
}

// EventRows are the rows of a run event query, as both drivers return them
// (*sql.Rows, pgx.Rows).
type EventRows interface {
	Next() bool
	Scanner
	Err() error
}

// ScanEvents reads rows of (seq, start, terminal, body) as runID's events,
// for the stores' RunEvents implementations.
func ScanEvents(rows EventRows, runID string) ([]Event, error) {
	var events []Event
	for rows.Next() {
		e := Event{RunID: runID}
		var seq int64
		if err := rows.Scan(&seq, &e.Start, &e.Terminal, &e.Body); err != nil {
			return nil, err
		}
		e.Sequence = uint64(seq)
		events = append(events, e)
	}
	return events, rows.Err()
}

// EventPage is a read of a thread's run event log.
type EventPage struct {
	// RunID and Status are the thread's last run's ("" when it has none).
	RunID  string
	Status agent.RunStatus
	// Events follow the requested sequence, in order.
	Events []Event
}

// RunEvents is the run event log of replicated agentd: the replica that
// runs a thread appends the run's events as it emits them, and a replica
// whose client Attaches to that thread reads them back, so that Attach
// works on any replica. The log keeps the events of a thread's last run
// only, every segment of it (Run, Resume after an interrupt, a takeover's
// continuation); appending a run's events drops the older runs'. It goes
// with the thread. Every implementation must pass storetest.RunLeases.
type RunEvents interface {
	// AppendEvents appends events of one run of threadID under the
	// thread's lease f, in one transaction that checks f as
	// SaveCheckpoint does (ErrLeaseLost, nothing appended). An event
	// whose sequence is already stored for the run is skipped.
	AppendEvents(ctx context.Context, threadID string, f *agent.Fence, evs []Event) error
	// ReadEvents returns the events of the thread's last run after
	// sequence after (at most limit, in order, across its segments);
	// after 0 starts at the run's first event. A missing thread is
	// agent.ErrThreadNotFound.
	ReadEvents(ctx context.Context, threadID string, after uint64, limit int) (EventPage, error)
	// LastSequence returns the highest sequence stored for run runID (0
	// without any).
	LastSequence(ctx context.Context, runID string) (uint64, error)
}

// LeaseStore is what a store shared by agentd replicas implements.
type LeaseStore interface {
	Leases
	RunEvents
	// FailUnleasedRuns is FailRunningRuns for replicas: it marks FAILED
	// only the RUNNING runs that no replica runs or will take over —
	// those of threads without a lease or whose lease was released. A
	// live lease is another replica's run; an expired one is taken over.
	FailUnleasedRuns(ctx context.Context, message string) (int, error)
}
