package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"go.uber.org/zap/zaptest"
)

// servedCore is agentd on SQLite served as cmd/agentd serves it: the
// service config of ServiceConfig with the usage metrics on a registry.
type servedCore struct {
	model *modeltest.Server
	reg   *prometheus.Registry
	c     plumbv1.AgentServiceClient
	core  *Agentd
}

func serveCore(t *testing.T, extra string) *servedCore {
	t.Helper()
	s := &servedCore{model: modeltest.New(t), reg: prometheus.NewRegistry()}
	doc := fmt.Sprintf(`version: 2
storage: {sqlite_path: %s}
models:
  scripted: {base_url: %s, api_key_env: TEST_MODEL_KEY, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
`, filepath.Join(t.TempDir(), "agentd.db"), s.model.URL())
	cfg, err := Parse([]byte(doc + extra))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t)
	core, err := Build(context.Background(), cfg, Options{Logger: lg, Env: func(k string) string {
		if k == "TEST_MODEL_KEY" {
			return "test-key"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.core = core
	scfg := core.ServiceConfig("")
	scfg.Retention = nil
	core.MeterUsage(&scfg, s.reg)
	svc, err := agentsvc.New(scfg, agentsvc.WithLogger(lg))
	if err != nil {
		core.Close()
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(daemon.ServerAuth(nil)...)
	plumbv1.RegisterAgentServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.c = plumbv1.NewAgentServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Shutdown(ctx)
		gs.Stop()
		<-served
		core.Close()
	})
	return s
}

// run sends a Run of tenant and returns its events and the stream's error.
func (s *servedCore) run(t *testing.T, tenantName, text string) ([]*plumbv1.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a hang guard
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, tenantName)
	rs, err := s.c.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: text}}})
	if err != nil {
		return nil, err
	}
	var evs []*plumbv1.Event
	for {
		m, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, m.GetEvent())
	}
}

// wantRefused fails t unless err is RESOURCE_EXHAUSTED, QUOTA_EXCEEDED,
// naming quota, before any event.
func wantRefused(t *testing.T, evs []*plumbv1.Event, err error, quota string) {
	t.Helper()
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if len(evs) != 0 || st.Code() != codes.ResourceExhausted || info.GetReason() != agentsvc.ReasonQuotaExceeded ||
		info.GetMetadata()["quota"] != quota || info.GetMetadata()["limit"] == "" || info.GetMetadata()["current"] == "" {
		t.Fatalf("%d events, %v (ErrorInfo %v); want RESOURCE_EXHAUSTED QUOTA_EXCEEDED naming %s before any event", len(evs), err, info, quota)
	}
}

// TestQuotasAndUsageMetrics: on one agentd on SQLite, a tenant whose first
// model call crosses tokens_per_day has its run end FAILED with
// QUOTA_EXCEEDED before the next call, and its next Run refused naming
// tokens_per_day; runs_per_minute refuses the run after the limit; a
// tenant without quotas is not limited; plumb_tokens_total and
// plumb_runs_total count per tenant.
func TestQuotasAndUsageMetrics(t *testing.T) {
	s := serveCore(t, `quotas:
  tenants:
    acme: {tokens_per_day: 1}
    gamma: {runs_per_minute: 1}
`)
	s.model.Script("main",
		modeltest.Calls(mcall("c1", "write_todos", `{"todos":[{"content":"a","status":"pending"}]}`)), // acme: crosses the quota
		modeltest.Text("gamma done"),
		modeltest.Text("beta done"), modeltest.Text("beta again"),
	)
	evs, err := s.run(t, "acme", "work")
	if err != nil || len(evs) == 0 || evs[len(evs)-1].GetError().GetCode() != "QUOTA_EXCEEDED" {
		t.Fatalf("acme's run: %v, events %v; want an error event QUOTA_EXCEEDED", err, evs)
	}
	if n := s.model.Count("main"); n != 1 {
		t.Fatalf("model calls = %d; want 1 (no call after the crossing)", n)
	}
	evs, err = s.run(t, "acme", "more")
	wantRefused(t, evs, err, "tokens_per_day")

	if evs, err := s.run(t, "gamma", "one"); err != nil || evs[len(evs)-1].GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("gamma's first run: %v, %v", err, evs)
	}
	evs, err = s.run(t, "gamma", "two")
	wantRefused(t, evs, err, "runs_per_minute")

	for i := range 2 {
		if evs, err := s.run(t, "beta", "free"); err != nil || evs[len(evs)-1].GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("beta's run %d: %v, %v", i, err, evs)
		}
	}

	runs := []struct {
		tenant, status string
		want           float64
	}{{"acme", "FAILED", 1}, {"gamma", "COMPLETED", 1}, {"beta", "COMPLETED", 2}, {"acme", "COMPLETED", 0}}
	for _, r := range runs {
		if got := counterValue(t, s.reg, "plumb_runs_total", map[string]string{"tenant": r.tenant, "status": r.status}); got != r.want {
			t.Errorf("plumb_runs_total{tenant=%s,status=%s} = %v; want %v", r.tenant, r.status, got, r.want)
		}
	}
	for _, tn := range []string{"acme", "gamma", "beta"} {
		for _, kind := range []string{"prompt", "completion"} {
			if got := counterValue(t, s.reg, "plumb_tokens_total", map[string]string{"tenant": tn, "model": "scripted-model", "kind": kind}); got <= 0 {
				t.Errorf("plumb_tokens_total{tenant=%s,kind=%s} = %v; want > 0", tn, kind, got)
			}
		}
	}
}

// counterValue is the value of the counter series of name with labels in
// reg (0 when there is none).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
