package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/plumbhq/plumb/internal/version"
)

// The environment variables this package reads itself (the OpenTelemetry
// SDK configuration names); the exporters and the SDK read the others.
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName    = "OTEL_SERVICE_NAME"
)

// The OTLP protocols spans can be exported with.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

const (
	defaultProtocol         = ProtocolHTTPProtobuf
	describeWorkerFullName  = "/plumb.v1.SandboxService/DescribeWorker"
	reflectionServicePrefix = "grpc.reflection."
)

// ErrConfig wraps an OTEL_* value that this package cannot honor (an
// exporter or protocol it does not ship). The daemons exit with a usage
// error for it.
var ErrConfig = errors.New("tracing configuration")

// Settings is what the environment asks for.
type Settings struct {
	// Enabled says whether spans are exported.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTPProtobuf (set when Enabled).
	Protocol string
	// Reason says why tracing is on or off, for the startup log.
	Reason string
}

// FromEnv decides from getenv whether tracing is on and over which OTLP
// protocol. It is off by default: OTEL_TRACES_EXPORTER=otlp or an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or its _TRACES_ variant) turns it
// on; OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true keep it off.
// The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (the specification's
// default). Exporters other than otlp and none, and protocols other than
// grpc and http/protobuf, are errors wrapping ErrConfig.
func FromEnv(getenv func(string) string) (Settings, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if strings.EqualFold(env(EnvSDKDisabled), "true") {
		return Settings{Reason: EnvSDKDisabled + "=true"}, nil
	}
	var exporters []string
	for e := range strings.SplitSeq(strings.ToLower(env(EnvTracesExporter)), ",") {
		if e = strings.TrimSpace(e); e != "" && !slices.Contains(exporters, e) {
			exporters = append(exporters, e)
		}
	}
	for _, e := range exporters {
		if e != "otlp" && e != "none" {
			return Settings{}, fmt.Errorf("%w: %s=%q: only otlp (or none) is supported", ErrConfig, EnvTracesExporter, getenv(EnvTracesExporter))
		}
	}
	var reason string
	switch {
	case slices.Contains(exporters, "otlp"):
		reason = EnvTracesExporter + "=otlp"
	case len(exporters) > 0: // none
		return Settings{Reason: EnvTracesExporter + "=none"}, nil
	case env(EnvTracesEndpoint) != "":
		reason = EnvTracesEndpoint + " is set"
	case env(EnvEndpoint) != "":
		reason = EnvEndpoint + " is set"
	default:
		return Settings{Reason: "neither " + EnvTracesExporter + " nor an OTLP endpoint is set"}, nil
	}
	key, proto := EnvTracesProtocol, env(EnvTracesProtocol)
	if proto == "" {
		key, proto = EnvProtocol, env(EnvProtocol)
	}
	switch proto {
	case "":
		proto = defaultProtocol
	case ProtocolGRPC, ProtocolHTTPProtobuf:
	default:
		return Settings{}, fmt.Errorf("%w: %s=%q: want %s or %s", ErrConfig, key, proto, ProtocolGRPC, ProtocolHTTPProtobuf)
	}
	return Settings{Enabled: true, Protocol: proto, Reason: reason}, nil
}

// Tracing is a daemon's tracing: the TracerProvider its code starts spans
// with, the propagator that carries trace context over gRPC, and the gRPC
// options that trace its server and its client connections. A nil
// *Tracing is tracing turned off.
type Tracing struct {
	tp       trace.TracerProvider
	prop     propagation.TextMapPropagator
	on       bool
	shutdown func(context.Context) error
}

// Off is tracing turned off: a no-op provider and no gRPC options.
func Off() *Tracing { return nil }

// New is tracing that sends spans to tp (for tests: an SDK provider over
// an in-memory exporter), with W3C trace context and baggage propagation.
// Shutdown leaves tp alone.
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, prop: Propagator(), on: true}
}

// Propagator is the W3C tracecontext and baggage propagator both daemons
// use.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup builds the daemon's tracing from the process environment (FromEnv
// over os.Getenv). service is the default service.name ("agentd",
// "sandboxd"); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
// Off, it returns nil (a valid, disabled *Tracing). The OTLP exporter
// connects lazily: an unreachable collector does not fail Setup, and its
// export errors go to the OpenTelemetry error handler (Install logs them).
func Setup(ctx context.Context, service string, lg *zap.Logger) (*Tracing, error) {
	return setup(ctx, service, os.Getenv, lg)
}

func setup(ctx context.Context, service string, getenv func(string) string, lg *zap.Logger) (*Tracing, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	s, err := FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	if !s.Enabled {
		lg.Debug("tracing is off", zap.String("reason", s.Reason))
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	switch s.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP %s exporter: %v", ErrConfig, s.Protocol, err)
	}
	// The default name first: OTEL_RESOURCE_ATTRIBUTES and then
	// OTEL_SERVICE_NAME (read by WithFromEnv) override it.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version.Version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: resource: %v", ErrConfig, err)
	}
	if err != nil {
		// A partial resource (say, a malformed OTEL_RESOURCE_ATTRIBUTES
		// pair) is still worth exporting with.
		lg.Warn("tracing resource is incomplete", zap.Error(err))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	name, _ := res.Set().Value("service.name")
	lg.Info("tracing is on", zap.String("reason", s.Reason), zap.String("otlp-protocol", s.Protocol),
		zap.String("service-name", name.AsString()))
	return &Tracing{tp: tp, prop: Propagator(), on: true, shutdown: tp.Shutdown}, nil
}

// Enabled reports whether spans are recorded.
func (t *Tracing) Enabled() bool { return t != nil && t.on }

// TracerProvider is the provider to start spans with: a no-op one when
// tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.Enabled() {
		return noop.NewTracerProvider()
	}
	return t.tp
}

// TextMapPropagator is the W3C propagator (a no-op one when off).
func (t *Tracing) TextMapPropagator() propagation.TextMapPropagator {
	if !t.Enabled() {
		return propagation.NewCompositeTextMapPropagator()
	}
	return t.prop
}

// ServerOptions trace every RPC a gRPC server serves, as a child of the
// caller's span when the call carries one (nil when off). Health checks,
// reflection and DescribeWorker (agentd's periodic fleet poll) are not
// traced.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(t.grpcOptions()...))}
}

// DialOptions trace every RPC of a client connection and send the trace
// context with it (nil when off); the same calls as ServerOptions are left
// out.
func (t *Tracing) DialOptions() []grpc.DialOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(t.grpcOptions()...))}
}

func (t *Tracing) grpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(t.prop),
		// Metrics are Prometheus' job (internal/daemon/metrics.go).
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.Any(
			filters.HealthCheck(),
			filters.ServicePrefix(reflectionServicePrefix),
			filters.FullMethodName(describeWorkerFullName),
		))),
	}
}

// Install makes this tracing's propagator the process-wide default and
// logs OpenTelemetry's internal errors (failed exports) with lg. It does
// nothing when tracing is off. Only a daemon's main calls it.
//
// The global TracerProvider stays a no-op on purpose: libraries that trace
// through otelhttp (the Docker client) take the provider from the parent
// span, so their calls made while serving an RPC nest below its span,
// while their calls from background loops (the sandbox reaper) start no
// trace of their own.
func (t *Tracing) Install(lg *zap.Logger) {
	if !t.Enabled() {
		return
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.Named("otel")
	otel.SetTextMapPropagator(t.prop)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { lg.Warn("opentelemetry", zap.Error(err)) }))
}

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ctx. Call it once, when the daemon exits.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}
