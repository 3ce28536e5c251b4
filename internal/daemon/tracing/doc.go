// Package tracing sets up OpenTelemetry tracing for agentd and sandboxd
// from the standard OTEL_* environment variables.
//
// Tracing is off unless the environment asks for it (OTEL_TRACES_EXPORTER
// =otlp, or an OTLP endpoint); OTEL_SDK_DISABLED=true turns it off. Off, the
// daemons get a no-op TracerProvider and no gRPC stats handlers, so tracing
// costs nothing. On, spans go to an OTLP exporter (gRPC or HTTP/protobuf per
// OTEL_EXPORTER_OTLP_PROTOCOL) through a batching processor, and the gRPC
// options carry W3C trace context and baggage between the daemons.
//
// The package only builds providers and gRPC options: it holds no service
// logic and must not import domain packages. The exporters and the SDK read
// the other OTEL_* variables (headers, timeouts, sampler, batch sizes,
// resource attributes) themselves.
package tracing
