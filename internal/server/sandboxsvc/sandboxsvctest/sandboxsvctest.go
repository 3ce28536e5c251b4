// Package sandboxsvctest starts a real sandbox worker for tests: a
// sandbox.Manager on the local Docker Engine (pkg/sandbox/sandboxtest)
// served as SandboxService on a loopback port.
package sandboxsvctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Worker is a real sandbox worker for tests: a Manager on the local engine
// served as SandboxService on a loopback port.
type Worker struct {
	// Manager is the worker's sandbox manager.
	Manager *sandbox.Manager
	// Conn is a client connection to the worker.
	Conn *grpc.ClientConn
	// Client is a SandboxService client on Conn.
	Client plumbv1.SandboxServiceClient
	// Name is the worker name (unique per call).
	Name string
	// Addr is the worker's gRPC address.
	Addr string
}

// StartWorker starts a worker whose sandboxes default to the busybox test
// image; cfg may override defaults (Worker, Agent, Defaults.Image and the
// test label are filled in). Everything it created is removed, and checked
// to be gone, when the test ends. opts are added to the worker's gRPC
// server options (tracing's stats handler).
func StartWorker(t testing.TB, cfg sandbox.Config, opts ...grpc.ServerOption) *Worker {
	t.Helper()
	cli := sandboxtest.Docker(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	if cfg.Worker == "" {
		cfg.Worker = "w" + run
	}
	cfg.Agent = sandboxtest.Agent(t)
	if cfg.Defaults.Image == "" {
		cfg.Defaults.Image = sandboxtest.Image(t, cli)
	}
	if cfg.Defaults.MemoryBytes == 0 {
		cfg.Defaults.MemoryBytes = 256 << 20
	}
	cfg.ExtraLabels = sandboxtest.Labels(run)
	lg := zaptest.NewLogger(t)
	m, err := sandbox.NewManager(context.Background(), cli, cfg, sandbox.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	// No credentials: like a loopback sandboxd, every caller may name its
	// tenant in plumb-tenant. Message limits and codec as sandboxd's.
	sopts := append(daemon.ServerAuth(nil), daemon.MessageLimits(daemon.DefaultMaxMessageBytes, daemon.DefaultMaxRecvBytes, sandboxsvc.BulkMethods)...)
	sopts = append(sopts, grpc.ForceServerCodecV2(sandboxsvc.Codec()))
	srv := grpc.NewServer(append(sopts, opts...)...)
	svc := sandboxsvc.New(m, []string{"runc"}, lg)
	plumbv1.RegisterSandboxServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		// Resumable executions still running are killed, as sandboxd's
		// shutdown kills them, before their sandboxes go.
		svc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Every container this worker made is hardened.
		if cs, _, err := sandboxtest.Leftovers(ctx, cli, sandboxtest.Label(sandboxtest.LabelTest, run)); err == nil {
			for _, id := range cs {
				// An egress proxy runs our binary, not box code, under a
				// profile of its own (pkg/sandbox/egress.go).
				ci, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
				switch {
				case cerrdefs.IsNotFound(err):
					continue // removed since the listing (a warm pool's box replaced)
				case err != nil:
					t.Errorf("inspect %s: %v", id, err)
					continue
				case ci.Container.Config.Labels[sandbox.LabelEgressFor] != "":
					continue
				}
				sandboxtest.AssertInspectHardened(t, ci)
			}
		}
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("delete sandboxes: %v", err)
		}
		// Named volumes outlive sandboxes; the test's go with it.
		if vl, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", sandbox.LabelVolume).Add("label", sandbox.LabelWorker+"="+cfg.Worker)}); err == nil {
			for _, v := range vl.Items {
				if err := m.DeleteVolume(ctx, v.Labels[sandbox.LabelTenant], v.Labels[sandbox.LabelVolume]); err != nil {
					t.Errorf("delete volume %s: %v", v.Name, err)
				}
			}
		}
		m.Close()
		cs, vs, err := sandboxtest.Leftovers(ctx, cli, sandboxtest.Label(sandboxtest.LabelTest, run))
		if err != nil || len(cs)+len(vs) > 0 {
			t.Errorf("leftovers: containers %v volumes %v (%v)", cs, vs, err)
		}
	})
	return &Worker{Manager: m, Conn: conn, Client: plumbv1.NewSandboxServiceClient(conn), Name: cfg.Worker, Addr: lis.Addr().String()}
}
