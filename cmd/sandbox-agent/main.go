// Command sandbox-agent is the small static program sandboxd copies into
// every sandbox container (built with CGO_ENABLED=0). It has two jobs:
//
//	sandbox-agent init
//	    The container's PID 1. It only reaps zombies, so the orphaned
//	    background children of executes do not pile up, and exits on
//	    SIGTERM or SIGINT.
//	sandbox-agent serve [--root /] [--workspace /workspace] [--log-level info]
//	    The agent proper, started by sandboxd with one exec: it reads
//	    agentproto request frames on stdin and writes response frames on
//	    stdout (see package agent). Logs go to stderr.
//	sandbox-agent --version
//	    Prints the build version.
//
// File operations and commands run inside the container, never on the
// host.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/plumbhq/plumb/internal/version"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agent"
)

const usage = `usage:
  sandbox-agent serve [--root DIR] [--workspace DIR] [--log-level LEVEL]
  sandbox-agent init
  sandbox-agent --version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches on the subcommand and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version.String("sandbox-agent"))
		return 0
	case "init":
		return runInit()
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := serve(ctx, args[1:], stdin, stdout, stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintln(stderr, "sandbox-agent:", err)
			return 1
		}
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sandbox-agent: unknown command %q\n%s", args[0], usage)
	return 2
}

// serve parses the serve flags, wires the agent and runs it until stdin
// ends or ctx is cancelled.
func serve(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "engine root directory: file-tool paths and execute cwd resolve under it")
	workspace := fs.String("workspace", agent.DefaultWorkspace, "working directory of execute when a request names none")
	level := zapcore.InfoLevel
	fs.Var(&level, "log-level", "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}

	lg := zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(zapcore.AddSync(stderr)),
		level,
	))
	defer func() { _ = lg.Sync() }()

	files, err := newFileEngine(*root)
	if err != nil {
		return err
	}
	return agent.Serve(ctx, stdin, stdout, agent.Config{
		Files:     files,
		Root:      *root,
		Workspace: *workspace,
		Logger:    lg,
	})
}

// newFileEngine builds the file engine rooted at root. The shared os.Root
// engine (pkg/backend/fileops or pkg/backend/filesystem) is not in the tree
// yet; until it is, this returns nil, and the agent answers every file
// operation with unsupported. Swap the engine in here.
func newFileEngine(root string) (backend.Backend, error) {
	_ = root
	return nil, nil
}
