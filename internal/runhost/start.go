package runhost

import (
	"context"
	"errors"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
)

// errStarted ends Start's stream once the run has started.
var errStarted = errors.New("run started")

// Start runs in detached, as Run with detach does for a client that
// leaves after run_started, and returns the run's and its thread's ids
// once it has started (a new thread, owned by ctx's tenant, when
// in.ThreadID is ""). Errors are those of Run before run_started:
// agent.ErrThreadBusy or runs.ErrRunning for a thread with a run,
// *agent.PendingInterruptError, agent.ErrThreadNotFound, .... The
// scheduler starts scheduled runs with it; the caller has checked that
// ctx's tenant owns in.ThreadID.
func (h *Host) Start(ctx context.Context, in agent.RunInput) (runID, threadID string, err error) {
	err = h.Run(ctx, in, true, func(e *plumbv1.Event) error {
		if rs := e.GetRunStarted(); rs != nil {
			runID, threadID = rs.GetRunId(), rs.GetThreadId()
			return errStarted
		}
		return nil
	})
	if errors.Is(err, errStarted) {
		return runID, threadID, nil
	}
	if err == nil {
		err = errors.New("the run ended without run_started")
	}
	return "", "", err
}
