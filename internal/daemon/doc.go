// Package daemon is the process scaffolding shared by agentd and sandboxd:
// flags with environment-variable equivalents, strict YAML config loading,
// zap logger construction, and Serve, which runs a gRPC server (with health
// and reflection) next to an HTTP listener for Prometheus metrics and pprof,
// and shuts both down gracefully. SetupTracing builds OpenTelemetry tracing
// from the OTEL_* environment (subpackage tracing).
//
// It holds no service logic: the daemons register their services through
// Options.Register. It must not import domain packages.
package daemon
