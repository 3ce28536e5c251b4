// The runtime names none of its memory mappings (Go 1.25's
// decoratemappings: one prctl(PR_SET_VMA) per mapping, 20 of them before
// the agent serves) and does not follow the cgroup's CPU limit for its
// GOMAXPROCS (containermaxprocs: with it off the runtime reads the limit
// once at start, and never again): fitProcs sets it from the box's limit
// once. Each system call costs 15-100 µs under gVisor,
// where these were about 30 of the agent's start (docs/benchmarks.md,
// B3-runsc).

//go:debug decoratemappings=0
//go:debug containermaxprocs=0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/plumbhq/plumb/internal/version"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
	"github.com/plumbhq/plumb/pkg/sandbox/boxagent"
)

const usage = `usage:
  sandbox-agent serve [--pid1] [--root DIR] [--workspace DIR] [--writable DIRS] [--uid U --gid G] [--log-level LEVEL]
  sandbox-agent init
  sandbox-agent count DIR[:MAX]...
  sandbox-agent disk attach DIR NAME BYTES INODES | disk detach DIR NAME
  sandbox-agent --version
`

func main() {
	// No heap profile is ever taken of the agent: its sampling buckets
	// would only cost every box memory.
	runtime.MemProfileRate = 0
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
	case "count":
		return runCount(args[1:], stdout, stderr)
	case "disk":
		return runDisk(args[1:], stdout, stderr)
	case "serve":
		fitProcs()
		dropOwnEnv()
		o, err := parseServe(args[1:], stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintln(stderr, "sandbox-agent:", err)
			return 1
		}
		if o.pid1 {
			return runPID1(o, stdin, stdout, stderr)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := o.serve(ctx, stdin, stdout, stderr, nil); err != nil {
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

// serveSpareThreads is how many idle OS threads serve keeps (see
// keepThreads): enough for the threads its goroutines block in (a wait per
// running command, a locked spawning thread) when box code holds every
// pid, so that a fork refused by the pids limit is answered as such. As
// PID 1 (pid1SpareThreads) one reaper thread does every wait, and the
// channel and output pipes are read through the runtime's poller, so
// fewer do; each thread costs about 30 KiB of RSS in every box (B9).
const (
	serveSpareThreads = 8
	pid1SpareThreads  = 4
)

// serveOpts are the parsed serve flags.
type serveOpts struct {
	root, workspace string
	writable        []string
	user            *boxagent.User
	level           agentlog.Level
	pid1            bool
}

// parseServe parses the serve flags.
func parseServe(args []string, stderr io.Writer) (serveOpts, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "engine root directory: file-tool paths and execute cwd resolve under it")
	workspace := fs.String("workspace", boxagent.DefaultWorkspace, "working directory of execute when a request names none")
	var writable listFlag
	fs.Var(&writable, "writable", "writable directories (virtual paths, comma-separated) named when a write hits a read-only file system; default: the workspace, and /tmp when --root is /")
	uid := fs.Int("uid", -1, "the sandbox user's uid: when the agent runs as root, commands run as it and file operations use it as fsuid (give --gid too)")
	gid := fs.Int("gid", -1, "the sandbox user's gid (see --uid)")
	level := levelFlag(agentlog.LevelInfo)
	fs.Var(&level, "log-level", "log level on stderr: debug, info, warn, error")
	pid1 := fs.Bool("pid1", false, "run as the container's PID 1: serve the channel on the container's stdio, reap every orphan, and keep reaping after stdin ends, until SIGTERM")
	if err := fs.Parse(args); err != nil {
		return serveOpts{}, err
	}
	if fs.NArg() > 0 {
		return serveOpts{}, fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	o := serveOpts{root: *root, workspace: *workspace, writable: writable, level: agentlog.Level(level), pid1: *pid1}
	switch {
	case (*uid < 0) != (*gid < 0):
		return o, errors.New("serve: give both --uid and --gid, or neither")
	case *uid > 1<<31-1 || *gid > 1<<31-1:
		return o, fmt.Errorf("serve: --uid %d / --gid %d out of range", *uid, *gid)
	case *uid == 0 || *gid == 0:
		return o, errors.New("serve: --uid and --gid must not be 0: the sandbox user is never root")
	case *uid > 0:
		o.user = &boxagent.User{UID: uint32(*uid), GID: uint32(*gid)}
	}
	return o, nil
}

// serve wires the agent and runs it until stdin ends or ctx is cancelled.
// reaper, when set, owns every wait (PID 1).
func (o serveOpts) serve(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, reaper *boxagent.Reaper) error {
	// agentlog, not zap or log/slog: see the package doc.
	lg := agentlog.New(stderr, o.level)
	spares := serveSpareThreads
	if reaper != nil {
		spares = pid1SpareThreads
	}
	stdin, stdout = pollable(stdin), pollable(stdout)
	files, closeFiles, err := newFileEngine(o.root, o.workspace, o.writable)
	if err != nil {
		return err
	}
	defer func() { _ = closeFiles() }()
	releaseLater()
	return boxagent.Serve(ctx, stdin, stdout, boxagent.Config{
		Files:     files,
		Root:      o.root,
		Workspace: o.workspace,
		Version:   version.Version,
		Logger:    lg,
		User:      o.user,
		Reaper:    reaper,
		// The spare threads are made once the agent is the sandbox user
		// (the identity change then signals fewer threads, each a costly
		// round trip under gVisor), while the first requests are served,
		// and before any command starts: until one does, no box code can
		// hold the pids a thread needs.
		BeforeCommands: func() { keepThreads(spares) },
	})
}

// pollable returns an end of the channel, when it is a blocking pipe (the
// engine hands the container's stdin and stdout over as such), as a file
// the runtime's poller serves: a read that waits, or a write to a full
// pipe, then parks its goroutine instead of holding a thread in the system
// call, so the goroutine that handles the frame just read runs at once
// rather than when the runtime notices the blocked thread and hands its P
// over; and boxagent.Serve reads and writes it with raw system calls
// (docs/benchmarks.md, B1). Anything else is returned as it is.
func pollable[T any](v T) T {
	f, ok := any(v).(*os.File)
	if !ok {
		return v
	}
	fd := int(f.Fd())
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return v
	}
	if syscall.SetNonblock(fd, true) != nil {
		return v
	}
	p, ok := any(os.NewFile(uintptr(fd), f.Name())).(T)
	if !ok {
		return v
	}
	return p
}

// newFileEngine builds the shared os.Root file engine (pkg/backend/fileops)
// rooted at root, with atomic writes without fsync. Its home dir is the
// workspace (as a virtual path); walks skip the pseudo-filesystems when the root is the container's "/"; and a
// write to a read-only place names writable, which defaults to the
// workspace and, with root "/", /tmp. close releases the root handle.
func newFileEngine(root, workspace string, writable []string) (files backend.Backend, close func() error, err error) {
	home := virtualUnder(root, workspace)
	// A sandbox's files die with its container: writes stay atomic but
	// skip the fsyncs (see fileops.WithSync).
	opts := []fileops.Option{fileops.WithHome(home), fileops.WithSync(false)}
	// The workspace is a volume of the box's own: every call of the fast
	// path ends in microseconds, so they are made raw (see
	// fileops.UseRawCalls).
	fileops.UseRawCalls()
	if filepath.Clean(root) == "/" {
		opts = append(opts, fileops.WithSkipDirs(fileops.PseudoFilesystems()...))
	}
	if len(writable) == 0 {
		writable = []string{home}
		if filepath.Clean(root) == "/" {
			writable = append(writable, "/tmp")
		}
	}
	opts = append(opts, fileops.WithWritableRoots(writable...))
	e, err := fileops.New(root, opts...)
	if err != nil {
		return nil, nil, err
	}
	return e, e.Close, nil
}

// virtualUnder returns dir as a virtual path of the engine rooted at root,
// or "/" when dir lies outside it.
func virtualUnder(root, dir string) string {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "/"
	}
	if rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}

// levelFlag is the --log-level flag: debug, info, warn or error (any
// case), the names the daemons' zap levels use (see agentlog.ParseLevel).
type levelFlag agentlog.Level

func (l *levelFlag) String() string { return strings.ToLower(agentlog.Level(*l).String()) }

func (l *levelFlag) Set(s string) error {
	v, err := agentlog.ParseLevel(s)
	if err != nil {
		return err
	}
	*l = levelFlag(v)
	return nil
}

// listFlag is a comma-separated, repeatable string list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
