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
		{"negative quota", nil, []string{"--max-sandboxes", "-1"}, "must not be negative"},
		{"missing egress proxy binary", nil, []string{"--egress-proxy-binary", "/nonexistent/plumb-egress"}, "plumb-egress binary"},
		{"missing egress upstream CA", nil, []string{"--egress-upstream-ca", "/nonexistent/ca.pem"}, "--egress-upstream-ca"},
		{"egress upstream CA without a certificate", nil, []string{"--egress-upstream-ca", "testdata/own-label.yaml"}, "no PEM certificate"},
		{"bad egress allow-list", nil, []string{"--policy-egress-allow", "pypi.org,http://x"}, "egress_allow"},
		{"unhardened sandboxes (benchmarks only)", nil, []string{"--config", "testdata/unhardened.yaml"}, "field unhardened not found"},
		{"own label key", nil, []string{"--config", "testdata/own-label.yaml"}, `"plumb.worker" is one of plumb's own label keys`},
		{"public address without credentials", nil, []string{"--grpc-addr", "0.0.0.0:0"}, "refusing to serve gRPC on 0.0.0.0:0 without credentials"},
		{"bad TLS certificate", nil, []string{"--tls-cert", "testdata/own-label.yaml", "--tls-key", "testdata/own-label.yaml"}, "testdata/own-label.yaml"},
		{"missing credentials file", nil, []string{"--credentials-file", "/nonexistent/creds"}, "/nonexistent/creds"},
		{"template over the policy", nil, []string{"--config", "testdata/policy-template.yaml"}, `template "big" breaks the worker policy: memory 2147483648 bytes exceeds this worker's ceiling max_memory_bytes=1073741824`},
		{"malformed policy", nil, []string{"--config", "testdata/policy-bad.yaml"}, `allowed_images entry "busybox:["`},
		{"malformed per-tenant limit", nil, []string{"--config", "testdata/per-tenant-bad.yaml"}, "per_tenant.max_cpus -1 must be a finite number"},
		{"defaults over a policy flag", nil, []string{"--policy-max-memory-bytes", "100000000"}, "defaults break the worker policy: memory 536870912 bytes exceeds this worker's ceiling max_memory_bytes=100000000"},
		{"policy env", []string{"SANDBOXD_POLICY_MAX_PIDS=10"}, nil, "max_pids=10"},
		{"pool without a state dir", nil, []string{"--pool-size", "1"}, "warm pools need --state-dir"},
		{"pool too big", nil, []string{"--pool-size", "65", "--state-dir", "/tmp"}, "pool size 65 is over the maximum 64"},
		{"template pool without a state dir", nil, []string{"--config", "testdata/pool.yaml"}, `template "py": pool: warm pools need --state-dir`},
		{"default runtime not allowed", nil, []string{"--config", "testdata/policy-template.yaml", "--default-runtime", "runc"}, `default_runtime "runc" is not in allowed_runtimes`},
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
