package agentsvc_test

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// sequenceOf reads a sequence number from the ErrorInfo metadata of err.
func sequenceOf(t *testing.T, err error, key string) uint64 {
	t.Helper()
	info := errorInfo(err)
	n, perr := strconv.ParseUint(info.GetMetadata()[key], 10, 64)
	if perr != nil {
		t.Fatalf("%s in %v: %v", key, info, perr)
	}
	return n
}

// A Run client that stops reading does not pin the run's replay log: the
// log stays within its caps while the run goes on, the stream ends with
// RESOURCE_EXHAUSTED (STREAM_LAGGING) carrying the last sequence it sent
// once the client reads again, the run is not cancelled by that (even
// without detach), and the client can Attach again from the oldest
// retained event (an older after_sequence is OUT_OF_RANGE).
func TestStalledRunStreamIsCut(t *testing.T) {
	e := newEnv(t, withService(func(c *agentsvc.Config) { c.ReplayMaxEvents, c.ReplayMaxBytes = 100, 64<<10 }))
	ctx := e.ctx()
	// A client whose flow-control windows stay small: the server can send
	// it little more than 64 KiB before it reads.
	slow := e.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))

	reached, release := make(chan struct{}), make(chan struct{})
	big := modeltest.Calls(call("c1", "echo", `{"text":"x"}`))
	big.Text = modeltest.Split(strings.Repeat("0123456789abcdef", 1<<15), 512) // 512 KiB in 512 deltas
	e.srv.Script("main", big, modeltest.Dynamic(func(modeltest.Request) modeltest.Turn {
		close(reached)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return modeltest.Text("done")
	}))
	th, err := e.c.CreateThread(ctx, &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	thread := th.GetThread().GetId()
	s, err := slow.Run(ctx, runReq(thread, "go"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached: // the first step is done and its events are emitted
	case <-ctx.Done():
		t.Fatal("the run did not reach its second model call while its client was not reading")
	}

	_, err = recvAttach(e, thread, 0)
	wantStatus(t, err, codes.OutOfRange, agentsvc.ReasonReplayOutOfRange)

	got, err := recvAll(s)
	wantStatus(t, err, codes.ResourceExhausted, agentsvc.ReasonStreamLagging)
	if len(got) == 0 || got[0].GetRunStarted() == nil {
		t.Fatalf("the stalled stream got %v before its status", kinds(got, true))
	}
	if lastSent := sequenceOf(t, err, "last_sequence"); lastSent != last(t, got).GetSequence() {
		t.Errorf("last_sequence %d, but the client received up to %d", lastSent, last(t, got).GetSequence())
	}
	if !strings.Contains(err.Error(), "Attach with after_sequence") {
		t.Errorf("the status does not say how to go on: %v", err)
	}

	_, err = recvAttach(e, thread, last(t, got).GetSequence())
	wantStatus(t, err, codes.OutOfRange, agentsvc.ReasonReplayOutOfRange)
	oldest := sequenceOf(t, err, "oldest_sequence")
	as, err := e.c.Attach(ctx, &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: oldest - 1})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	tail, err := recvAll(as)
	if err != nil {
		t.Fatal(err)
	}
	if tail[0].GetSequence() != oldest {
		t.Errorf("re-attach starts at %d, want %d", tail[0].GetSequence(), oldest)
	}
	if f := last(t, tail).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "done" {
		t.Errorf("the run ended with %v after its stream was cut", kinds(tail, true))
	}
}
