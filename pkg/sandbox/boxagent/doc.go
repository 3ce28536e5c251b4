// Package boxagent is the server half of the sandbox agent: the program that
// runs inside every sandbox container and answers sandboxd's requests over
// one long-lived stream of agentproto frames (stdin in, stdout out).
//
// Serve reads request frames and handles each in its own goroutine, so
// concurrent operations on one sandbox proceed in parallel. File operations
// (ls, read, write, edit, delete, grep, glob, chunked upload and download)
// are dispatched to a backend.Backend, the shared os.Root file engine, and
// execute (docs/file-tools.md §4.8) is implemented here: /bin/sh -c in its own
// process group, one pipe for stdout and stderr, timeouts that kill the
// whole group, head-and-tail output truncation with bounded memory,
// optional offload of the full output to a file, and streamed output
// events.
//
// What it must not do: implement file semantics of its own (that is the
// engine's job), trust anything in a frame (every argument is validated),
// write anything but frames to its output, or let the host's environment
// reach a command. It must never crash on a malformed frame: a frame whose
// id can be read gets an error response, any other is skipped.
//
// It logs with package agentlog (Config.Logger), JSON lines in log/slog's
// shape, not with zap as the rest of plumb does nor with log/slog: this
// code runs once per box, zap links net/http, whose package
// initialisation costs every box memory for nothing the agent uses
// (docs/benchmarks-history.md, "A lean in-box agent"), and log/slog links
// encoding/json and reflection-heavy handlers that grow the binary every
// box maps. For the same reason it must not import net/http, log/slog or
// anything that does (test/layering checks the binary).
package boxagent
