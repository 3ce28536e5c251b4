package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/internal/daemon/tracing/tracingtest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

var agentdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentd-test")
	if err != nil {
		panic(err)
	}
	agentdBin, err = daemontest.Build(dir, "github.com/plumbhq/plumb/cmd/agentd")
	if err != nil {
		panic(err)
	}
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeArgs are flags that make the daemon listen on free loopback ports and
// log JSON, so tests can find its addresses.
var freeArgs = []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}

func TestBadStartInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknownKey := write("unknown.yaml", "version: 1\nserver:\n  grpc_adr: 127.0.0.1:1\n")
	badAddr := write("badaddr.yaml", "server:\n  grpc_addr: nowhere\n")
	badVersion := write("badversion.yaml", "version: 7\n")
	gateKey := write("gatekey.yaml", "agents:\n  main:\n    interrupt_on:\n      execute: {allowd: [approve]}\n")
	gateTypo := write("gatetypo.yaml", "agents:\n  main:\n    interrupt_on: {exceute: true}\n")
	const pgSecret = "s3cret-pw"
	unreachable := "postgres://agentd:" + pgSecret + "@127.0.0.1:1/plumb?sslmode=disable"
	unreachableConfig := write("unreachable-postgres.yaml", "storage:\n  postgres_dsn: "+unreachable+"\n")

	garbage := write("garbage.pem", "not pem")
	lonely := write("creds", "lonely\n")
	tests := []struct {
		name string
		env  []string
		args []string
		want string // substring of the one-line error
	}{
		{"public address without credentials", nil, []string{"--grpc-addr", "0.0.0.0:0"}, "refusing to serve gRPC on 0.0.0.0:0 without credentials"},
		{"unsupported trace exporter", []string{"OTEL_TRACES_EXPORTER=zipkin"}, nil, `OTEL_TRACES_EXPORTER="zipkin": only otlp (or none) is supported`},
		{"unsupported OTLP protocol", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, nil, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`},
		{"bad TLS certificate", nil, []string{"--tls-cert", garbage, "--tls-key", garbage}, garbage},
		{"TLS certificate without key", nil, []string{"--tls-cert", garbage}, "--tls-key"},
		{"missing client CA", nil, []string{"--tls-cert", garbage, "--tls-key", garbage, "--tls-client-ca", filepath.Join(dir, "ca.pem")}, dir},
		{"bad sandboxd CA", nil, []string{"--sandboxd-tls-ca", garbage}, garbage},
		{"bad credentials file", nil, []string{"--credentials-file", lonely}, lonely + ": line 1"},
		{"bad pprof address", nil, []string{"--pprof-addr", "nowhere"}, "--pprof-addr"},
		{"negative connection limit", nil, []string{"--max-conns-per-peer", "-1"}, "--max-conns-per-peer must not be negative"},
		{"receive limit over the bulk one", nil, []string{"--max-recv-bytes", "999999999"}, "--max-recv-bytes must be at most"},
		{"bad grpc addr", nil, []string{"--grpc-addr", "nowhere"}, "-grpc-addr"},
		{"port out of range", nil, []string{"--http-addr", "127.0.0.1:99999"}, "-http-addr"},
		{"bad log format", nil, []string{"--log-format", "xml"}, "json, console"},
		{"negative grace", nil, []string{"--shutdown-grace", "-1s"}, "negative"},
		{"unknown flag", nil, []string{"--bogus"}, "bogus"},
		{"stray argument", nil, []string{"serve"}, `unexpected argument "serve"`},
		{"bad sandboxd list", nil, []string{"--sandboxd", "127.0.0.1:7071,broken"}, `"broken"`},
		{"bad env value", []string{"AGENTD_SHUTDOWN_GRACE=forever"}, nil, "AGENTD_SHUTDOWN_GRACE"},
		{"missing config", nil, []string{"--config", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{"config is a directory", nil, []string{"--config", dir}, "config file"},
		{"unknown config key", nil, []string{"--config", unknownKey}, "grpc_adr"},
		{"bad config address", nil, []string{"--config", badAddr}, "server.grpc_addr"},
		{"unsupported config version", nil, []string{"--config", badVersion}, "version 7"},
		{"unknown key in a gate", nil, []string{"--config", gateKey}, "agents.main.interrupt_on.execute.allowd: unknown key"},
		{"gate on an unknown tool", nil, []string{"--config", gateTypo}, `agents.main.interrupt_on.exceute: unknown tool "exceute"`},
		{"unreachable postgres", nil, []string{"--postgres-dsn", unreachable}, "storage.postgres_dsn: open thread store postgres://agentd@127.0.0.1:1/plumb: "},
		{"unreachable postgres from env", []string{"AGENTD_POSTGRES_DSN=" + unreachable}, nil, "postgres://agentd@127.0.0.1:1/plumb"},
		{"unreachable postgres in config", nil, []string{"--config", unreachableConfig}, "postgres://agentd@127.0.0.1:1/plumb"},
		{"unparsable postgres dsn", nil, []string{"--postgres-dsn", "postgres://agentd:" + pgSecret + "@127.0.0.1:port/plumb"}, "invalid PostgreSQL DSN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := daemontest.Run(t, agentdBin, tt.env, append(append([]string{}, freeArgs...), tt.args...)...)
			if r.ExitCode != 2 {
				t.Fatalf("exit code = %d, want 2; stderr: %s", r.ExitCode, r.Stderr)
			}
			if !daemontest.OneLine(r.Stderr) || !strings.HasPrefix(r.Stderr, "agentd: ") {
				t.Fatalf("stderr is not one 'agentd: ...' line: %q", r.Stderr)
			}
			if !strings.Contains(r.Stderr, tt.want) {
				t.Fatalf("stderr %q does not mention %q", r.Stderr, tt.want)
			}
			if strings.Contains(r.Stderr, pgSecret) {
				t.Fatalf("stderr shows the PostgreSQL password: %q", r.Stderr)
			}
		})
	}
}

func TestPortInUse(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	busy := lis.Addr().String()
	for _, flag := range []string{"--grpc-addr", "--http-addr"} {
		t.Run(flag, func(t *testing.T) {
			r := daemontest.Run(t, agentdBin, nil, append(append([]string{}, freeArgs...), flag, busy)...)
			if r.ExitCode == 0 {
				t.Fatal("agentd started on a busy port")
			}
			// Logs go to stderr as JSON lines before the failure; the last
			// line is the error.
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "agentd: ") || !strings.Contains(last, busy+" is already in use") {
				t.Fatalf("last stderr line = %q, want the busy address named", last)
			}
			if strings.Contains(r.Stderr, "goroutine ") {
				t.Fatalf("stderr has a stack trace: %s", r.Stderr)
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := daemontest.Run(t, agentdBin, nil, "--version")
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "agentd ") {
		t.Fatalf("--version: exit %d, stdout %q", r.ExitCode, r.Stdout)
	}
	r = daemontest.Run(t, agentdBin, nil, "--help")
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "AGENTD_GRPC_ADDR") || !strings.Contains(r.Stdout, "--sandboxd") {
		t.Fatalf("--help: exit %d, stdout %q", r.ExitCode, r.Stdout)
	}
}

// TestFlagsOverConfigAndDeprecatedKeys: a flag given wins over the config
// file (--sandboxd over a sandbox.address that would not parse), and a
// deprecated key starts agentd with a WARN naming the key that replaces
// it.
func TestFlagsOverConfigAndDeprecatedKeys(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "agentd.yaml")
	if err := os.WriteFile(cfg, []byte("sandbox:\n  address: \"dns:///bad name\"\n  template: {cpu: 1, memory: 512Mi}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := daemontest.Run(t, agentdBin, nil, append(append([]string{}, freeArgs...), "--config", cfg, "--default-backend", "state")...)
	if r.ExitCode != 2 || !strings.Contains(r.Stderr, "sandbox.address") {
		t.Fatalf("without the flag: exit %d, stderr %q; want the config's sandbox.address refused", r.ExitCode, r.Stderr)
	}
	p := daemontest.Start(t, agentdBin, append(append([]string{}, freeArgs...), "--config", cfg, "--default-backend", "state", "--sandboxd", "127.0.0.1:7071")...)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr: %s", code, p.Stderr())
	}
	if e := p.Stderr(); !strings.Contains(e, `"msg":"deprecated config key","key":"sandbox.template.cpu","use":"sandbox.template.cpus"`) {
		t.Fatalf("stderr %q; want a deprecation warning for sandbox.template.cpu", e)
	}
}

func TestServesHealthReflectionAndUnimplemented(t *testing.T) {
	p := daemontest.Start(t, agentdBin, freeArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	names, err := daemontest.ListServices(ctx, p.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection", "plumb.v1.AgentService"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("services = %v, want %v", names, want)
	}

	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", "plumb.v1.AgentService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}

	client := plumbv1.NewAgentServiceClient(conn)
	agents, err := client.ListAgents(ctx, &plumbv1.ListAgentsRequest{})
	if err != nil || len(agents.GetAgents()) == 0 {
		t.Fatalf("ListAgents = %v, %v", agents, err)
	}
	// A method the server does not have answers UNIMPLEMENTED.
	err = conn.Invoke(ctx, "/plumb.v1.AgentService/Teleport", &plumbv1.ListAgentsRequest{}, &plumbv1.ListAgentsResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want UNIMPLEMENTED", err)
	}
}

// TestRequestSizeLimits: a small method's request over --max-recv-bytes
// is RESOURCE_EXHAUSTED, while Run, whose input may be large, takes it.
func TestRequestSizeLimits(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	p := daemontest.Start(t, agentdBin, append(append([]string{}, freeArgs...), "--default-backend", "state", "--max-recv-bytes", "4096")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := plumbv1.NewAgentServiceClient(conn)
	big := strings.Repeat("x", 8192)
	if _, err := client.CreateThread(ctx, &plumbv1.CreateThreadRequest{Metadata: map[string]string{"note": big}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("CreateThread of 8 KiB: %v, want RESOURCE_EXHAUSTED", err)
	}
	stream, err := client.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: big}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Run of 8 KiB: %v, want its events", err)
		}
	}
}

// TestRunWithoutModelFailsClearly: agentd starts with no model endpoint
// configured, and a run then ends with an error event saying what to set.
func TestRunWithoutModelFailsClearly(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	cmd := append(append([]string{}, freeArgs...), "--default-backend", "state")
	p := daemontest.Start(t, agentdBin, cmd...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := plumbv1.NewAgentServiceClient(conn).Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	var last *plumbv1.Event
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = resp.GetEvent()
	}
	e := last.GetError()
	if e == nil || e.GetCode() != "MODEL_NOT_CONFIGURED" || !strings.Contains(e.GetMessage(), "OPENAI_BASE_URL") {
		t.Fatalf("last event = %v, want an error naming what to configure", last)
	}
}

// TestRunRequestsCheckedBeforeRunStarted: with no limits block in the
// config the request caps are the defaults, and a store route's label is
// required up front; each problem is INVALID_ARGUMENT with no events.
func TestRunRequestsCheckedBeforeRunStarted(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	cfg := filepath.Join(t.TempDir(), "agentd.yaml")
	body := "backends:\n  default: state\n  routes:\n    /memories/: {type: store, namespace: [\"{metadata.tenant}\", memories]}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := daemontest.Start(t, agentdBin, append(append([]string{}, freeArgs...), "--config", cfg)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := plumbv1.NewAgentServiceClient(conn)
	req := func(edit func(*plumbv1.RunRequest)) *plumbv1.RunRequest {
		r := &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "hi"}}, Metadata: map[string]string{"tenant": "acme"}}
		edit(r)
		return r
	}
	for _, tt := range []struct {
		name string
		req  *plumbv1.RunRequest
		want string
	}{
		{"max_iterations above the default cap", req(func(r *plumbv1.RunRequest) { r.MaxIterations = 1_000_000 }), "server limit 200"},
		{"timeout above the default cap", req(func(r *plumbv1.RunRequest) { r.Timeout = durationpb.New(100 * time.Hour) }), "server limit 30m0s"},
		{"store route label missing", req(func(r *plumbv1.RunRequest) { r.Metadata = nil }), `metadata key "tenant" is required by backend route /memories/`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := client.Run(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := stream.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("first receive = %v, %v; want INVALID_ARGUMENT mentioning %q and no events", ev, err, tt.want)
			}
		})
	}
	// The same request within the caps and with the label starts (and then
	// fails for want of a model).
	stream, err := client.Run(ctx, req(func(r *plumbv1.RunRequest) { r.MaxIterations, r.Timeout = 200, durationpb.New(30*time.Minute) }))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetRunStarted() == nil {
		t.Fatalf("first event = %v, %v; want run_started", ev, err)
	}
}

func TestSIGTERMDuringStream(t *testing.T) {
	p := daemontest.Start(t, agentdBin, append(append([]string{}, freeArgs...), "--shutdown-grace", "2s")...)
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch message = %v, %v", m, err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The open stream sees NOT_SERVING, then ends when the grace is over.
	sawNotServing := false
	for {
		m, err := watch.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.Canceled {
				break
			}
			t.Fatalf("stream ended with %v", err)
		}
		if m.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			sawNotServing = true
		}
	}
	if !sawNotServing {
		t.Error("stream never reported NOT_SERVING during shutdown")
	}
	if code := p.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr: %s", code, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged: %s", p.Stderr())
	}
}

// TestPostgresThreadsOutliveAgentd: with --postgres-dsn a thread created
// through one agentd is served by the next one, and neither logs the DSN's
// password.
func TestPostgresThreadsOutliveAgentd(t *testing.T) {
	const secret = "not-for-logs" // the test server trusts loopback, so any password connects
	dsn := strings.Replace(pgtest.New(t), "postgres@", "postgres:"+secret+"@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{}, freeArgs...), "--postgres-dsn", dsn, "--default-backend", "state")

	var id string
	for i := range 2 {
		p := daemontest.Start(t, agentdBin, args...)
		conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		client := plumbv1.NewAgentServiceClient(conn)
		if i == 0 {
			resp, err := client.CreateThread(ctx, &plumbv1.CreateThreadRequest{Metadata: map[string]string{"tenant": "acme"}})
			if err != nil {
				t.Fatal(err)
			}
			id = resp.GetThread().GetId()
		} else {
			resp, err := client.GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: id})
			if err != nil || resp.GetThread().GetMetadata()["tenant"] != "acme" {
				t.Fatalf("GetThread after a restart = %v, %v", resp, err)
			}
		}
		conn.Close()
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.Wait(2 * time.Minute); code != 0 {
			t.Fatalf("agentd %d exit code = %d; stderr: %s", i, code, p.Stderr())
		}
		if !strings.Contains(p.Stderr(), `"msg":"threads are kept in PostgreSQL"`) || strings.Contains(p.Stderr(), secret) {
			t.Fatalf("agentd %d: want the PostgreSQL store logged without its password; stderr: %s", i, p.Stderr())
		}
	}
}

// TestTracesExportedAtExit: with an OTLP endpoint in the environment,
// agentd exports its spans there, at the latest when it stops: the Run
// RPC's server span and the run span below it, in one trace, under
// service.name agentd; health checks make none.
func TestTracesExportedAtExit(t *testing.T) {
	c := tracingtest.Start(t, "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	// The model is a scripted OpenAI-compatible server: its calls are
	// traced with the GenAI attributes.
	model := modeltest.New(t)
	model.Script("main", modeltest.Text("hello"))
	t.Setenv("OPENAI_BASE_URL", model.URL())
	t.Setenv("OPENAI_API_KEY", "test-key")
	p := daemontest.Start(t, agentdBin, append(append([]string{}, freeArgs...), "--default-backend", "state")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	stream, err := plumbv1.NewAgentServiceClient(conn).Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr: %s", code, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), `"msg":"tracing is on"`) {
		t.Errorf("no tracing log line: %s", p.Stderr())
	}
	spans := c.Spans("agentd")
	servers, runs := tracingtest.Named(spans, "plumb.v1.AgentService/Run"), tracingtest.Named(spans, "agent.run")
	if len(servers) != 1 || len(runs) != 1 || len(tracingtest.Named(spans, "grpc.health.v1.Health/Check")) != 0 {
		t.Fatalf("spans of agentd: %v (services %v)", spans, c.Services())
	}
	if !bytes.Equal(runs[0].GetTraceId(), servers[0].GetTraceId()) || !bytes.Equal(runs[0].GetParentSpanId(), servers[0].GetSpanId()) {
		t.Errorf("run span %v is not the Run span's child %v", runs[0], servers[0])
	}
	// The model call carries the GenAI semantic conventions' attributes.
	calls := tracingtest.Named(spans, "agent.model_call")
	if len(calls) != 1 {
		t.Fatalf("%d model call spans, want 1: %v", len(calls), spans)
	}
	attrs := map[string]string{}
	ints := map[string]int64{}
	for _, kv := range calls[0].GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		ints[kv.GetKey()] = kv.GetValue().GetIntValue()
	}
	for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.system": "openai"} {
		if attrs[k] != want {
			t.Errorf("model call span %s = %q, want %q (attributes %v)", k, attrs[k], want, calls[0].GetAttributes())
		}
	}
	if attrs["gen_ai.request.model"] == "" || ints["gen_ai.usage.input_tokens"] <= 0 || ints["gen_ai.usage.output_tokens"] <= 0 {
		t.Errorf("model call span attributes %v: want the request model and input and output tokens", calls[0].GetAttributes())
	}
}
