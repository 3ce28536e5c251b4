package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
)

// harness runs the executor against a scripted model server through the
// real go-openai adapter, with the test_kit tools.
type harness struct {
	t      *testing.T
	srv    *modeltest.Server
	store  *agent.MemoryStore
	kit    *tools.TestKit
	runner *agent.Runner
	limits agent.Limits
	mw     func() []agent.Middleware
	extra  []agent.Tool
	model  *openai.Model
}

func modelOf(_ *testing.T, h *harness) *openai.Model { return h.model }

func newHarness(t *testing.T, opts ...agent.RunnerOption) *harness {
	t.Helper()
	h := &harness{t: t, srv: modeltest.New(t), store: agent.NewMemoryStore(), kit: tools.NewTestKit()}
	m, err := openai.New(openai.Config{
		BaseURL: h.srv.URL(), Model: "test-model",
		Retry: openai.RetryConfig{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxAttempts: 2},
	}, openai.WithHTTPClient(h.srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	h.model = m
	h.runner = agent.NewRunner(h.store, func(_ context.Context, req agent.ConfigureRequest) (*agent.Config, error) {
		var mw []agent.Middleware
		if h.mw != nil {
			mw = h.mw()
		}
		return &agent.Config{
			Agent: "main", ModelKey: "smart", ProviderModel: "test-model", Model: m,
			Middleware: mw, Tools: append(h.kit.Tools(), h.extra...), Limits: h.limits,
		}, nil
	}, append([]agent.RunnerOption{agent.WithLogger(zaptest.NewLogger(t))}, opts...)...)
	return h
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []agent.Event
}

func (r *recorder) sink(e agent.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []agent.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agent.Event(nil), r.events...)
}

func (r *recorder) kinds() []string {
	var out []string
	for _, e := range r.all() {
		out = append(out, e.Payload.Kind())
	}
	return out
}
