package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/tenant"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func TestParseCredentials(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Credential
		err      string
	}{
		{"two", "# comment\nacme tok1\n\n  beta tok2 forwarder \n", []Credential{{Tenant: "acme", Token: "tok1"}, {Tenant: "beta", Token: "tok2", Forwarder: true}}, ""},
		{"operator", "ops tok3 operator\nfwd tok4 operator forwarder\n", []Credential{{Tenant: "ops", Token: "tok3", Operator: true}, {Tenant: "fwd", Token: "tok4", Forwarder: true, Operator: true}}, ""},
		{"flag twice", "a t operator operator\n", nil, "line 1: flag operator twice"},
		{"five fields", "a t forwarder operator x\n", nil, "line 1: want"},
		{"one field", "acme\n", nil, "line 1: want"},
		{"bad tenant", "Acme tok\n", nil, "line 1: tenant \"Acme\""},
		{"bad flag", "a t admin\n", nil, "line 1: unknown flag"},
		{"duplicate token", "a t\nb t\n", nil, "line 2: the token of line 1 again"},
		{"empty", "# nothing\n", nil, "no credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCredentials([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("got %v, %v", got, err)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("[%d] = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func FuzzParseCredentials(f *testing.F) {
	for _, s := range []string{"acme tok\n", "a b forwarder\n# x\n", "a b operator forwarder\n", "", "a\n", "a b c d\n", "a t\na t\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		creds, err := ParseCredentials(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		for _, c := range creds {
			if !tenant.Valid(c.Tenant) || c.Token == "" || strings.ContainsAny(c.Token, " \t\n") {
				t.Fatalf("bad credential %+v", c)
			}
		}
	})
}

// writeFile writes data and moves the modification time forward, so that a
// rewrite within the file system's time resolution is still seen.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	old, _ := os.Stat(path)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if old != nil {
		mt := old.ModTime().Add(time.Second)
		if err := os.Chtimes(path, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCredentialsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds")
	writeFile(t, path, "acme one\n")
	c, err := LoadCredentials(path, "fixed", true)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(tok string) string {
		cr, ok := c.Lookup(tok)
		if !ok {
			return "-"
		}
		return cr.Tenant
	}
	if lookup("one") != "acme" || lookup("fixed") != tenant.Default || lookup("two") != "-" {
		t.Fatalf("initial set wrong: one=%s fixed=%s two=%s", lookup("one"), lookup("fixed"), lookup("two"))
	}

	writeFile(t, path, "acme two\nbeta three\n")
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if lookup("one") != "-" || lookup("two") != "acme" || lookup("three") != "beta" {
		t.Fatal("reload did not replace the set")
	}

	writeFile(t, path, "not a credential line at all\n")
	err = c.Reload()
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file: %v, want an error naming %s", err, path)
	}
	if lookup("two") != "acme" {
		t.Fatal("a bad reload dropped the current set")
	}

	// Watch polls the file.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Watch(ctx, zaptest.NewLogger(t), 5*time.Millisecond) }()
	writeFile(t, path, "gamma four\n")
	guard := time.Now().Add(2 * time.Minute)
	for lookup("four") != "gamma" {
		if time.Now().After(guard) {
			t.Fatal("Watch never reloaded the file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done

	for _, bad := range []string{filepath.Join(t.TempDir(), "missing"), path + "x"} {
		if _, err := LoadCredentials(bad, "", false); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("LoadCredentials(%s) = %v, want an error naming it", bad, err)
		}
	}
}

// whoami answers GetSandbox with the caller's tenant as the id and the
// client certificate's serial (if any) as the worker.
type whoami struct {
	plumbv1.UnimplementedSandboxServiceServer
}

func (whoami) GetSandbox(ctx context.Context, _ *plumbv1.GetSandboxRequest) (*plumbv1.GetSandboxResponse, error) {
	sb := &plumbv1.Sandbox{Id: tenant.From(ctx)}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			sb.Worker = ti.State.PeerCertificates[0].SerialNumber.String()
		}
	}
	return &plumbv1.GetSandboxResponse{Sandbox: sb}, nil
}

func (whoami) ExecuteStream(_ *plumbv1.ExecuteStreamRequest, s plumbv1.SandboxService_ExecuteStreamServer) error {
	return status.Error(codes.Aborted, tenant.From(s.Context()))
}

// serveWith runs Serve with o (addresses on loopback) until the test ends.
func serveWith(t *testing.T, o Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	if o.GRPCAddr == "" {
		o.GRPCAddr = "127.0.0.1:0"
	}
	o.HTTPAddr, o.ShutdownGrace, o.Logger = "127.0.0.1:0", time.Second, zaptest.NewLogger(t)
	o.Register = func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, whoami{}) }
	o.Ready = func(g, _ net.Addr) { ready <- g.String() }
	go func() { done <- Serve(ctx, o) }()
	select {
	case a := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		return a
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	return ""
}

func TestTenantOfCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds")
	writeFile(t, path, "acme a-tok\nagentd fwd-tok forwarder\n")
	creds, err := LoadCredentials(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveWith(t, Options{Credentials: creds})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tests := []struct {
		name, token, header string
		want                string
		code                codes.Code
	}{
		{"own tenant", "a-tok", "", "acme", codes.OK},
		{"non-forwarder cannot name a tenant", "a-tok", "beta", "acme", codes.OK},
		{"forwarder names the tenant", "fwd-tok", "beta", "beta", codes.OK},
		{"forwarder without header", "fwd-tok", "", "agentd", codes.OK},
		{"bad tenant header", "fwd-tok", "NO/PE", "", codes.InvalidArgument},
		{"unknown token", "nope", "", "", codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(grpccreds.BearerToken(tt.token)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx := ctx
			if tt.header != "" {
				cctx = metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, tt.header)
			}
			c := plumbv1.NewSandboxServiceClient(conn)
			resp, err := c.GetSandbox(cctx, &plumbv1.GetSandboxRequest{})
			if status.Code(err) != tt.code {
				t.Fatalf("GetSandbox: %v, want %v", err, tt.code)
			}
			if err == nil && resp.GetSandbox().GetId() != tt.want {
				t.Fatalf("tenant %q, want %q", resp.GetSandbox().GetId(), tt.want)
			}
			if tt.code != codes.OK {
				return
			}
			// Streams see the same tenant.
			st, err := c.ExecuteStream(cctx, &plumbv1.ExecuteStreamRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			if s, _ := status.FromError(err); s.Code() != codes.Aborted || s.Message() != tt.want {
				t.Fatalf("stream tenant: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestServeRefusesPublicAddressWithoutCredentials(t *testing.T) {
	err := Serve(context.Background(), Options{GRPCAddr: "0.0.0.0:0", HTTPAddr: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "refusing to serve gRPC on 0.0.0.0:0 without credentials") {
		t.Fatalf("err = %v", err)
	}
	// Explicitly insecure, or with a token, it serves.
	serveWith(t, Options{GRPCAddr: "0.0.0.0:0", Insecure: true})
	serveWith(t, Options{GRPCAddr: "0.0.0.0:0", Token: "t"})
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "127.3.0.1:1": true,
		":1": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "example.com:1": false, "bad": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func TestPprofListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	paddr := lis.Addr().String()
	lis.Close()
	serveWith(t, Options{PprofAddr: paddr})
	if body := httpGet(t, "http://"+paddr+"/debug/pprof/"); !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof index: %q", body)
	}
}
