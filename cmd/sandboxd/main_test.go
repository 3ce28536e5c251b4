package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/internal/daemon/tracing/tracingtest"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var sandboxdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-test")
	if err != nil {
		panic(err)
	}
	sandboxdBin, err = daemontest.Build(dir, "github.com/plumbhq/plumb/cmd/sandboxd")
	if err != nil {
		panic(err)
	}
	// sandboxd loads sandbox-agent from beside its own binary.
	if _, err := daemontest.BuildStatic(dir, "github.com/plumbhq/plumb/cmd/sandbox-agent"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var freeArgs = []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}

func TestBadStartInputs(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"bad worker name", nil, []string{"--worker", "no spaces"}, `invalid worker name "no spaces"`},
		{"bad worker env", []string{"SANDBOXD_WORKER=a/b"}, nil, `invalid worker name "a/b"`},
		{"bad grpc addr", nil, []string{"--grpc-addr", ":port"}, "-grpc-addr"},
		{"missing agent binary", nil, []string{"--agent-binary", "/nonexistent/sandbox-agent"}, "sandbox-agent binary"},
		{"missing egress proxy binary", nil, []string{"--egress-proxy-binary", "/nonexistent/plumb-egress"}, "plumb-egress binary"},
		{"missing egress upstream CA", nil, []string{"--egress-upstream-ca", "/nonexistent/ca.pem"}, "--egress-upstream-ca"},
		{"egress upstream CA without a certificate", nil, []string{"--egress-upstream-ca", "testdata/pool.yaml"}, "no PEM certificate"},
		{"public address without credentials", nil, []string{"--grpc-addr", "0.0.0.0:0"}, "refusing to serve gRPC on 0.0.0.0:0 without credentials"},
		{"bad TLS certificate", nil, []string{"--tls-cert", "testdata/bad-unit.yaml", "--tls-key", "testdata/bad-unit.yaml"}, "testdata/bad-unit.yaml"},
		{"missing credentials file", nil, []string{"--credentials-file", "/nonexistent/creds"}, "/nonexistent/creds"},
		{"missing config file", nil, []string{"--config", "/nonexistent/sandboxd.yaml"}, "/nonexistent/sandboxd.yaml"},
		{"bad unit in the config file", nil, []string{"--config", "testdata/bad-unit.yaml"}, `config file testdata/bad-unit.yaml: templates.python.memory: size "1GB"`},
		{"config check", nil, []string{"--config", "testdata/pool.yaml"}, `config file testdata/pool.yaml: templates.py.pool: warm pools need --state-dir`},
		{"policy env", []string{"SANDBOXD_POLICY_MAX_PIDS=10"}, nil, "max_pids=10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := daemontest.Run(t, sandboxdBin, tt.env, append(append([]string{}, freeArgs...), tt.args...)...)
			if r.ExitCode != 2 || !daemontest.OneLine(r.Stderr) || !strings.Contains(r.Stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line mentioning %q", r.ExitCode, r.Stderr, tt.want)
			}
		})
	}
}

// TestDeprecatedKeysWarn: a config file with the old byte-count keys
// starts (here up to the missing credentials file) with one WARN per old key
// naming the key that replaces it.
func TestDeprecatedKeysWarn(t *testing.T) {
	r := daemontest.Run(t, sandboxdBin, nil, append(append([]string{}, freeArgs...), "--config", "testdata/old-keys.yaml", "--credentials-file", "/nonexistent/creds")...)
	if r.ExitCode != 2 || !strings.Contains(r.Stderr, "/nonexistent/creds") {
		t.Fatalf("exit %d, stderr %q; want exit 2 for the credentials file", r.ExitCode, r.Stderr)
	}
	for _, want := range []string{`"key":"templates.py.memory_bytes","use":"templates.py.memory"`, `"key":"policy.max_memory_bytes","use":"policy.max_memory"`} {
		if !strings.Contains(r.Stderr, `"msg":"deprecated config key"`) || !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr %q; want a deprecation warning with %s", r.Stderr, want)
		}
	}
}

func TestServesAndStopsOnSIGTERM(t *testing.T) {
	sandboxtest.Docker(t)
	p := daemontest.Start(t, sandboxdBin, append(append([]string{}, freeArgs...), "--worker", "w1", "--shutdown-grace", "1s")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names, err := daemontest.ListServices(ctx, p.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, ","), "plumb.v1.SandboxService") {
		t.Fatalf("services = %v, want plumb.v1.SandboxService", names)
	}
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "plumb.v1.SandboxService"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr: %s", code, p.Stderr())
	}
}

// TestTracesExportedOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc,
// sandboxd exports a server span per traced RPC to the OTLP endpoint, at
// the latest when it stops, under OTEL_SERVICE_NAME; health checks make
// none.
func TestTracesExportedOverGRPC(t *testing.T) {
	sandboxtest.Docker(t)
	c := tracingtest.Start(t, "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "sandboxd-test")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	p := daemontest.Start(t, sandboxdBin, append(append([]string{}, freeArgs...), "--worker", "otel"+hex.EncodeToString(b), "--shutdown-grace", "1s")...)
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
	if _, err := plumbv1.NewSandboxServiceClient(conn).ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr: %s", code, p.Stderr())
	}
	spans := c.Spans("sandboxd-test")
	if len(tracingtest.Named(spans, "plumb.v1.SandboxService/ListSandboxes")) != 1 || len(tracingtest.Named(spans, "grpc.health.v1.Health/Check")) != 0 {
		t.Fatalf("spans of sandboxd-test: %v (services %v)", spans, c.Services())
	}
}
