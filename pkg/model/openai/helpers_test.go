package openai

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// fakeClock records the delays the model asks to sleep and advances its own
// time by them without waiting.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// newTestModel builds a Model against srv with a fake clock and a seeded
// jitter source; mutate adjusts the config first.
func newTestModel(t *testing.T, srv *modeltest.Server, mutate func(*Config), opts ...Option) (*Model, *fakeClock) {
	t.Helper()
	cfg := Config{BaseURL: srv.URL(), APIKey: "sk-test", Model: "test-model"}
	if mutate != nil {
		mutate(&cfg)
	}
	clock := newFakeClock()
	opts = append([]Option{
		WithHTTPClient(srv.Client()),
		WithLogger(zaptest.NewLogger(t)),
		WithClock(clock),
		WithRand(rand.NewPCG(1, 2)),
	}, opts...)
	m, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, clock
}

// recorder collects deltas.
type recorder struct {
	mu     sync.Mutex
	deltas []model.Delta
}

func (r *recorder) on(d model.Delta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, d)
}

func (r *recorder) all() []model.Delta {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.Delta(nil), r.deltas...)
}

// texts returns the text deltas as "attempt:text" strings.
func (r *recorder) texts() []string {
	var out []string
	for _, d := range r.all() {
		if d.Text != "" {
			out = append(out, strconv.Itoa(d.Attempt)+":"+d.Text)
		}
	}
	return out
}

func userRequest(text string) model.Request {
	return model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "You are terse."},
			{Role: model.RoleUser, Content: text},
		},
		Metadata: model.Metadata{RunID: "run-1", AgentPath: "main"},
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
