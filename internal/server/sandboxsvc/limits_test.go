package sandboxsvc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestForkAtPidsLimitIsResourceExhausted: in a box whose processes hold
// its whole pids limit, a command the agent cannot fork fails with
// RESOURCE_EXHAUSTED (reason resource_exhausted) naming the process limit,
// not INTERNAL; once those processes end, the box runs commands again.
func TestForkAtPidsLimitIsResourceExhausted(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	run := func(ctx context.Context, cmd string) error {
		_, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: cmd, Timeout: durationpb.New(5 * time.Minute)}})
		return err
	}

	// A command that takes every pid left and keeps them. busybox sh exits
	// when it cannot fork, so a child shell forks until the limit stops
	// it; its own pid, freed when it exits, is taken by one more sleep;
	// then the command writes a marker (no fork) and becomes a sleep.
	hctx, release := context.WithCancel(ctx)
	held := make(chan struct{})
	go func() {
		defer close(held)
		_ = run(hctx, `sh -c 'while :; do sleep 600 & done' 2>/dev/null; sleep 600 & echo full > /workspace/full; exec sleep 600`)
	}()
	t.Cleanup(func() { release(); <-held })
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		// Read runs in the agent, without a fork.
		if _, err := c.Read(ctx, &plumbv1.ReadRequest{SandboxId: id, Path: "/workspace/full"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the box did not fill up")
		}
	}

	err = run(ctx, "true")
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || pbconv.Reason(err) != "resource_exhausted" || !strings.Contains(st.Message(), "process limit") {
		t.Fatalf("a command in a box at its pids limit: %v (reason %q), want RESOURCE_EXHAUSTED resource_exhausted naming the process limit", err, pbconv.Reason(err))
	}

	release()
	<-held
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err := run(ctx, "true")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the box once its processes ended: %v", err)
		}
	}
}
