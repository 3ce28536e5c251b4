package sandboxsvc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// asTenant is ctx calling as tenant name.
func asTenant(ctx context.Context, name string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, name)
}

// wantTenantQuota fails unless err is RESOURCE_EXHAUSTED quota_exceeded
// whose ErrorInfo and message name the per-tenant limit and the tenant.
func wantTenantQuota(t *testing.T, err error, tenantName, limit string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || pbconv.Reason(err) != string(sandbox.CodeQuota) ||
		!strings.Contains(st.Message(), limit) || !strings.Contains(st.Message(), tenantName) {
		t.Fatalf("create: %v (reason %q), want RESOURCE_EXHAUSTED %s naming %q and %q", err, pbconv.Reason(err), sandbox.CodeQuota, tenantName, limit)
	}
	var got string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			got = info.GetMetadata()["limit"]
		}
	}
	if got != limit {
		t.Fatalf("ErrorInfo limit = %q, want %q", got, limit)
	}
}

// One tenant at its per-tenant limits (sandboxes, memory, CPUs) is
// refused while another still creates, and a delete gives the share back.
func TestPerTenantLimits(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Policy: sandbox.Policy{
		PerTenant: sandbox.TenantLimits{MaxSandboxes: 2, MaxMemoryBytes: 512 << 20, MaxCPUs: 1.5},
	}})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(who string, mem int64, cpus float64) (string, error) {
		sb, err := c.CreateSandbox(asTenant(ctx, who), &plumbv1.CreateSandboxRequest{
			Resources: &plumbv1.Resources{MemoryBytes: mem, Cpus: cpus},
		})
		return sb.GetSandbox().GetId(), err
	}

	if _, err := create("acme", 128<<20, 0.5); err != nil {
		t.Fatal(err)
	}
	second, err := create("acme", 128<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = create("acme", 64<<20, 0.1)
	wantTenantQuota(t, err, "acme", "per_tenant.max_sandboxes")
	if _, err := create("beta", 128<<20, 1); err != nil {
		t.Fatalf("beta refused while acme is at its limit: %v", err)
	}

	if _, err := c.DeleteSandbox(asTenant(ctx, "acme"), &plumbv1.DeleteSandboxRequest{SandboxId: second}); err != nil {
		t.Fatal(err)
	}
	_, err = create("acme", 400<<20, 0.5) // 128 MiB held + 400 MiB > 512 MiB
	wantTenantQuota(t, err, "acme", "per_tenant.max_memory_bytes")
	_, err = create("acme", 128<<20, 1.25) // 0.5 held + 1.25 > 1.5 cores
	wantTenantQuota(t, err, "acme", "per_tenant.max_cpus")
	if _, err := create("acme", 128<<20, 1); err != nil {
		t.Fatalf("acme after a delete gave its share back: %v", err)
	}
	if n, _ := wk.Manager.Usage(); n != 3 {
		t.Fatalf("%d live sandboxes, want 3 (refused creates hold nothing)", n)
	}
}

// A warm-pool claim is a create for the tenant: a tenant at its limit
// does not take the pool's box, which still serves another tenant.
func TestPerTenantLimitsAtPoolClaim(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{
		StateDir: t.TempDir(),
		Pools:    map[string]sandbox.PoolConfig{"": {Size: 1, IdleLifetime: 30 * time.Minute}},
		Policy:   sandbox.Policy{PerTenant: sandbox.TenantLimits{MaxSandboxes: 1}},
	})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitReady := func() {
		t.Helper()
		for {
			d, err := c.DescribeWorker(ctx, &plumbv1.DescribeWorkerRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.GetPools()) == 1 && d.GetPools()[0].GetReady() == 1 {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("pool never ready: %v", d.GetPools())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitReady()
	if _, err := c.CreateSandbox(asTenant(ctx, "acme"), &plumbv1.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	waitReady()
	_, err := c.CreateSandbox(asTenant(ctx, "acme"), &plumbv1.CreateSandboxRequest{})
	wantTenantQuota(t, err, "acme", "per_tenant.max_sandboxes")
	if p := wk.Manager.Pools(); len(p) != 1 || p[0].Ready != 1 || p[0].Hits != 1 {
		t.Fatalf("pool after a refused claim: %+v, want its box still ready and one hit", p)
	}
	sb, err := c.CreateSandbox(asTenant(ctx, "beta"), &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("beta refused while acme is at its limit: %v", err)
	}
	if owner, err := wk.Manager.Owner(sb.GetSandbox().GetId()); err != nil || owner != "beta" {
		t.Fatalf("owner %q, %v", owner, err)
	}
}

// Concurrent creates of one tenant count each other while they run: at a
// limit of one sandbox, exactly one of them is made.
func TestPerTenantLimitsConcurrentCreates(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Policy: sandbox.Policy{
		PerTenant: sandbox.TenantLimits{MaxSandboxes: 1},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := wk.Client.CreateSandbox(asTenant(ctx, "acme"), &plumbv1.CreateSandboxRequest{})
			errs <- err
		}()
	}
	made := 0
	for range n {
		err := <-errs
		if err == nil {
			made++
			continue
		}
		wantTenantQuota(t, err, "acme", "per_tenant.max_sandboxes")
	}
	if made != 1 {
		t.Fatalf("%d of %d concurrent creates made, want 1 under per_tenant.max_sandboxes=1", made, n)
	}
	if n, _ := wk.Manager.Usage(); n != 1 {
		t.Fatalf("%d live sandboxes, want 1", n)
	}
}
