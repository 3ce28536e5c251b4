package sandboxsvc_test

import (
	"context"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWarmPoolReported: DescribeWorker reports the pool's state, and the
// pool metrics count a hit (a create served from the pool) and a miss (a
// create that found it empty: with a quota of one, the pool cannot refill
// while the claimed box lives).
func TestWarmPoolReported(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{
		MaxSandboxes: 1, StateDir: t.TempDir(),
		Pools: map[string]sandbox.PoolConfig{"": {Size: 1, IdleLifetime: 30 * time.Minute}},
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sandboxsvc.NewPoolCollector(wk.Manager))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	describe := func() *plumbv1.WarmPool {
		t.Helper()
		d, err := wk.Client.DescribeWorker(ctx, &plumbv1.DescribeWorkerRequest{})
		if err != nil || len(d.GetPools()) != 1 {
			t.Fatalf("describe: %v, %v; want one pool", d, err)
		}
		return d.GetPools()[0]
	}
	for p := describe(); p.GetReady() != 1; p = describe() {
		if ctx.Err() != nil {
			t.Fatalf("pool never ready: %v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := describe()
	if p.GetTemplate() != "" || p.GetSize() != 1 || p.GetIdleLifetime().AsDuration() != 30*time.Minute || p.GetHits() != 0 || p.GetMemoryReservedBytes() != 256<<20 {
		t.Fatalf("ready pool: %v", p)
	}

	if _, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second create under a quota of one: %v", err)
	}
	if p := describe(); p.GetHits() != 1 || p.GetMisses() != 1 || p.GetReady() != 0 {
		t.Fatalf("pool after a hit and a miss: %v", p)
	}
	want := map[string]float64{
		"plumb_sandbox_pool_hits_total": 1, "plumb_sandbox_pool_misses_total": 1,
		"plumb_sandbox_pool_ready": 0, "plumb_sandbox_pool_size": 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "template" || l[0].GetValue() != "" {
				t.Errorf("%s labels %v, want template=\"\"", mf.GetName(), l)
			}
			got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
