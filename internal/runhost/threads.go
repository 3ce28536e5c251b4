package runhost

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// Threads is the thread store as the host (and the service over it) reads
// and deletes it (runs write through the Runtime's own store).
// DurableThreads and MemoryThreads adapt the durable and the memory
// stores; each must be the store the Runtime was built with.
type Threads interface {
	// CreateThread stores a new, empty thread.
	CreateThread(ctx context.Context, t agent.Thread) error
	// LoadThread returns a thread with its log and state, or an error
	// matching agent.ErrThreadNotFound.
	LoadThread(ctx context.Context, id string) (*agent.ThreadData, error)
	// ListThreads returns one page of threads, newest UpdatedAt first,
	// and the next page's token ("" at the end). A page token it did not
	// issue is an error matching agent.ErrInvalidInput.
	ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error)
	// DeleteThread removes a thread and everything stored with it, or
	// returns an error matching agent.ErrThreadNotFound.
	DeleteThread(ctx context.Context, id string) error
}

// ThreadQuery selects a page of threads.
type ThreadQuery struct {
	// Tenant, if set, keeps only that tenant's threads.
	Tenant string
	// Labels must all be present with these values.
	Labels map[string]string
	// Status filters by derived status ("" = any).
	Status agent.ThreadStatus
	// PageSize is 1..MaxPageSize (0 = DefaultPageSize).
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
}

// ListedThread is a listed thread: its record and state (the message log
// may be left out) and the log's length.
type ListedThread struct {
	*agent.ThreadData
	// MessageCount is the length of the message log.
	MessageCount int
}

// ListThreads page sizes (docs/agent-core.md §1.1).
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// DurableThreads adapts a durable thread store (SQLite or PostgreSQL) to
// Threads.
func DurableThreads(s store.Threads) Threads { return durableThreads{s} }

type durableThreads struct{ store.Threads }

func (t durableThreads) ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error) {
	infos, next, err := t.Threads.ListThreads(ctx, store.ListQuery{Tenant: q.Tenant, Labels: q.Labels, Status: q.Status, PageSize: q.PageSize, PageToken: q.PageToken})
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, "", fmt.Errorf("%w: %w", agent.ErrInvalidInput, err)
	}
	if err != nil {
		return nil, "", err
	}
	out := make([]ListedThread, len(infos))
	for i, ti := range infos {
		out[i] = ListedThread{ThreadData: ti.ThreadData, MessageCount: ti.MessageCount}
	}
	return out, next, nil
}

// MemoryThreads adapts the ephemeral thread store to Threads; it pages
// with the same keyset order as the durable stores (UpdatedAt, then id,
// descending).
func MemoryThreads(s *agent.MemoryStore) Threads { return memoryThreads{s} }

type memoryThreads struct{ *agent.MemoryStore }

func (t memoryThreads) ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error) {
	var (
		after   int64
		afterID string
	)
	if q.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.PageToken)
		u, id, ok := strings.Cut(string(b), ":")
		n, perr := strconv.ParseInt(u, 10, 64)
		if err != nil || !ok || perr != nil || id == "" {
			return nil, "", fmt.Errorf("%w: invalid page token", agent.ErrInvalidInput)
		}
		after, afterID = n, id
	}
	all, err := t.MemoryStore.ListThreads(ctx, q.Labels)
	if err != nil {
		return nil, "", err
	}
	size := q.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	var out []ListedThread
	for _, td := range all {
		u := td.Thread.UpdatedAt.UnixNano()
		if q.PageToken != "" && (u > after || (u == after && td.Thread.ID >= afterID)) {
			continue
		}
		if q.Status != "" && td.Status() != q.Status {
			continue
		}
		if q.Tenant != "" && tenant.Norm(td.Thread.Tenant) != q.Tenant {
			continue
		}
		if len(out) == size {
			last := out[size-1].Thread
			tok := strconv.FormatInt(last.UpdatedAt.UnixNano(), 10) + ":" + last.ID
			return out, base64.RawURLEncoding.EncodeToString([]byte(tok)), nil
		}
		out = append(out, ListedThread{ThreadData: td, MessageCount: len(td.Messages)})
	}
	return out, "", nil
}

// CreateThread creates an empty thread with the given labels, owned by
// ctx's tenant, and returns it as stored.
func (h *Host) CreateThread(ctx context.Context, metadata map[string]string) (*agent.ThreadData, error) {
	now := h.clock.Now()
	t := agent.Thread{ID: h.newID(), CreatedAt: now, UpdatedAt: now, Metadata: metadata, Tenant: tenant.From(ctx)}
	if err := h.threads.CreateThread(ctx, t); err != nil {
		return nil, err
	}
	return h.threads.LoadThread(ctx, t.ID)
}

// Statuses returns the status of each thread of tds: the stored status,
// RUNNING while this process runs the thread or, with Config.Leases,
// another replica holds its lease (runningElsewhere). The store learns of
// a run only at its checkpoints (a resumed run's first one clears the
// interrupt).
func (h *Host) Statuses(ctx context.Context, tds ...*agent.ThreadData) ([]agent.ThreadStatus, error) {
	ids := make([]string, len(tds))
	for i, td := range tds {
		ids[i] = td.Thread.ID
	}
	elsewhere, err := h.runningElsewhere(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]agent.ThreadStatus, len(tds))
	for i, td := range tds {
		out[i] = td.Status()
		if h.reg.Active(td.Thread.ID) != nil || elsewhere[td.Thread.ID] {
			out[i] = agent.ThreadRunning
		}
	}
	return out, nil
}

// DeleteThread deletes a thread, its State files and (through
// OnDeleteThread) its sandbox. A running thread — on this replica or, with
// Config.Leases, on any — is runs.ErrRunning unless force is set, which
// cancels the run wherever it runs and waits for it to end first. The
// caller has checked that ctx's tenant owns the thread.
func (h *Host) DeleteThread(ctx context.Context, id string, force bool) error {
	return h.deleteThread(ctx, id, force, nil)
}

// ErrNotIdle: DeleteIdleThread found the thread used since the time it
// was given, or with a run, and kept it.
var ErrNotIdle = errors.New("thread is not idle")

// DeleteIdleThread is the retention sweeper's DeleteThread: the same
// deletion (the lease under this replica's deletion holder, so that of
// two replicas deleting the thread one wins and the other finds it held
// or gone; the sandbox through OnDeleteThread), never forced — a running
// thread is runs.ErrRunning or agent.ErrThreadBusy — and, once the thread
// is held, only if it was last updated before idleBefore and has no
// run in progress (else ErrNotIdle).
func (h *Host) DeleteIdleThread(ctx context.Context, id string, idleBefore time.Time) error {
	return h.deleteThread(ctx, id, false, func(td *agent.ThreadData) error {
		if !td.Thread.UpdatedAt.Before(idleBefore) || td.Status() == agent.ThreadRunning {
			return fmt.Errorf("delete idle thread %s (updated %s): %w", id, td.Thread.UpdatedAt.Format(time.RFC3339), ErrNotIdle)
		}
		return nil
	})
}

// deleteThread is DeleteThread; check, if set, may refuse the loaded
// thread while it is held.
func (h *Host) deleteThread(ctx context.Context, id string, force bool, check func(*agent.ThreadData) error) error {
	lg := h.lg.With(zap.String("thread-id", id))
	for {
		release, err := h.reg.Reserve(id)
		if err == nil {
			defer release()
			break
		}
		r := h.reg.Active(id)
		switch {
		case r == nil: // another DeleteThread holds it
			return err
		case !force:
			return fmt.Errorf("delete thread %s: %w; set force to cancel it", id, runs.ErrRunning)
		}
		lg.Info("cancelling the run of a thread being deleted", zap.String("run-id", r.RunID()))
		h.reg.Cancel(id)
		select {
		case <-r.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	giveUp, err := h.leaseForDelete(ctx, id, force)
	if err != nil {
		return err
	}
	var td *agent.ThreadData
	deleted := false
	defer func() {
		if !deleted {
			giveUp(td)
		}
	}()
	td, err = h.threads.LoadThread(ctx, id)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(td); err != nil {
			return err
		}
	}
	if h.cfg.OnDeleteThread != nil {
		if err := h.cfg.OnDeleteThread(ctx, td); err != nil {
			lg.Warn("thread cleanup failed; the thread is kept", zap.String("sandbox-id", td.Thread.SandboxID), zap.Error(err))
			return err
		}
	}
	if err := h.threads.DeleteThread(ctx, id); err != nil {
		return err
	}
	deleted = true // the lease went with the thread
	h.reg.Forget(id)
	lg.Info("thread deleted")
	return nil
}
