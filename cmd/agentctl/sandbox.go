package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"google.golang.org/protobuf/types/known/durationpb"
)

const sandboxUsage = `Usage:
  agentctl sandbox create [--image I | --template T] [--memory BYTES] [--cpus N] [--pids N]
                          [--ttl D] [--network none|egress] [--label k=v]... [--env K=V]...
                          [--snapshot SNAPSHOT]   (the workspace restored from a snapshot)
                          [--volume NAME:/PATH[:ro]]...   (mount a named volume)
  agentctl sandbox ls [--label k=v]...
  agentctl sandbox exec ID [--timeout D] [--cwd DIR] [--env K=V]... -- COMMAND [ARG...]
  agentctl sandbox exec -i ID [--cwd DIR] [--env K=V]... -- COMMAND [ARG...]
                          (interactive: stdin passed on, stdout and stderr apart, no timeout)
                          COMMAND alone is a shell command line ("make && make test");
                          COMMAND with ARGs runs exactly that argv, as docker exec does
  agentctl sandbox cp LOCAL ID:/path    (upload)
  agentctl sandbox cp ID:/path LOCAL    (download; - for stdout)
  agentctl sandbox rm ID...
  agentctl sandbox snapshot ID          (capture the workspace; prints the snapshot id)
  agentctl sandbox snapshots [rm SNAPSHOT...]
  agentctl sandbox suspend ID [--hibernate]
                          (pause: memory kept; --hibernate: snapshot, container removed,
                          processes end); any later call wakes it
  agentctl sandbox resume ID
  agentctl sandbox fork SNAPSHOT [--count N] [create flags]
                          (N boxes from one snapshot, all or none; prints their ids)
  agentctl sandbox volumes [create NAME [--size BYTES] | rm NAME...]
                          (named volumes: list, create, delete; NAME or its vol-… id)
  agentctl sandbox egress-watch ID [--timeout D]
                          (hold and list an egress box's connections to destinations off the
                          allow-list while watching: REQUEST_ID HOST:PORT pending|allowed|refused)
  agentctl sandbox egress-decide ID [--allow | --reject] [--scope once|sandbox] [--reason R]
                          (REQUEST_ID | --host HOST:PORT)
`

// commandLine is the shell line exec runs for the words after "--": one
// word is a shell command line of its own (pipes, &&, $VAR work, as in
// `sh -c`); several words are an argv, each quoted, so that `-- python3 -c
// 'import sys; print(sys.version)'` runs python3 with exactly those
// arguments, as `docker exec` would.
func commandLine(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return backend.ShellJoin(args)
}

// exitError carries a command's exit code out of agentctl.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// multi is a repeatable k=v flag.
type multi map[string]string

func (m multi) String() string { return "" }

func (m multi) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

// createFlags defines create's flags on fs (fork takes them too) and
// returns what builds the request once fs is parsed.
func createFlags(fs *flag.FlagSet) func() (*plumbv1.CreateSandboxRequest, error) {
	image := fs.String("image", "", "image (must exist on the worker)")
	template := fs.String("template", "", "worker template")
	memory := fs.Int64("memory", 0, "memory limit in bytes")
	cpus := fs.Float64("cpus", 0, "CPU quota in cores")
	pids := fs.Int64("pids", 0, "process limit")
	ttl := fs.Duration("ttl", 0, "time to live")
	network := fs.String("network", "none", "none or egress")
	snap := fs.String("snapshot", "", "restore the workspace from this snapshot")
	labels, env := multi{}, multi{}
	fs.Var(labels, "label", "label k=v (repeatable)")
	fs.Var(env, "env", "environment K=V (repeatable)")
	var volumes volumeFlags
	fs.Var(&volumes, "volume", "NAME:/PATH[:ro] (repeatable)")
	return func() (*plumbv1.CreateSandboxRequest, error) {
		req := &plumbv1.CreateSandboxRequest{
			Image: *image, Template: *template, Labels: labels, Env: env, SnapshotId: *snap, Volumes: volumes,
			Resources: &plumbv1.Resources{MemoryBytes: *memory, Cpus: *cpus, Pids: *pids},
		}
		switch *network {
		case "none":
			req.Network = plumbv1.NetworkMode_NETWORK_MODE_NONE
		case "egress":
			req.Network = plumbv1.NetworkMode_NETWORK_MODE_EGRESS
		default:
			return nil, fmt.Errorf("--network %q: want none or egress", *network)
		}
		if *ttl > 0 {
			req.Ttl = durationpb.New(*ttl)
		}
		return req, nil
	}
}

// volumeFlags is the repeatable --volume NAME:/PATH[:ro].
type volumeFlags []*plumbv1.VolumeMount

func (v *volumeFlags) String() string { return "" }

func (v *volumeFlags) Set(s string) error {
	name, rest, ok := strings.Cut(s, ":")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("want NAME:/PATH[:ro], got %q", s)
	}
	m := &plumbv1.VolumeMount{Name: name, MountPath: rest}
	if p, ok := strings.CutSuffix(rest, ":ro"); ok {
		m.MountPath, m.ReadOnly = p, true
	} else if p, ok := strings.CutSuffix(rest, ":rw"); ok {
		m.MountPath = p
	}
	*v = append(*v, m)
	return nil
}

func runSandbox(ctx context.Context, ep endpoint, args []string, sio stdio) error {
	stdout := sio.out
	if len(args) == 0 {
		fmt.Fprint(stdout, sandboxUsage)
		return errors.New("no sandbox command given")
	}
	conn, err := ep.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	c := plumbv1.NewSandboxServiceClient(conn)
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("agentctl sandbox "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch cmd {
	case "create":
		build := createFlags(fs)
		if err := fs.Parse(args); err != nil {
			return err
		}
		req, err := build()
		if err != nil {
			return err
		}
		resp, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, resp.GetSandbox().GetId())
		return nil
	case "ls":
		labels := multi{}
		fs.Var(labels, "label", "label filter k=v (repeatable)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		resp, err := c.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{Labels: labels})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tCREATED\tEXPIRES")
		for _, s := range resp.GetSandboxes() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.GetId(), strings.TrimPrefix(s.GetState().String(), "SANDBOX_STATE_"), s.GetImage(),
				s.GetCreatedAt().AsTime().Local().Format(time.DateTime), s.GetExpiresAt().AsTime().Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "exec":
		interactive := len(args) > 0 && args[0] == "-i"
		if interactive {
			args = args[1:]
		}
		if len(args) == 0 {
			return errors.New("exec: missing sandbox id")
		}
		id := args[0]
		timeout := fs.Duration("timeout", 0, "command timeout (default 120s)")
		cwd := fs.String("cwd", "", "working directory")
		env := multi{}
		fs.Var(env, "env", "environment K=V (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return errors.New("exec: missing command (put it after --)")
		}
		line := commandLine(fs.Args())
		if interactive {
			return interact(ctx, sandboxclient.New(conn, id, ""), backend.ProcessRequest{Command: line, Cwd: *cwd, Env: env}, sio)
		}
		command := &plumbv1.Command{Command: line, Cwd: *cwd, Env: env}
		if *timeout > 0 {
			command.Timeout = durationpb.New(*timeout)
		}
		s, err := c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{SandboxId: id, Command: command})
		if err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return err
			}
			if out := m.GetOutput(); out != nil {
				if _, err := stdout.Write(out.GetData()); err != nil {
					return err
				}
			}
			if r := m.GetResult(); r != nil {
				if r.GetTimedOut() {
					fmt.Fprintf(os.Stderr, "agentctl: command timed out\n")
				}
				if r.ExitCode == nil {
					return errors.New("exit code unknown")
				}
				if code := int(r.GetExitCode()); code != 0 {
					return exitError{code}
				}
				return nil
			}
		}
	case "cp":
		if len(args) != 2 {
			return errors.New("cp: want SRC DST, one of them ID:/path")
		}
		if id, path, ok := remote(args[1]); ok {
			return upload(ctx, c, args[0], id, path)
		}
		if id, path, ok := remote(args[0]); ok {
			return download(ctx, c, id, path, args[1], stdout)
		}
		return errors.New("cp: one side must be ID:/path")
	case "rm":
		if len(args) == 0 {
			return errors.New("rm: missing sandbox id")
		}
		for _, id := range args {
			if _, err := c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
				return fmt.Errorf("rm %s: %w", id, err)
			}
			fmt.Fprintln(stdout, id)
		}
		return nil
	case "snapshot", "snapshots", "suspend", "resume", "fork", "volumes":
		return workspaceCommand(ctx, c, cmd, fs, args, stdout)
	case "egress-watch":
		return egressWatch(ctx, c, fs, args, stdout)
	case "egress-decide":
		return egressDecide(ctx, c, fs, args, stdout)
	default:
		fmt.Fprint(stdout, sandboxUsage)
		return fmt.Errorf("unknown sandbox command %q", cmd)
	}
}

// interact runs an interactive process: sio.in is its stdin (EOF closes
// it), its stdout and stderr go to sio.out and sio.err, and its exit code
// becomes agentctl's.
func interact(ctx context.Context, ps backend.ProcessStarter, req backend.ProcessRequest, sio stdio) error {
	p, err := ps.StartProcess(ctx, req)
	if err != nil {
		return err
	}
	defer p.Close()
	go func() {
		if _, err := io.Copy(p.Stdin(), sio.in); err == nil {
			_ = p.Stdin().Close()
		}
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(sio.out, p.Stdout()) }()
	go func() { defer wg.Done(); _, _ = io.Copy(sio.err, p.Stderr()) }()
	exit, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	wg.Wait()
	if exit.Signal != "" {
		fmt.Fprintf(sio.err, "agentctl: the process was killed by SIG%s\n", exit.Signal)
	}
	if exit.ExitCode != 0 {
		return exitError{exit.ExitCode}
	}
	return nil
}

// remote splits "sbx-...:/path".
func remote(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	return id, path, ok && strings.HasPrefix(id, "sbx-")
}

func upload(ctx context.Context, c plumbv1.SandboxServiceClient, local, id, path string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := c.UploadFiles(ctx)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	first := true
	for {
		n, rerr := io.ReadFull(f, buf)
		eof := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !eof {
			return rerr
		}
		m := &plumbv1.UploadFilesRequest{Data: buf[:n], Eof: eof}
		if first {
			m.SandboxId, m.Path, first = id, path, false
		}
		if err := s.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = s.CloseAndRecv()
			}
			return err
		}
		if eof {
			break
		}
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		return err
	}
	for _, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			return fmt.Errorf("%s: %s", e.GetCode(), e.GetMessage())
		}
	}
	return nil
}

func download(ctx context.Context, c plumbv1.SandboxServiceClient, id, path, local string, stdout io.Writer) error {
	s, err := c.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{path}})
	if err != nil {
		return err
	}
	var w io.Writer = stdout
	var tmp *os.File
	if local != "-" {
		tmp, err = os.CreateTemp(dirOf(local), ".agentctl-cp-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		w = tmp
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		if e := m.GetError(); e != nil {
			return fmt.Errorf("%s: %s", e.GetCode(), e.GetMessage())
		}
		if _, err := w.Write(m.GetData()); err != nil {
			return err
		}
		if m.GetEof() {
			break
		}
	}
	if tmp != nil {
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), local)
	}
	return nil
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i+1]
	}
	return "."
}
