// Package agentlog is the in-box agent's logger (cmd/sandbox-agent and
// pkg/sandbox/boxagent): leveled lines of JSON, one object per line, in the
// shape log/slog's JSONHandler writes, so that whatever reads the agent's
// stderr keeps working:
//
//	{"time":"2025-01-02T02:04:05.000000006Z","level":"WARN","msg":"write response","request-id":7,"error":"broken pipe"}
//
// It exists because the agent runs once per box and every KB of its static
// binary costs RSS in every sandbox (benchmark B9, docs/benchmarks.md).
// log/slog links encoding/json and reflection-heavy handlers; a logger
// that only knows strings, integers and errors needs neither. log/slog
// alone took the stripped agent from 3.61 MB to 3.50 MB; with the frames'
// own codec (pkg/sandbox/agentproto, wire.go), which unlinks encoding/json,
// it is 3.24 MB.
//
// What it must not do: import log/slog, encoding/json, reflect, fmt or
// net (test/layering keeps log/slog out of the agent), log anything but
// the values it is handed, or write a line in more than one Write call.
// It has no handlers, groups, contexts or sampling: add an Attr
// constructor when the agent needs another kind of value, nothing more.
package agentlog
