package runhost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrNoSuchCheckpoint: ForkThread named a checkpoint the thread does not
// retain. It matches store.ErrNoSuchCheckpoint.
var ErrNoSuchCheckpoint = store.ErrNoSuchCheckpoint

// ForkInput is a ForkThread request.
type ForkInput struct {
	// ThreadID is the thread to fork; the caller's tenant owns it.
	ThreadID string
	// CheckpointID is a retained checkpoint of it (0 = its latest).
	CheckpointID int64
	// Metadata are added to (or replace) the copied labels.
	Metadata map[string]string
}

// ForkResult is the new thread and what its sandbox will start from.
type ForkResult struct {
	// Thread is the fork as stored.
	Thread *agent.ThreadData
	// CheckpointID is the checkpoint forked at.
	CheckpointID int64
	// Snapshot is the workspace snapshot the fork's sandbox is restored
	// from on first use; zero when there is none (an empty sandbox).
	Snapshot store.ThreadSnapshot
}

// checkpointer is the part of the thread store that writes checkpoints
// (every store the host runs on has it).
type checkpointer interface {
	SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error
}

// ForkThread makes a new thread of ctx's tenant whose log is the
// thread's up to a checkpoint, with the thread's labels (and in.Metadata)
// and, with Config.Snapshots, the record of the workspace snapshot taken
// at or latest before that checkpoint, which the fork's first sandbox call
// restores (agentd's ThreadBackends). Its state is the thread's when the
// checkpoint is the latest; for an earlier one, the baseline of the run
// that started there when the thread's last run did, else only the
// summary that covers no later message (todos and State files of an older
// moment are not kept). Another tenant's thread and an unknown checkpoint
// are agent.ErrThreadNotFound and ErrNoSuchCheckpoint; a failure leaves
// no fork behind.
func (h *Host) ForkThread(ctx context.Context, in ForkInput) (*ForkResult, error) {
	cw, ok := h.threads.(checkpointer)
	if !ok {
		return nil, errors.New("fork thread: this thread store cannot write checkpoints")
	}
	td, err := h.threads.LoadThread(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	if tenant.Norm(td.Thread.Tenant) != tenant.From(ctx) {
		return nil, fmt.Errorf("thread %s: %w", in.ThreadID, agent.ErrThreadNotFound)
	}
	if len(td.Checkpoints) == 0 {
		return nil, fmt.Errorf("thread %s has no checkpoint to fork at: %w", in.ThreadID, ErrNoSuchCheckpoint)
	}
	at := td.Checkpoints[len(td.Checkpoints)-1]
	latest := true
	if in.CheckpointID != 0 {
		i := slices.IndexFunc(td.Checkpoints, func(c agent.CheckpointInfo) bool { return c.ID == in.CheckpointID })
		if i < 0 {
			return nil, fmt.Errorf("thread %s retains no checkpoint %d: %w", in.ThreadID, in.CheckpointID, ErrNoSuchCheckpoint)
		}
		at, latest = td.Checkpoints[i], i == len(td.Checkpoints)-1
	}
	var snap store.ThreadSnapshot
	if h.cfg.Snapshots != nil {
		list, err := h.cfg.Snapshots.ThreadSnapshots(ctx, in.ThreadID)
		if err != nil {
			return nil, fmt.Errorf("fork thread %s: its snapshots: %w", in.ThreadID, err)
		}
		snap, _ = store.LatestSnapshotAt(list, at.ID)
	}

	now := h.clock.Now()
	labels := maps.Clone(td.Thread.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, in.Metadata)
	fork := agent.Thread{ID: h.newID(), CreatedAt: now, UpdatedAt: now, Metadata: labels, Tenant: tenant.From(ctx)}
	cp := &agent.Checkpoint{
		ThreadID: fork.ID, Phase: agent.PhaseFinal, Base: 0, CreatedAt: now,
		Append: slices.Clone(td.Messages[:min(at.MessageCount, len(td.Messages))]),
	}
	forkState(cp, td, at, latest)
	if err := h.threads.CreateThread(ctx, fork); err != nil {
		return nil, fmt.Errorf("fork thread %s: %w", in.ThreadID, err)
	}
	undo := func(err error) (*ForkResult, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := h.threads.DeleteThread(dctx, fork.ID); derr != nil {
			h.lg.Warn("a failed fork could not be removed", zap.String("thread-id", fork.ID), zap.Error(derr))
		}
		return nil, fmt.Errorf("fork thread %s: %w", in.ThreadID, err)
	}
	if err := cw.SaveCheckpoint(ctx, cp); err != nil {
		return undo(err)
	}
	if snap.SnapshotID != "" {
		rec := store.ThreadSnapshot{ThreadID: fork.ID, SnapshotID: snap.SnapshotID, SandboxID: snap.SandboxID, CreatedAt: snap.CreatedAt}
		if _, err := h.cfg.Snapshots.AddThreadSnapshot(ctx, rec); err != nil {
			return undo(err)
		}
	}
	out, err := h.threads.LoadThread(ctx, fork.ID)
	if err != nil {
		return undo(err)
	}
	h.lg.Info("thread forked", zap.String("thread-id", fork.ID), zap.String("from-thread-id", in.ThreadID),
		zap.Int64("checkpoint-id", at.ID), zap.String("snapshot-id", snap.SnapshotID))
	return &ForkResult{Thread: out, CheckpointID: at.ID, Snapshot: snap}, nil
}

// forkState gives the fork's checkpoint cp the state of td at checkpoint
// at (see ForkThread).
func forkState(cp *agent.Checkpoint, td *agent.ThreadData, at agent.CheckpointInfo, latest bool) {
	switch {
	case latest:
		cp.Todos, cp.Summary, cp.Private, cp.Files = td.Todos, td.Summary, td.Private, td.Files
	case td.LastRun != nil && td.LastRun.Baseline != nil && td.LastRun.FirstMessage == at.MessageCount:
		b := td.LastRun.Baseline
		cp.Todos, cp.Summary, cp.Private = b.Todos, b.Summary, b.Private
		if !b.FilesOmitted {
			cp.Files = b.Files
		}
	case td.Summary != nil && td.Summary.Cutoff <= at.MessageCount:
		cp.Summary = td.Summary
	}
}
