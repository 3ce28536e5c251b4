package tracing

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/plumbhq/plumb/internal/daemon/tracing/tracingtest"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		on       bool
		protocol string
		err      string
	}{
		{name: "off by default", env: nil},
		{name: "endpoint turns it on", env: map[string]string{EnvEndpoint: "http://collector:4318"}, on: true, protocol: ProtocolHTTPProtobuf},
		{name: "traces endpoint turns it on", env: map[string]string{EnvTracesEndpoint: "http://collector:4318/v1/traces"}, on: true, protocol: ProtocolHTTPProtobuf},
		{name: "exporter otlp turns it on", env: map[string]string{EnvTracesExporter: "otlp"}, on: true, protocol: ProtocolHTTPProtobuf},
		{name: "exporter list with otlp", env: map[string]string{EnvTracesExporter: " OTLP , none"}, on: true, protocol: ProtocolHTTPProtobuf},
		{name: "grpc protocol", env: map[string]string{EnvEndpoint: "http://c:4317", EnvProtocol: "grpc"}, on: true, protocol: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{EnvEndpoint: "http://c:4317", EnvProtocol: "http/protobuf", EnvTracesProtocol: "grpc"}, on: true, protocol: ProtocolGRPC},
		{name: "exporter none beats an endpoint", env: map[string]string{EnvTracesExporter: "none", EnvEndpoint: "http://c:4318"}},
		{name: "sdk disabled beats everything", env: map[string]string{EnvSDKDisabled: "TRUE", EnvTracesExporter: "otlp", EnvEndpoint: "http://c:4318"}},
		{name: "sdk disabled false is not disabled", env: map[string]string{EnvSDKDisabled: "false", EnvEndpoint: "http://c:4318"}, on: true, protocol: ProtocolHTTPProtobuf},
		{name: "blank endpoint is unset", env: map[string]string{EnvEndpoint: "  "}},
		{name: "unsupported exporter", env: map[string]string{EnvTracesExporter: "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin": only otlp (or none) is supported`},
		{name: "unsupported protocol", env: map[string]string{EnvEndpoint: "http://c:4318", EnvProtocol: "http/json"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
		{name: "protocol does not matter when off", env: map[string]string{EnvProtocol: "http/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnv(func(k string) string { return tt.env[k] })
			if tt.err != "" {
				if !errors.Is(err, ErrConfig) || err.Error() != "tracing configuration: "+tt.err {
					t.Fatalf("FromEnv = %+v, %v; want an ErrConfig %q", s, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Enabled != tt.on || s.Protocol != tt.protocol || s.Reason == "" {
				t.Fatalf("FromEnv = %+v, want enabled %v protocol %q and a reason", s, tt.on, tt.protocol)
			}
		})
	}
}

// TestOffCostsNothing: off, Setup builds nothing: a no-op provider whose
// spans record nothing, and no gRPC options.
func TestOffCostsNothing(t *testing.T) {
	tr, err := setup(t.Context(), "agentd", func(string) string { return "" }, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || tr.ServerOptions() != nil || tr.DialOptions() != nil {
		t.Fatalf("off: enabled %v, server options %v, dial options %v", tr.Enabled(), tr.ServerOptions(), tr.DialOptions())
	}
	_, span := tr.TracerProvider().Tracer("t").Start(t.Context(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("off: span records (%v) or has a valid context (%v)", span.IsRecording(), span.SpanContext())
	}
	span.End()
	tr.Install(nil) // no-op
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestExportsOverOTLP: with an endpoint in the environment, spans reach a
// real OTLP receiver over either protocol when the daemon shuts down
// (Shutdown flushes the batch), under the daemon's service name unless
// OTEL_SERVICE_NAME names another.
func TestExportsOverOTLP(t *testing.T) {
	tests := []struct {
		name, protocol, serviceEnv, wantService string
	}{
		{"http/protobuf", ProtocolHTTPProtobuf, "", "sandboxd"},
		{"grpc", ProtocolGRPC, "", "sandboxd"},
		{"service name from the environment", ProtocolHTTPProtobuf, "sandboxd-eu1", "sandboxd-eu1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tracingtest.Start(t, tt.protocol)
			t.Setenv(EnvEndpoint, c.Endpoint)
			t.Setenv(EnvProtocol, tt.protocol)
			t.Setenv(EnvServiceName, tt.serviceEnv)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
			tr, err := Setup(t.Context(), "sandboxd", zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if !tr.Enabled() {
				t.Fatal("tracing is off with an endpoint set")
			}
			_, span := tr.TracerProvider().Tracer("test").Start(t.Context(), "probe")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if got := tracingtest.Named(c.Spans(tt.wantService), "probe"); len(got) != 1 || len(c.Spans(tt.wantService)) != 1 {
				t.Fatalf("spans of %s = %v, want one probe; services: %v", tt.wantService, c.Spans(tt.wantService), c.Services())
			}
		})
	}
}

// TestPropagatesOverGRPC: a call made under a span of one provider is
// served under a child span in another provider (two daemons), with one
// trace id; health checks make no spans.
func TestPropagatesOverGRPC(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(serverSpans))
	t.Cleanup(func() { _ = clientTP.Shutdown(context.Background()); _ = serverTP.Shutdown(context.Background()) })
	client, server := New(clientTP), New(serverTP)

	srv := grpc.NewServer(server.ServerOptions()...)
	collectorpb.RegisterTraceServiceServer(srv, &tracingtest.Collector{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(client.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, parent := clientTP.Tracer("test").Start(t.Context(), "parent")
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := collectorpb.NewTraceServiceClient(conn).Export(ctx, &collectorpb.ExportTraceServiceRequest{}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	// The server ends its span after the answer is on its way: stop it
	// (waiting for its RPCs to finish) before reading what it exported.
	conn.Close()
	srv.GracefulStop()

	cs, ss := clientSpans.GetSpans(), serverSpans.GetSpans()
	if len(cs) != 2 || len(ss) != 1 {
		t.Fatalf("client spans %v, server spans %v; want the call and its parent, and the call (no health checks)", cs.Snapshots(), ss.Snapshots())
	}
	call, p := cs[0], cs[1]
	const name = "opentelemetry.proto.collector.trace.v1.TraceService/Export"
	if call.Name != name || ss[0].Name != name || p.Name != "parent" {
		t.Fatalf("span names %q, %q, %q", call.Name, p.Name, ss[0].Name)
	}
	if call.Parent.SpanID() != p.SpanContext.SpanID() {
		t.Errorf("client span's parent %v, want %v", call.Parent.SpanID(), p.SpanContext.SpanID())
	}
	if ss[0].SpanContext.TraceID() != p.SpanContext.TraceID() || ss[0].Parent.SpanID() != call.SpanContext.SpanID() || !ss[0].Parent.IsRemote() {
		t.Errorf("server span trace %v parent %v (remote %v), want trace %v parent %v (remote)",
			ss[0].SpanContext.TraceID(), ss[0].Parent.SpanID(), ss[0].Parent.IsRemote(), p.SpanContext.TraceID(), call.SpanContext.SpanID())
	}
}
