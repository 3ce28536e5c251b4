package sandboxsvc_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// A sandbox belongs to the tenant that created it: it is labelled with
// it, listed only for it, and every other tenant's call finds nothing.
func TestSandboxTenant(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(base, tenant.MetadataKey, name)
	}

	sb, err := c.CreateSandbox(as("acme"), &plumbv1.CreateSandboxRequest{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	if owner, err := wk.Manager.Owner(id); err != nil || owner != "acme" {
		t.Fatalf("owner %q, %v", owner, err)
	}
	if !sandbox.IsOwnLabel(sandbox.LabelTenant) {
		t.Error("the tenant label is not one of the worker's own")
	}

	for _, other := range []context.Context{as("beta"), base} {
		calls := map[string]func() error{
			"GetSandbox": func() error {
				_, err := c.GetSandbox(other, &plumbv1.GetSandboxRequest{SandboxId: id})
				return err
			},
			"Ls": func() error { _, err := c.Ls(other, &plumbv1.LsRequest{SandboxId: id}); return err },
			"Execute": func() error {
				_, err := c.Execute(other, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}})
				return err
			},
			"KeepAlive": func() error {
				_, err := c.KeepAlive(other, &plumbv1.KeepAliveRequest{SandboxId: id})
				return err
			},
			"DeleteSandbox": func() error {
				_, err := c.DeleteSandbox(other, &plumbv1.DeleteSandboxRequest{SandboxId: id})
				return err
			},
			"WatchEgressRequests": func() error {
				s, err := c.WatchEgressRequests(other, &plumbv1.WatchEgressRequestsRequest{SandboxId: id, Timeout: durationpb.New(time.Minute)})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
			"DecideEgress": func() error {
				_, err := c.DecideEgress(other, &plumbv1.DecideEgressRequest{SandboxId: id, Host: "example.com", Port: 443, Allow: true})
				return err
			},
			"DownloadFiles": func() error {
				s, err := c.DownloadFiles(other, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{"/x"}})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
		}
		for name, call := range calls {
			if err := call(); status.Code(err) != codes.NotFound {
				t.Errorf("%s by another tenant: %v, want NOT_FOUND", name, err)
			}
		}
		list, err := c.ListSandboxes(other, &plumbv1.ListSandboxesRequest{})
		if err != nil || len(list.GetSandboxes()) != 0 {
			t.Errorf("another tenant lists %v, %v", list.GetSandboxes(), err)
		}
	}
	list, err := c.ListSandboxes(as("acme"), &plumbv1.ListSandboxesRequest{Labels: map[string]string{"k": "v"}})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetId() != id {
		t.Fatalf("acme lists %v, %v", list.GetSandboxes(), err)
	}
	if _, err := c.Execute(as("acme"), &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	// The owner's egress calls reach the worker: a box without egress has
	// nothing to approve, and bad arguments are named.
	if s, err := c.WatchEgressRequests(as("acme"), &plumbv1.WatchEgressRequestsRequest{SandboxId: id, Timeout: durationpb.New(time.Minute)}); err == nil {
		if _, err = s.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("watch a box without egress: %v, want INVALID_ARGUMENT", err)
		}
	}
	for _, req := range []*plumbv1.DecideEgressRequest{
		{SandboxId: id, Port: 70000, Host: "example.com"},
		{SandboxId: id, Port: 443, Host: "example.com", Scope: 9},
		{SandboxId: id, Host: "example.com", Allow: true},
	} {
		if _, err := c.DecideEgress(as("acme"), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("DecideEgress(%v): %v, want INVALID_ARGUMENT", req, err)
		}
	}
	if _, err := c.DeleteSandbox(as("acme"), &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
}

// A tenant calling with its own credential learns from DescribeWorker only
// its own sandboxes' counts (and the pools' settings, not their use); a
// trusted forwarder (agentd placing sandboxes) sees the worker-wide load.
func TestDescribeWorkerShowsATenantItsOwnCounts(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{
		StateDir: t.TempDir(),
		Pools:    map[string]sandbox.PoolConfig{"": {Size: 1, IdleLifetime: 30 * time.Minute}},
	})
	path := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte("acme a-tok\nbeta b-tok\nagentd f-tok forwarder\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := daemon.LoadCredentials(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	// The same worker behind a server that checks credentials.
	srv := grpc.NewServer(daemon.ServerAuth(creds)...)
	plumbv1.RegisterSandboxServiceServer(srv, sandboxsvc.New(wk.Manager, []string{"runc"}, zaptest.NewLogger(t)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := plumbv1.NewSandboxServiceClient(conn)
	base, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	with := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+token)
	}

	// Wait for the pool's box, so that the forwarder's view has pool use
	// to hide.
	for {
		d, err := c.DescribeWorker(with("f-tok"), &plumbv1.DescribeWorkerRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.GetPools()) == 1 && d.GetPools()[0].GetReady() == 1 {
			break
		}
		if base.Err() != nil {
			t.Fatalf("pool never ready: %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 2 {
		if _, err := c.CreateSandbox(with("a-tok"), &plumbv1.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	mem := wk.Manager.Config().Defaults.MemoryBytes
	tests := []struct {
		name  string
		token string
		n     int32
		mem   int64
		pool  bool // the pool's use is shown
	}{
		{"another tenant", "b-tok", 0, 0, false},
		{"the owner", "a-tok", 2, 2 * mem, false},
		{"a forwarder", "f-tok", 2, 2 * mem, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := c.DescribeWorker(with(tc.token), &plumbv1.DescribeWorkerRequest{})
			if err != nil {
				t.Fatal(err)
			}
			// The worker-wide figure may hold the pool's refill too.
			gotMem := d.GetMemoryReservedBytes()
			if d.GetName() != wk.Name || d.GetSandboxes() != tc.n || gotMem != tc.mem && !(tc.pool && gotMem > tc.mem) {
				t.Errorf("name %q, %d sandboxes, %d bytes reserved; want %q, %d, %d", d.GetName(), d.GetSandboxes(), d.GetMemoryReservedBytes(), wk.Name, tc.n, tc.mem)
			}
			if len(d.GetPools()) != 1 {
				t.Fatalf("pools %v, want one", d.GetPools())
			}
			p := d.GetPools()[0]
			if p.GetSize() != 1 || p.GetIdleLifetime().AsDuration() != 30*time.Minute {
				t.Errorf("pool settings %v", p)
			}
			if used := p.GetHits()+p.GetMisses() > 0; used != tc.pool {
				t.Errorf("pool %v: use shown %v, want %v", p, used, tc.pool)
			}
		})
	}

	// Every tenant's sandboxes, each naming its tenant: for a forwarder
	// only (agentd's operator view).
	lists := []struct {
		name  string
		token string
		all   bool
		n     int
		code  codes.Code
	}{
		{"a tenant asks for all", "a-tok", true, 0, codes.PermissionDenied},
		{"a tenant lists its own", "a-tok", false, 2, codes.OK},
		{"a forwarder lists all", "f-tok", true, 2, codes.OK},
		{"a forwarder lists its own tenant's", "f-tok", false, 0, codes.OK},
	}
	for _, tc := range lists {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.ListSandboxes(with(tc.token), &plumbv1.ListSandboxesRequest{AllTenants: tc.all})
			if status.Code(err) != tc.code {
				t.Fatalf("ListSandboxes: %v, want %v", err, tc.code)
			}
			if err != nil {
				if r := pbconv.Reason(err); r != sandboxsvc.ReasonAllTenantsForbidden {
					t.Errorf("reason %q", r)
				}
				return
			}
			if len(l.GetSandboxes()) != tc.n {
				t.Fatalf("listed %d sandboxes, want %d", len(l.GetSandboxes()), tc.n)
			}
			for _, sb := range l.GetSandboxes() {
				if sb.GetTenant() != "acme" {
					t.Errorf("sandbox %s names tenant %q, want acme", sb.GetId(), sb.GetTenant())
				}
			}
		})
	}
}
