// Package render turns plumb.v1 agent events, threads and interrupt
// requests into the human-readable text agentctl prints.
//
// Everything here is pure and deterministic: the output depends only on the
// messages given (never on the clock, the terminal or the network), so it
// can be tested with golden files. The package must not talk to agentd,
// read from a terminal or decide exit codes; cmd/agentctl does that.
package render
