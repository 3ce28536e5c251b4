package agentsvc

import (
	"context"

	"google.golang.org/grpc"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
)

// onBusy is the request's double-texting strategy, else its agent's,
// else the server's.
func (s *Service) onBusy(req *plumbv1.RunRequest) runhost.OnBusy {
	switch req.GetOnBusy() {
	case plumbv1.OnBusy_ON_BUSY_REJECT:
		return runhost.OnBusyReject
	case plumbv1.OnBusy_ON_BUSY_ENQUEUE:
		return runhost.OnBusyEnqueue
	case plumbv1.OnBusy_ON_BUSY_INTERRUPT:
		return runhost.OnBusyInterrupt
	case plumbv1.OnBusy_ON_BUSY_ROLLBACK:
		return runhost.OnBusyRollback
	case plumbv1.OnBusy_ON_BUSY_STEER:
		return runhost.OnBusySteer
	}
	if ob, ok := s.cfg.AgentOnBusy[req.GetAgent()]; ok {
		return ob
	}
	return s.cfg.OnBusy
}

// Run appends user input to a thread and streams the run (docs/agent-core.md §2.2).
func (s *Service) Run(req *plumbv1.RunRequest, stream grpc.ServerStreamingServer[plumbv1.RunResponse]) error {
	in, err := s.runInput(req)
	if err != nil {
		return Status(err)
	}
	ctx := stream.Context()
	if in.ThreadID != "" {
		if err := s.checkOwner(ctx, in.ThreadID); err != nil {
			return s.status("run", err)
		}
	}
	if u := req.GetWebhookUrl(); u != "" {
		if err := s.webhookURL(ctx, u); err != nil {
			return s.status("run webhook", err)
		}
		in.Spec.WebhookURL = u
	}
	o := runhost.RunOptions{Detach: req.GetDetach(), OnBusy: s.onBusy(req)}
	err = s.host.RunWith(ctx, in, o, func(e *plumbv1.Event) error {
		return stream.Send(&plumbv1.RunResponse{Event: e})
	})
	return s.status("run did not start", err)
}

// Resume answers a pending interrupt and streams the continued run
// (docs/agent-core.md §6.4).
func (s *Service) Resume(req *plumbv1.ResumeRequest, stream grpc.ServerStreamingServer[plumbv1.ResumeResponse]) error {
	in, err := resumeInput(req)
	if err != nil {
		return Status(err)
	}
	ctx := stream.Context()
	if err := s.checkOwner(ctx, in.ThreadID); err != nil {
		return s.status("resume", err)
	}
	err = s.host.Resume(ctx, in, req.GetDetach(), func(e *plumbv1.Event) error {
		return stream.Send(&plumbv1.ResumeResponse{Event: e})
	})
	return s.status("resume did not start", err)
}

// Attach replays a thread's current or retained run after after_sequence
// (0: from its start, through every retained segment), then follows it
// live (docs/agent-core.md §2.4).
func (s *Service) Attach(req *plumbv1.AttachRequest, stream grpc.ServerStreamingServer[plumbv1.AttachResponse]) error {
	id := req.GetThreadId()
	if err := requireThreadID(id); err != nil {
		return Status(err)
	}
	ctx := stream.Context()
	if err := s.checkOwner(ctx, id); err != nil {
		return s.status("attach", err)
	}
	return Status(s.host.Attach(ctx, id, req.GetAfterSequence(), func(e *plumbv1.Event) error {
		return stream.Send(&plumbv1.AttachResponse{Event: e})
	}))
}

// Cancel cancels the thread's queued runs and its active run, on this
// replica or (with leases) on another, and waits (as long as the call's context allows)
// until it has ended, so that the thread is free when Cancel returns.
// Attached streams receive run_finished{CANCELLED}.
func (s *Service) Cancel(ctx context.Context, req *plumbv1.CancelRequest) (*plumbv1.CancelResponse, error) {
	id := req.GetThreadId()
	if err := requireThreadID(id); err != nil {
		return nil, Status(err)
	}
	if err := s.checkOwner(ctx, id); err != nil {
		return nil, s.status("cancel", err)
	}
	c, err := s.host.Cancel(ctx, id)
	if err != nil {
		return nil, s.status("cancel", err)
	}
	return &plumbv1.CancelResponse{RunId: c.RunID, WasRunning: c.WasRunning, CancelledQueuedRunIds: c.Queued}, nil
}
