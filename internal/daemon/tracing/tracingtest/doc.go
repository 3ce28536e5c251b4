// Package tracingtest is a real OTLP trace receiver for tests: it serves
// the OTLP trace export over gRPC or HTTP/protobuf on a loopback port and
// keeps what it receives, so a test can point a daemon's OTEL_* variables
// at it and read back the spans the daemon exported.
//
// It must not be imported by non-test code.
package tracingtest
