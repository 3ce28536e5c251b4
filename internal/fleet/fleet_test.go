package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// dnsServer answers A queries for the names in its table over UDP on
// loopback (AAAA and unknown names get an empty answer), so a real
// net.Resolver can resolve worker names in tests.
type dnsServer struct {
	pc   net.PacketConn
	mu   sync.Mutex
	recs map[string][]net.IP // by FQDN ("workers.test.")
	wg   sync.WaitGroup
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{pc: pc, recs: map[string][]net.IP{}}
	s.wg.Go(s.serve)
	t.Cleanup(func() { pc.Close(); s.wg.Wait() })
	return s
}

// set makes name resolve to ips.
func (s *dnsServer) set(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v []net.IP
	for _, ip := range ips {
		v = append(v, net.ParseIP(ip).To4())
	}
	s.recs[name+"."] = v
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var q dnsmessage.Message
		if err := q.Unpack(buf[:n]); err != nil || len(q.Questions) != 1 {
			continue
		}
		qq := q.Questions[0]
		resp := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RecursionAvailable: true},
			Questions: q.Questions,
		}
		s.mu.Lock()
		ips, ok := s.recs[qq.Name.String()]
		s.mu.Unlock()
		if !ok {
			resp.RCode = dnsmessage.RCodeNameError
		}
		if qq.Type == dnsmessage.TypeA {
			for _, ip := range ips {
				resp.Answers = append(resp.Answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
					Body:   &dnsmessage.AResource{A: [4]byte(ip)},
				})
			}
		}
		out, err := resp.Pack()
		if err != nil {
			continue
		}
		_, _ = s.pc.WriteTo(out, from)
	}
}

// resolver sends every query of a pure-Go resolver to s.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.pc.LocalAddr().String())
	}}
}

// fleetWorker is a real sandbox worker (a Manager on the local engine
// served as SandboxService) on a fixed loopback address, which can be
// stopped and started again on that address with the same Manager, as a
// sandboxd restart re-adopts its boxes.
type fleetWorker struct {
	t    *testing.T
	name string
	addr string
	m    *sandbox.Manager

	mu  sync.Mutex
	srv *grpc.Server
}

func startFleetWorker(t *testing.T, addr string, cfg sandbox.Config) *fleetWorker {
	t.Helper()
	cli := sandboxtest.Docker(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	cfg.Worker = "w" + run
	cfg.Agent = sandboxtest.Agent(t)
	cfg.Defaults.Image = sandboxtest.Image(t, cli)
	cfg.Defaults.MemoryBytes = 64 << 20
	cfg.ExtraLabels = sandboxtest.Labels(run)
	sandboxtest.SweepOnCleanup(t, cli, sandboxtest.LabelTest, run)
	m, err := sandbox.NewManager(context.Background(), cli, cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	w := &fleetWorker{t: t, name: cfg.Worker, addr: addr, m: m}
	w.start()
	t.Cleanup(func() {
		w.stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("delete sandboxes: %v", err)
		}
		m.Close()
	})
	return w
}

func (w *fleetWorker) start() {
	w.t.Helper()
	lis, err := net.Listen("tcp", w.addr)
	if err != nil {
		w.t.Fatal(err)
	}
	// No credentials: every caller is trusted and names its tenant in
	// plumb-tenant, as agentd does.
	srv := grpc.NewServer(daemon.ServerAuth(nil)...)
	plumbv1.RegisterSandboxServiceServer(srv, sandboxsvc.New(w.m, []string{"runc"}, zaptest.NewLogger(w.t)))
	go func() { _ = srv.Serve(lis) }()
	w.mu.Lock()
	w.srv = srv
	w.mu.Unlock()
}

func (w *fleetWorker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv != nil {
		w.srv.Stop()
		w.srv = nil
	}
}

// freePort finds a port free on every host of hosts.
func freePort(t *testing.T, hosts ...string) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		ok := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, port))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every loopback address")
	return ""
}

// TestFleetByDNS runs three real workers on 127.0.0.2-4 behind one DNS
// name: placement spreads by capacity, every call reaches the owner, a
// stopped worker fails its own sandboxes with UNAVAILABLE naming it while
// the others keep working, and it is used again once it is back on the
// same address.
func TestFleetByDNS(t *testing.T) {
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port := freePort(t, hosts...)
	dns := startDNS(t)
	dns.set("workers.test", hosts[0], hosts[1])
	var ws []*fleetWorker
	for _, h := range hosts {
		ws = append(ws, startFleetWorker(t, net.JoinHostPort(h, port), sandbox.Config{MaxSandboxes: 2}))
	}
	byName := map[string]*fleetWorker{}
	for _, w := range ws {
		byName[w.name] = w
	}
	p, err := New(Config{
		Targets:  []string{"dns:///workers.test:" + port},
		Resolver: dns.resolver(),
		Refresh:  -1, // on demand only: the test drives refreshes
		Deadline: 5 * time.Second,
		Logger:   zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // hang guard
	defer cancel()

	if !p.Refresh(ctx) {
		t.Fatal("a worker did not answer")
	}
	if got, want := p.Workers(), sortedNames(ws[0], ws[1]); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("workers after the first resolve = %v, want %v", got, want)
	}
	// The third worker joins the DNS name.
	dns.set("workers.test", hosts...)
	if !p.Refresh(ctx) {
		t.Fatal("a worker did not answer")
	}
	if got := p.Workers(); len(got) != 3 {
		t.Fatalf("workers after the second resolve = %v, want 3", got)
	}

	// Six sandboxes on three workers of two slots each: two per worker.
	var ids []string
	per := map[string]int{}
	for range 6 {
		sb, err := p.Create(ctx, &plumbv1.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if sandbox.WorkerOf(sb.GetId()) != sb.GetWorker() {
			t.Fatalf("sandbox %s names worker %q, reported %q", sb.GetId(), sandbox.WorkerOf(sb.GetId()), sb.GetWorker())
		}
		ids = append(ids, sb.GetId())
		per[sb.GetWorker()]++
	}
	for _, w := range ws {
		if per[w.name] != 2 {
			t.Fatalf("placement = %v, want 2 on each worker", per)
		}
	}
	exec := func(id string) error {
		bk, err := p.Backend(ctx, id, "/workspace")
		if err != nil {
			return err
		}
		r, err := bk.Execute(ctx, backend.ExecuteRequest{Command: "echo ok"})
		if err == nil && r.Output != "ok\n" {
			t.Fatalf("execute in %s: %q", id, r.Output)
		}
		return err
	}
	for _, id := range ids {
		if err := exec(id); err != nil {
			t.Fatal(err)
		}
	}

	// Stop one worker: only its sandboxes fail, with UNAVAILABLE naming it.
	lost := byName[sandbox.WorkerOf(ids[0])]
	lost.stop()
	for _, id := range ids {
		err := exec(id)
		if sandbox.WorkerOf(id) != lost.name {
			if err != nil {
				t.Fatalf("sandbox %s on a live worker: %v", id, err)
			}
			continue
		}
		if backend.CodeOf(err) != backend.CodeUnavailable || !strings.Contains(err.Error(), lost.name) {
			t.Fatalf("sandbox %s on the stopped worker: %v; want unavailable naming %s", id, err, lost.name)
		}
		c, cerr := p.Client(ctx, id)
		if cerr != nil {
			t.Fatal(cerr)
		}
		_, gerr := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: id})
		if status.Code(gerr) != codes.Unavailable || !strings.Contains(gerr.Error(), lost.name) {
			t.Fatalf("GetSandbox on the stopped worker: %v", gerr)
		}
	}
	// Placement skips it: two free slots are left on the others... none,
	// all four are full, so a new sandbox cannot be placed.
	if _, err := p.Create(ctx, &plumbv1.CreateSandboxRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("create with the live workers full: %v", err)
	}

	// Back on the same address: its sandboxes work again.
	lost.start()
	for _, id := range ids {
		if err := exec(id); err != nil {
			t.Fatalf("sandbox %s after its worker came back: %v", id, err)
		}
	}

	// Unknown worker in an id: NOT_FOUND; not an id: INVALID_ARGUMENT.
	if _, err := p.Backend(ctx, "sbx-nosuchworker-abc", "/"); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "nosuchworker") {
		t.Fatalf("unknown worker: %v", err)
	}
	if _, err := p.Backend(ctx, "not-an-id", "/"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad id: %v", err)
	}

	// A worker whose address leaves DNS: its sandboxes are UNAVAILABLE
	// (it was a member), the others still work.
	gone := ws[2]
	dns.set("workers.test", hosts[0], hosts[1])
	p.Refresh(ctx)
	for _, id := range ids {
		err := exec(id)
		if sandbox.WorkerOf(id) == gone.name {
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), gone.name) {
				t.Fatalf("sandbox %s of a worker no longer resolved: %v", id, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if sandbox.WorkerOf(id) != gone.name {
			if err := p.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func sortedNames(ws ...*fleetWorker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.name)
	}
	if len(out) == 2 && out[0] > out[1] {
		out[0], out[1] = out[1], out[0]
	}
	return out
}
