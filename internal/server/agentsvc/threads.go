package agentsvc

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
)

// CreateThread creates an empty thread with the given labels.
func (s *Service) CreateThread(ctx context.Context, req *plumbv1.CreateThreadRequest) (*plumbv1.CreateThreadResponse, error) {
	var vs violations
	vs.checkMetadata("metadata", req.GetMetadata())
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	td, err := s.host.CreateThread(ctx, req.GetMetadata())
	if err != nil {
		return nil, s.status("create thread", err)
	}
	return &plumbv1.CreateThreadResponse{Thread: agentconv.ThreadToPB(td, td.Status(), len(td.Messages))}, nil
}

// GetThread returns a thread; the FULL view adds the message log, the
// State files and the checkpoints.
func (s *Service) GetThread(ctx context.Context, req *plumbv1.GetThreadRequest) (*plumbv1.GetThreadResponse, error) {
	td, err := s.loadOwned(ctx, "get thread", req.GetThreadId())
	if err != nil {
		return nil, err
	}
	st, err := s.host.Statuses(ctx, td)
	if err != nil {
		return nil, s.status("get thread", err)
	}
	th := agentconv.ThreadToPB(td, st[0], len(td.Messages))
	if req.GetView() == plumbv1.ThreadView_THREAD_VIEW_FULL {
		th = fullThread(td, st[0])
		if err := s.checkpointSnapshots(ctx, td.Thread.ID, th.GetCheckpoints()); err != nil {
			return nil, s.status("get thread", err)
		}
	}
	if err := s.pendingEgress(ctx, th); err != nil {
		return nil, s.status("get thread", err)
	}
	return &plumbv1.GetThreadResponse{Thread: th}, nil
}

// ListThreads lists threads, most recently updated first.
func (s *Service) ListThreads(ctx context.Context, req *plumbv1.ListThreadsRequest) (*plumbv1.ListThreadsResponse, error) {
	var vs violations
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		vs.add("page_size", "page_size must not be negative")
	case size == 0:
		size = runhost.DefaultPageSize
	case size > runhost.MaxPageSize:
		size = runhost.MaxPageSize
	}
	vs.checkMetadata("labels", req.GetLabels())
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	list, next, err := s.threads.ListThreads(ctx, runhost.ThreadQuery{
		Tenant: tenant.From(ctx), Labels: req.GetLabels(), Status: agentconv.ThreadStatusFromPB(req.GetStatus()), PageSize: size, PageToken: req.GetPageToken(),
	})
	if errors.Is(err, agent.ErrInvalidInput) {
		err = InvalidField("page_token", "page_token was not issued by this server")
	}
	if err != nil {
		return nil, s.status("list threads", err)
	}
	tds := make([]*agent.ThreadData, len(list))
	for i, t := range list {
		tds[i] = t.ThreadData
	}
	st, err := s.host.Statuses(ctx, tds...)
	if err != nil {
		return nil, s.status("list threads", err)
	}
	out := &plumbv1.ListThreadsResponse{}
	out.Threads, out.NextPageToken = threadsPage(list, st, next)
	return out, nil
}

// DeleteThread deletes a thread, its State files and (through
// OnDeleteThread) its sandbox. A running thread — on this replica or, with
// leases, on any — is FAILED_PRECONDITION unless force is set, which
// cancels the run wherever it runs and waits for it to end first.
func (s *Service) DeleteThread(ctx context.Context, req *plumbv1.DeleteThreadRequest) (*plumbv1.DeleteThreadResponse, error) {
	id := req.GetThreadId()
	if err := requireThreadID(id); err != nil {
		return nil, Status(err)
	}
	if err := s.checkOwner(ctx, id); err != nil {
		return nil, s.status("delete thread", err)
	}
	if err := s.host.DeleteThread(ctx, id, req.GetForce()); err != nil {
		return nil, s.status("delete thread", err)
	}
	return &plumbv1.DeleteThreadResponse{}, nil
}

// owned returns agent.ErrThreadNotFound unless the caller's tenant owns
// td: another tenant's thread is not found (PERMISSION_DENIED would tell
// that it exists).
func owned(ctx context.Context, td *agent.ThreadData) error {
	if tenant.Norm(td.Thread.Tenant) != tenant.From(ctx) {
		return fmt.Errorf("thread %s: %w", td.Thread.ID, agent.ErrThreadNotFound)
	}
	return nil
}

// checkOwner loads thread id and checks that the caller's tenant owns it.
func (s *Service) checkOwner(ctx context.Context, id string) error {
	td, err := s.threads.LoadThread(ctx, id)
	if err != nil {
		return err
	}
	return owned(ctx, td)
}

// ListAgents lists the primary agents a client may name in
// RunRequest.agent and the subagents they delegate to.
func (s *Service) ListAgents(context.Context, *plumbv1.ListAgentsRequest) (*plumbv1.ListAgentsResponse, error) {
	out := &plumbv1.ListAgentsResponse{}
	for _, info := range s.rt.ListAgents() {
		out.Agents = append(out.Agents, agentconv.AgentInfoToPB(info))
	}
	return out, nil
}

// status maps a store error, logging those that become INTERNAL (their
// text is not sent).
func (s *Service) status(op string, err error) error {
	st := Status(err)
	if status.Code(st) == codes.Internal {
		s.lg.Error(op, zap.Error(err))
	}
	return st
}

// ForkThread makes a new thread whose log ends at a checkpoint of the
// thread and whose sandbox is restored, on first use, from the workspace
// snapshot taken at (or latest before) it (runhost.Host.ForkThread).
func (s *Service) ForkThread(ctx context.Context, req *plumbv1.ForkThreadRequest) (*plumbv1.ForkThreadResponse, error) {
	var vs violations
	if req.GetThreadId() == "" {
		vs.add("thread_id", "thread_id is required")
	}
	if req.GetCheckpointId() < 0 {
		vs.add("checkpoint_id", "checkpoint_id must not be negative (0 = the latest)")
	}
	vs.checkMetadata("metadata", req.GetMetadata())
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	res, err := s.host.ForkThread(ctx, runhost.ForkInput{ThreadID: req.GetThreadId(), CheckpointID: req.GetCheckpointId(), Metadata: req.GetMetadata()})
	if err != nil {
		return nil, s.status("fork thread", err)
	}
	td := res.Thread
	return &plumbv1.ForkThreadResponse{
		Thread:     agentconv.ThreadToPB(td, td.Status(), len(td.Messages)),
		SnapshotId: res.Snapshot.SnapshotID, SnapshotCheckpointId: res.Snapshot.CheckpointID, CheckpointId: res.CheckpointID,
	}, nil
}
