package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// dialCounter is the real engine, counting the execs that open agent
// channels (the manager's only exec) and holding each of them at a gate
// until release is closed, so that callers pile up behind a dial.
type dialCounter struct {
	*client.Client
	dials   atomic.Int32
	entered chan struct{} // gets a value as each dial reaches the gate
	release chan struct{}
	refuse  error // when set, every dial fails with it once released
}

func (d *dialCounter) ExecCreate(ctx context.Context, id string, opts client.ExecCreateOptions) (client.ExecCreateResult, error) {
	d.dials.Add(1)
	select {
	case d.entered <- struct{}{}:
	default:
	}
	select {
	case <-d.release:
		if d.refuse != nil {
			return client.ExecCreateResult{}, d.refuse
		}
		return d.Client.ExecCreate(ctx, id, opts)
	case <-ctx.Done():
		return client.ExecCreateResult{}, ctx.Err()
	}
}

// TestFirstCallHerdDialsOnce: after a worker restart, many concurrent
// first calls on an adopted box share one agent channel dial (one exec,
// one agent in the box) and all succeed; a caller whose context ends while
// it waits for the dial gets a cancelled error at once and does not cancel
// the dial for the others; the herd logs no channel warnings.
func TestFirstCallHerdDialsOnce(t *testing.T) {
	const herd = 40
	e := newEnv(t)
	m1, err := sandbox.NewManager(context.Background(), e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	box := e.create(t, m1, sandbox.CreateSpec{})
	m1.Close() // a worker restart leaves its sandboxes running

	d := &dialCounter{Client: e.cli, entered: make(chan struct{}, 1), release: make(chan struct{})}
	core, logs := observer.New(zapcore.WarnLevel)
	m2 := e.managerOn(t, d, sandbox.WithLogger(zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	f, err := m2.Files(box.ID)
	if err != nil {
		t.Fatal(err)
	}

	// The first caller starts the dial, then gives up waiting for it.
	qctx, quit := context.WithCancel(ctx)
	quitter := make(chan error, 1)
	go func() {
		_, err := f.Execute(qctx, backend.ExecuteRequest{Command: "echo quitter"})
		quitter <- err
	}()
	<-d.entered

	// The herd arrives while that dial is held at the engine.
	var started, wg sync.WaitGroup
	results := make([]string, herd)
	started.Add(herd)
	wg.Add(herd)
	for i := range herd {
		go func() {
			defer wg.Done()
			started.Done()
			r, err := f.Execute(ctx, backend.ExecuteRequest{Command: fmt.Sprintf("echo %d", i)})
			if err != nil {
				results[i] = err.Error()
				return
			}
			results[i] = r.Output
		}()
	}
	started.Wait()
	quit()
	if err := <-quitter; backend.CodeOf(err) != backend.CodeCancelled {
		t.Errorf("the caller that gave up: %v, want a cancelled error", err)
	}
	close(d.release)
	wg.Wait()
	for i, got := range results {
		if got != fmt.Sprintf("%d\n", i) {
			t.Errorf("caller %d got %q", i, got)
		}
	}
	if n := d.dials.Load(); n != 1 {
		t.Errorf("%d agent channel dials for %d concurrent first calls, want 1", n, herd+1)
	}
	for _, entry := range logs.All() {
		if strings.Contains(entry.Message, "channel") {
			t.Errorf("the herd logged %s %q %v", entry.Level, entry.Message, entry.ContextMap())
		}
	}
	// One agent serves the box: the old worker's ended with its channel
	// and the new worker started one.
	waitAgents(t, m2, box.ID, 1)
}

// TestFailedDialLoggedOnce: when the one dial a herd of first calls waits
// for fails, every caller gets an unavailable error naming the failure,
// and each failed dial is logged once, at warn level (no stack trace),
// not once per caller.
func TestFailedDialLoggedOnce(t *testing.T) {
	const herd = 20
	e := newEnv(t)
	m1, err := sandbox.NewManager(context.Background(), e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	box := e.create(t, m1, sandbox.CreateSpec{})
	m1.Close()

	d := &dialCounter{Client: e.cli, entered: make(chan struct{}, 1), release: make(chan struct{}), refuse: errors.New("the engine refused the exec")}
	core, logs := observer.New(zapcore.InfoLevel)
	m2 := e.managerOn(t, d, sandbox.WithLogger(zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	f, err := m2.Files(box.ID)
	if err != nil {
		t.Fatal(err)
	}
	var started, wg sync.WaitGroup
	errs := make([]error, herd)
	started.Add(herd)
	wg.Add(herd)
	for i := range herd {
		go func() {
			defer wg.Done()
			started.Done()
			_, errs[i] = f.Execute(ctx, backend.ExecuteRequest{Command: "true"})
		}()
	}
	started.Wait()
	<-d.entered
	close(d.release)
	wg.Wait()
	for i, err := range errs {
		if backend.CodeOf(err) != backend.CodeUnavailable || !strings.Contains(err.Error(), "refused the exec") {
			t.Errorf("caller %d: %v, want unavailable naming the dial's failure", i, err)
		}
	}
	// Callers that arrive once the dial has failed start the next one;
	// those that waited for it share its failure.
	n := int(d.dials.Load())
	if n < 1 || n >= herd {
		t.Errorf("%d dials for %d concurrent first calls, want them shared", n, herd)
	}
	var lines []string
	for _, entry := range logs.All() {
		if entry.Level >= zapcore.ErrorLevel || strings.Contains(entry.Message, "channel") && entry.Message != "open the sandbox agent channel" {
			t.Errorf("logged %s %q", entry.Level, entry.Message)
		}
		if entry.Message == "open the sandbox agent channel" {
			lines = append(lines, entry.Level.String())
		}
	}
	if len(lines) != n || slices.ContainsFunc(lines, func(l string) bool { return l != "warn" }) {
		t.Errorf("%d failed dials logged %v, want one warn line each", n, lines)
	}
}
