package daemon

import (
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	plumbv1gw "github.com/plumbhq/plumb/gen/gateway/plumb/v1"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/httpapi"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type panicky struct {
	plumbv1.UnimplementedSandboxServiceServer
}

func (panicky) DescribeWorker(context.Context, *plumbv1.DescribeWorkerRequest) (*plumbv1.DescribeWorkerResponse, error) {
	panic("boom")
}

// startServe runs Serve in the background and returns the bound addresses
// and a function that stops it and returns Serve's error.
func startServe(t *testing.T, grace time.Duration) (grpcAddr, httpAddr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{
			Name: "test", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: grace,
			Logger:   zaptest.NewLogger(t),
			Register: func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, panicky{}) },
			Ready:    func(g, h net.Addr) { ready <- [2]string{g.String(), h.String()} },
		})
	}()
	select {
	case a := <-ready:
		return a[0], a[1], func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	return "", "", nil
}

func TestServeEndpoints(t *testing.T) {
	gaddr, haddr, stop := startServe(t, time.Second)
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c := plumbv1.NewSandboxServiceClient(conn)
	if _, err := c.DescribeWorker(ctx, &plumbv1.DescribeWorkerRequest{}); status.Code(err) != codes.Internal {
		t.Errorf("panicking handler: %v, want INTERNAL", err)
	}
	if _, err := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("GetSandbox: %v, want UNIMPLEMENTED", err)
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "plumb.v1.SandboxService"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v", resp, err)
	}
	conn.Close()

	for path, want := range map[string]string{
		"/metrics":      `plumb_grpc_server_handled_total{grpc_code="Unimplemented",grpc_method="GetSandbox",grpc_service="plumb.v1.SandboxService"} 1`,
		"/debug/pprof/": "404 page not found", // pprof has a listener of its own
		"/healthz":      "ok",
	} {
		body := httpGet(t, "http://"+haddr+path)
		if !strings.Contains(body, want) {
			t.Errorf("GET %s lacks %q", path, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve returned %v after a clean shutdown", err)
	}
}

func TestServeShutdownCancelsLongStreams(t *testing.T) {
	gaddr, _, stop := startServe(t, 200*time.Millisecond)
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Serve did not return after the grace period")
	}
	for {
		if _, err := watch.Recv(); err != nil {
			break
		}
	}
}

func TestServeBusyPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	err = Serve(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: lis.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "HTTP address "+lis.Addr().String()+" is already in use") {
		t.Fatalf("err = %v", err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestBearerToken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: time.Second, Token: "s3cret",
			Register: func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, panicky{}) },
			Ready:    func(g, _ net.Addr) { ready <- g.String() },
		})
	}()
	addr := <-ready
	call := func(opts ...grpc.DialOption) (error, error) {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, rpcErr := plumbv1.NewSandboxServiceClient(conn).GetSandbox(ctx, &plumbv1.GetSandboxRequest{})
		_, healthErr := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return rpcErr, healthErr
	}
	tests := []struct {
		name string
		opts []grpc.DialOption
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []grpc.DialOption{grpc.WithPerRPCCredentials(grpccreds.BearerToken("guess"))}, codes.Unauthenticated},
		{"right token", []grpc.DialOption{grpc.WithPerRPCCredentials(grpccreds.BearerToken("s3cret"))}, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rpcErr, healthErr := call(tt.opts...)
			if status.Code(rpcErr) != tt.want {
				t.Fatalf("GetSandbox: %v, want %v", rpcErr, tt.want)
			}
			if healthErr != nil {
				t.Fatalf("health must not need a token: %v", healthErr)
			}
		})
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tok")
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(good, []byte("  abc\n"), 0o600)
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if tok, err := ReadToken(good); err != nil || tok != "abc" {
		t.Fatalf("ReadToken = %q, %v", tok, err)
	}
	if tok, err := ReadToken(""); err != nil || tok != "" {
		t.Fatalf("no file: %q, %v", tok, err)
	}
	for _, p := range []string{empty, filepath.Join(dir, "missing")} {
		if _, err := ReadToken(p); err == nil {
			t.Errorf("ReadToken(%s) accepted", p)
		}
	}
}

// TestServeHTTPAPI: the HTTP API goes through the gRPC server's
// interceptors (the token check, panics), and refuses every call when the
// daemon cannot authenticate HTTP callers.
func TestServeHTTPAPI(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Options
		token    string
		hdr      map[string]string // request headers (Content-Type: application/json when unset)
		host     string            // the Host header ("" = the address)
		wantCode int               // HTTP status of GetSandbox (UNIMPLEMENTED in panicky)
		reason   string
	}{
		{name: "token", o: Options{Token: "tok"}, token: "tok", wantCode: http.StatusNotImplemented},
		{name: "wrong token", o: Options{Token: "tok"}, token: "nope", wantCode: http.StatusUnauthorized},
		{name: "no token", o: Options{Token: "tok"}, wantCode: http.StatusUnauthorized},
		{name: "no credentials, loopback", wantCode: http.StatusNotImplemented},
		{name: "no credentials, localhost", host: "localhost:1234", wantCode: http.StatusNotImplemented},
		// A cross-site form, or a page that rebound its name to 127.0.0.1.
		{name: "no credentials, form post", hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, wantCode: http.StatusForbidden, reason: httpapi.ReasonCSRF},
		{name: "no credentials, text/plain", hdr: map[string]string{"Content-Type": "text/plain"}, wantCode: http.StatusForbidden, reason: httpapi.ReasonCSRF},
		{name: "no credentials, rebound name", host: "evil.example:9071", wantCode: http.StatusForbidden, reason: httpapi.ReasonHost},
		{name: "token, form post", o: Options{Token: "tok"}, token: "tok", hdr: map[string]string{"Content-Type": "text/plain"}, wantCode: http.StatusNotImplemented},
		{name: "no credentials, HTTP beyond loopback", o: Options{HTTPAddr: "0.0.0.0:0"}, wantCode: http.StatusUnauthorized, reason: httpapi.ReasonHTTPAPIRefuse},
		{name: "client certificates only", o: Options{ClientCertRequired: true}, token: "tok", wantCode: http.StatusUnauthorized, reason: httpapi.ReasonHTTPAPIRefuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan string, 1)
			done := make(chan error, 1)
			o := tc.o
			o.Name, o.GRPCAddr, o.HTTPAddr, o.ShutdownGrace = "test", "127.0.0.1:0", cmp.Or(o.HTTPAddr, "127.0.0.1:0"), time.Second
			o.Logger = zaptest.NewLogger(t)
			o.Register = func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, panicky{}) }
			o.Ready = func(_, h net.Addr) { ready <- h.String() }
			o.API = &httpapi.Service{
				Services: []protoreflect.ServiceDescriptor{plumbv1.File_plumb_v1_sandbox_proto.Services().ByName("SandboxService")},
				Register: plumbv1gw.RegisterSandboxServiceHandler,
			}
			go func() { done <- Serve(ctx, o) }()
			var haddr string
			select {
			case haddr = <-ready:
			case err := <-done:
				cancel()
				t.Fatalf("Serve: %v", err)
			}
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
			}()
			_, port, _ := net.SplitHostPort(haddr)
			base := "http://127.0.0.1:" + port
			post := func(method string) (int, string) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/"+method, strings.NewReader(`{}`))
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				req.Header.Set("Content-Type", "application/json")
				for k, v := range tc.hdr {
					req.Header.Set(k, v)
				}
				if tc.host != "" {
					req.Host = tc.host
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			code, body := post("GetSandbox")
			if code != tc.wantCode || !strings.Contains(body, `"reason":"`+tc.reason) {
				t.Fatalf("GetSandbox: HTTP %d %s, want %d with reason %q", code, body, tc.wantCode, tc.reason)
			}
			if tc.wantCode == http.StatusNotImplemented {
				// A panic in the handler is INTERNAL, as over gRPC.
				if code, body := post("DescribeWorker"); code != http.StatusInternalServerError || !strings.Contains(body, `"code":13`) {
					t.Fatalf("DescribeWorker: HTTP %d %s", code, body)
				}
			}
			// /healthz and /metrics stay where they were.
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz: HTTP %d", resp.StatusCode)
			}
		})
	}
}
