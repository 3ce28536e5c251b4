// Package python is the python tool: a stateful Python interpreter per
// thread, running inside the thread's sandbox, so that variables,
// functions and imports persist between calls (a code interpreter).
//
// The interpreter is `python3 -u -c <driver>` started through
// backend.ProcessStarter. The driver (driver.py) reads one JSON request
// per line on stdin and answers one JSON line on stdout, prefixed with a
// random nonce of that call, sent with it: output and earlier calls' code
// cannot pass for a later call's answer, and the Go side takes exactly one
// answer and one end mark per call, for the call in flight; anything else
// under the call's nonce is tampering and restarts the interpreter
// (docs/security.md, The python tool). The user's sys.stdout and
// sys.stderr are bounded buffers in
// the driver; what subprocesses write to the file descriptors directly is
// captured on the Go side. A call returns stdout, stderr and the repr of
// the last statement when it is an expression.
//
// A call that times out, or whose interpreter dies, closes the
// interpreter (killing its process group) and tells the model that its
// state was lost; the next call starts a fresh one. The Manager keeps one
// interpreter per thread, serializes the thread's calls, closes
// interpreters that were idle too long, caps how many run per agentd, and
// closes them all on Close. The model is offered the tool only when the
// thread's backend can start processes and its sandbox has python3 (a
// probe run once per thread with backend.Executor).
//
// The package does not create sandboxes or pick backends: it uses the
// backend of the run (agent.RunContext.Backend).
package python
