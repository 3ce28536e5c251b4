package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/cli/render"
	"google.golang.org/protobuf/encoding/protojson"
)

// Exit codes of run, resume and attach (see the package comment).
const (
	exitFailed    = 1
	exitPending   = 3
	exitCancelled = 4
	exitDeadline  = 5
	exitSignal    = 130
)

// view prints a run's events: the readable live view, or one protojson
// line per event with --json. Either way the renderer tracks how the run
// ended.
type view struct {
	r    *render.Renderer
	json io.Writer // nil unless --json
	// term is where questions and hints for the human go: stdout for the
	// live view, stderr under --json so that stdout stays JSON.
	term io.Writer
	err  io.Writer
}

func newView(sio stdio, jsonOut bool) *view {
	v := &view{term: sio.out, err: sio.err}
	if jsonOut {
		v.json, v.term = sio.out, sio.err
		v.r = render.New(io.Discard, render.Options{})
	} else {
		v.r = render.New(sio.out, render.Options{})
	}
	return v
}

func (v *view) event(ev *plumbv1.Event) error {
	if v.json != nil {
		b, err := protojson.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(v.json, "%s\n", b); err != nil {
			return err
		}
	}
	return v.r.Event(ev)
}

// recvFunc returns a stream's next event, io.EOF at its end.
type recvFunc func() (*plumbv1.Event, error)

// eventStream adapts Run, Resume and Attach streams, whose messages all
// carry one event.
type eventStream[T interface{ GetEvent() *plumbv1.Event }] interface {
	Recv() (T, error)
}

func events[T interface{ GetEvent() *plumbv1.Event }](s eventStream[T]) recvFunc {
	return func() (*plumbv1.Event, error) {
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		return m.GetEvent(), nil
	}
}

// follow prints events until the stream closes.
func (v *view) follow(recv recvFunc) error {
	for {
		ev, err := recv()
		if errors.Is(err, io.EOF) {
			return v.r.Flush()
		}
		if err != nil {
			_ = v.r.Flush()
			return rpcError(err)
		}
		if err := v.event(ev); err != nil {
			return err
		}
	}
}

// session drives a run through its interrupts: it follows a stream, and
// while the run ends interrupted it asks dec for decisions, resumes and
// follows again.
type session struct {
	c      plumbv1.AgentServiceClient
	v      *view
	dec    decider // nil: leave interrupts pending
	detach bool
}

// opener starts a stream.
type opener func(context.Context) (recvFunc, error)

// drive follows the stream open returns, then each Resume, until the run
// ends, and turns the ending into agentctl's exit status.
func (s *session) drive(ctx context.Context, open opener) error {
	for {
		recv, err := open(ctx)
		if err != nil {
			return s.stopped(ctx, rpcError(err))
		}
		if err := s.v.follow(recv); err != nil {
			return s.stopped(ctx, err)
		}
		o := s.v.r.Outcome()
		if o.Ending != render.EndInterrupted {
			return exitStatus(o)
		}
		if open, err = s.answer(ctx, o.ThreadID, o.Interrupt); err != nil {
			return err
		}
	}
}

// answer gets decisions for a pending interrupt and returns the Resume
// that delivers them.
func (s *session) answer(ctx context.Context, thread string, in *plumbv1.Interrupted) (opener, error) {
	if s.dec == nil {
		s.pending(thread, in, nil)
		return nil, exitError{exitPending}
	}
	decisions, err := s.dec.decide(ctx, in)
	var ue *undecidedError
	switch {
	case errors.As(err, &ue):
		s.pending(thread, in, err)
		return nil, exitError{exitPending}
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(s.v.err, "agentctl: interrupted; thread %s still waits for decisions: agentctl resume --thread %s\n", thread, thread)
		return nil, exitError{exitSignal}
	case err != nil:
		return nil, err
	}
	for i, d := range decisions {
		fmt.Fprintln(s.v.term, render.Decision(in.GetRequests()[i], d, 0))
	}
	req := &plumbv1.ResumeRequest{ThreadId: thread, InterruptId: in.GetInterruptId(), Decisions: decisions, Detach: s.detach}
	return func(ctx context.Context) (recvFunc, error) {
		st, err := s.c.Resume(ctx, req)
		if err != nil {
			return nil, err
		}
		return events(st), nil
	}, nil
}

// stopped explains an error, and when it came from Ctrl-C, what became of
// the run.
func (s *session) stopped(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	o := s.v.r.Outcome()
	switch {
	case o.ThreadID == "":
		fmt.Fprintln(s.v.err, "agentctl: interrupted")
	case s.detach:
		fmt.Fprintf(s.v.err, "agentctl: detached; the run goes on: agentctl attach %s --after %d\n", o.ThreadID, o.LastSequence)
	default:
		fmt.Fprintf(s.v.err, "agentctl: interrupted; agentd cancels the run on thread %s\n", o.ThreadID)
	}
	return exitError{exitSignal}
}

// pending tells the human that decisions are needed and how to give them.
func (s *session) pending(thread string, in *plumbv1.Interrupted, why error) {
	w := s.v.err
	if why != nil {
		fmt.Fprintf(w, "agentctl: cannot decide %v\n", why)
	}
	for _, l := range render.Interrupt(in) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "thread %s waits for decisions; answer with\n  agentctl resume --thread %s [--approve-all | --reject-all[=MESSAGE] | --decisions FILE]\n(without those flags, from a terminal, agentctl asks for each call)\n", thread, thread)
}

// exitStatus maps how a stream ended to agentctl's exit status.
func exitStatus(o render.Outcome) error {
	switch o.Ending {
	case render.EndError:
		return exitError{exitFailed}
	case render.EndInterrupted:
		return exitError{exitPending}
	case render.EndFinished:
		switch o.Status {
		case plumbv1.RunStatus_RUN_STATUS_CANCELLED:
			return exitError{exitCancelled}
		case plumbv1.RunStatus_RUN_STATUS_DEADLINE_EXCEEDED:
			return exitError{exitDeadline}
		}
		return nil
	}
	return errors.New("the stream ended without a terminal event")
}
