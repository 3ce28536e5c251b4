package backend

import (
	"context"
	"io"
	"strconv"
	"strings"
)

// ProcessStarter starts long-lived interactive processes (an MCP stdio
// server, a Python interpreter) whose stdin, stdout and stderr stay open
// across calls. Only sandbox backends implement it; use a type assertion.
type ProcessStarter interface {
	// StartProcess starts req.Command. ctx bounds the start only: the
	// process lives until Process.Close, until it exits, or until its
	// sandbox ends.
	StartProcess(ctx context.Context, req ProcessRequest) (Process, error)
}

// ProcessRequest asks to start an interactive process.
type ProcessRequest struct {
	// Command is run with /bin/sh -c inside the sandbox; it must not be
	// blank.
	Command string `json:"command"`
	// Cwd is a virtual directory; "" means the workspace.
	Cwd string `json:"cwd,omitempty"`
	// Env overrides the sandbox environment, with ExecuteRequest.Env's
	// rules.
	Env map[string]string `json:"env,omitempty"`
	// Service runs the process as a service (an MCP server that may hold
	// secrets in Env) rather than as a command: in a sandbox, as a uid of
	// its own that the sandbox's commands cannot read, trace or signal
	// (docs/security.md, Service processes). Backends without users
	// ignore it.
	Service bool `json:"service,omitempty"`
	// Port, when set (1–65535), asks for a port forward instead of a
	// process: a TCP connection to 127.0.0.1:Port inside the sandbox,
	// whose received bytes are the process's stdout and to which stdin
	// is written (closing stdin half-closes it). Command, Cwd, Env and
	// Service must then be empty. The "process" exits 0 once the box's
	// side has closed the connection; it takes no signals.
	Port int `json:"port,omitempty"`
}

// MaxPort is the largest TCP port.
const MaxPort = 65535

// CheckPortForward checks a port-forward request (Port set): a port in
// 1–MaxPort and nothing of a process.
func CheckPortForward(req ProcessRequest) error {
	switch {
	case req.Port < 1 || req.Port > MaxPort:
		return Errorf(CodeInvalidArgument, "", "port %d is out of range: want 1 to %d", req.Port, MaxPort)
	case req.Command != "" || req.Cwd != "" || len(req.Env) > 0 || req.Service:
		return Errorf(CodeInvalidArgument, "", "a port forward takes a port and nothing else (no command, cwd, env or service)")
	}
	return nil
}

// Process is a running interactive process. Its methods are safe for
// concurrent use; Stdout and Stderr must both be drained (or the process
// closed), because unread output holds the process back.
type Process interface {
	// Stdin writes to the process's standard input; closing it sends EOF.
	Stdin() io.WriteCloser
	// Stdout reads the process's standard output until it closes.
	Stdout() io.Reader
	// Stderr reads the process's standard error until it closes.
	Stderr() io.Reader
	// Signal sends a signal ("INT", "TERM", "KILL", "HUP", "QUIT",
	// "USR1", "USR2") to the process and all its descendants.
	Signal(ctx context.Context, signal string) error
	// Wait blocks until the process has exited and its output is
	// delivered, or ctx ends.
	Wait(ctx context.Context) (ProcessExit, error)
	// Close kills the process and its descendants if they still run and
	// releases the process's resources. It is safe to call more than once.
	Close() error
}

// ProcessExit is how a process ended.
type ProcessExit struct {
	// ExitCode is the exit status, or 128+n when signal n killed it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed it ("KILL"); "" when it exited.
	Signal string `json:"signal,omitempty"`
	// OOMKilled: the kernel's OOM killer ended it, because its sandbox
	// ran out of memory (a SIGKILL while the sandbox's OOM kill count
	// rose; known only where the box sees its memory cgroup).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Signals are the signal names Process.Signal accepts, with their numbers
// on Linux (the numbers every sandbox uses).
var Signals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15,
}

// crashSignals name the signals that end a process by itself, besides
// Signals.
var crashSignals = map[int]string{4: "ILL", 6: "ABRT", 7: "BUS", 8: "FPE", 11: "SEGV", 13: "PIPE", 14: "ALRM", 24: "XCPU", 25: "XFSZ"}

// SignalName is the name of Linux signal number n ("KILL", "SEGV"), or
// "SIG<n>" for one without a name here.
func SignalName(n int) string {
	for name, num := range Signals {
		if num == n {
			return name
		}
	}
	if name, ok := crashSignals[n]; ok {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}

// CheckSignal returns an invalid_argument error naming the accepted
// signals when name is not one of them.
func CheckSignal(name string) error {
	if _, ok := Signals[name]; ok {
		return nil
	}
	return Errorf(CodeInvalidArgument, "", "unknown signal %s; use one of HUP, INT, QUIT, KILL, USR1, USR2, TERM", Quote(name))
}

// ProcessStarterOf returns b's process starter: b itself, or, for a
// routing backend (one with Default, such as the composite backend), that
// of the backend it routes the rest to. Nil when there is none.
func ProcessStarterOf(b Backend) ProcessStarter {
	for range 4 { // routing backends nest a level or two, never in a loop
		if b == nil {
			return nil
		}
		if ps, ok := b.(ProcessStarter); ok {
			return ps
		}
		d, ok := b.(interface{ Default() Backend })
		if !ok {
			return nil
		}
		b = d.Default()
	}
	return nil
}

// ShellQuote quotes s as one word for /bin/sh: unchanged when it holds
// only characters the shell takes literally, else in single quotes.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellJoin renders argv as one /bin/sh command line that runs exactly
// argv: each argument quoted with ShellQuote.
func ShellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = ShellQuote(a)
	}
	return strings.Join(parts, " ")
}
