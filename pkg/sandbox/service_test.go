package sandbox_test

import (
	"bufio"
	"context"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// serviceSecret is the secret a service process holds in its environment.
const serviceSecret = "plumb-test-secret-3f9c1a"

// TestServiceSecretsOutOfReach (issue 21 item 6): a service process (a
// stdio MCP server given a secret in its environment) runs as a uid of
// its own; box code run through Execute cannot read the secret through
// /proc/*/environ or /proc/*/cmdline, open its memory, ptrace it or
// signal it, while the service and commands still share the workspace
// both ways. Under runc the service must start with its secret; where the
// kernel serves every environ to everyone (gVisor 20221219) a service
// with an environment is refused as unsupported instead, and the rest is
// checked on a service without one. The same process started as a
// command (the control) gives its secret away to the same attack, so the
// attack is one that works where the boundary is missing.
func TestServiceSecretsOutOfReach(t *testing.T) {
	e := newEnv(t)
	probe := buildProbe(t)
	m := e.manager(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { serviceSecretsOutOfReach(t, m, rt, probe) })
	}
}

// buildProbe builds testdata/ptraceprobe as a static binary.
func buildProbe(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ptraceprobe")
	build := osexec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/ptraceprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the ptrace probe: %v\n%s", err, out)
	}
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func serviceSecretsOutOfReach(t *testing.T, m *sandbox.Manager, runtime string, probe []byte) {
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: runtime}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if up, err := f.Upload(ctx, []backend.UploadItem{{Path: "/workspace/probe", Content: probe}}); err != nil || up[0].Err != nil {
		t.Fatalf("upload the probe: %v %v", up, err)
	}
	if r := exec(t, m, info.ID, "chmod +x probe && echo from-command > cmd.txt && mkdir cmddir", 120); exitCode(r) != 0 {
		t.Fatalf("prepare: %q", r.Output)
	}

	// The service: says who it is, uses the workspace both ways, and
	// stays. Its argv holds no secret; its environment does.
	const holder = "echo from-service >> cmd.txt && echo from-service > svc.txt && echo x > cmddir/svc.txt && mkdir svcdir && id -u && echo $$ && exec sleep 600"
	secretEnv := map[string]string{"PLUMB_SERVICE_SECRET": serviceSecret}
	svc, uid, pid, err := startHolder(t, f, true, secretEnv, holder)
	refused := err != nil
	if refused {
		if runtime == "runc" || backend.CodeOf(err) != backend.CodeUnsupported || !strings.Contains(err.Error(), "environment") {
			t.Fatalf("start a service with a secret: %v", err)
		}
		t.Logf("%s: a service with an environment is refused: %v", runtime, err)
		if svc, uid, pid, err = startHolder(t, f, true, nil, holder); err != nil {
			t.Fatalf("start a service without an environment: %v", err)
		}
	}
	if n, err := strconv.ParseUint(uid, 10, 32); err != nil || n < 1<<30 {
		t.Fatalf("the service runs as uid %q, want its own (a tag, from 2^30)", uid)
	}
	if r := exec(t, m, info.ID, "id -u", 120); strings.TrimSpace(r.Output) != "1000" {
		t.Fatalf("commands run as %q, want the sandbox user", r.Output)
	}

	attacks := []struct {
		name, cmd string
		want      []string // each a substring of the output
		environ   bool     // reads environments: moot when the service holds no secret
	}{
		{"read its environ", "cat /proc/" + pid + "/environ 2>&1; echo status $?", []string{"denied", "status 1"}, true},
		// What it can read it prints: its own processes' environments and
		// every command line (the service's "sleep 600" included).
		{"read every environ and cmdline", "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -e PATH= -e SECRET -e '^600$'", []string{"PATH=", "\n600\n"}, true},
		{"stop it", "kill -STOP " + pid + " 2>&1; echo status $?", []string{"not permitted", "status 1"}, false},
		{"kill it", "kill -9 " + pid + " 2>&1; echo status $?", []string{"not permitted", "status 1"}, false},
		{"trace it, open its memory", "./probe " + pid, []string{"attach: operation not permitted", "seize: operation not permitted", "mem: open /proc/" + pid + "/mem: permission denied"}, false},
		{"the workspace is shared", "cat cmd.txt svc.txt cmddir/svc.txt && echo more >> svc.txt && rm -r svcdir && stat -c '%a' . cmd.txt svc.txt", []string{"from-command\nfrom-service\nfrom-service\nx\n", "775\n664\n664\n"}, false},
	}
	for _, a := range attacks {
		if a.environ && refused {
			continue
		}
		r := exec(t, m, info.ID, a.cmd, 120)
		t.Logf("%s: %q", a.name, r.Output)
		if strings.Contains(r.Output, serviceSecret) {
			t.Fatalf("%s: box code read the service's secret: %q", a.name, r.Output)
		}
		for _, w := range a.want {
			if !strings.Contains(r.Output, w) {
				t.Errorf("%s: %q: output %q, want %q", a.name, a.cmd, r.Output, w)
			}
		}
	}
	// The service was neither stopped nor killed, and still serves.
	if r := exec(t, m, info.ID, "grep '^State' /proc/"+pid+"/status", 120); !strings.Contains(r.Output, "S (sleeping)") {
		t.Errorf("the service after the attacks: %q", r.Output)
	}
	// Closing it ends it (the agent signals a uid of its own; under gVisor
	// from a thread raised back to root).
	closeHolder(t, svc)
	gone := "while [ -d /proc/" + pid + " ] && ! grep -qs '^State:.*Z' /proc/" + pid + "/status; do sleep 0.1; done; echo gone"
	if r := exec(t, m, info.ID, gone, 120); r.Output != "gone\n" {
		t.Errorf("the service after it was closed: %q", r.Output)
	}

	if refused {
		return // no secret to give away: the control proves nothing here
	}
	// The control: the same holder started as a command gives its secret
	// away to the same read.
	cmd, _, cpid, err := startHolder(t, f, false, secretEnv, "id -u && echo $$ && exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if r := exec(t, m, info.ID, "cat /proc/"+cpid+"/environ", 120); !strings.Contains(r.Output, serviceSecret) {
		t.Errorf("control: a command's environ was not readable by another command (%q): the attack proves nothing", r.Output)
	}
	closeHolder(t, cmd)
}

// startHolder starts command with env, as a service or not, and returns
// it with the first two lines it prints (its uid and pid), or the error
// that refused it.
func startHolder(t *testing.T, f *sandbox.Files, service bool, env map[string]string, command string) (backend.Process, string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: command, Env: env, Service: service})
	if err != nil {
		return nil, "", "", err
	}
	t.Cleanup(func() { _ = p.Close() })
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	// Its first two lines, read aside so that a box that stops answering
	// fails the test at the hang guard instead of hanging it.
	type first struct {
		lines []string
		err   error
	}
	got := make(chan first, 1)
	go func() {
		out := bufio.NewReader(p.Stdout())
		var f first
		for len(f.lines) < 2 && f.err == nil {
			var line string
			line, f.err = out.ReadString('\n')
			f.lines = append(f.lines, strings.TrimSpace(line))
		}
		got <- f
		if f.err == nil {
			_, _ = io.Copy(io.Discard, out)
		}
	}()
	var lines []string
	select {
	case f := <-got:
		if f.err != nil {
			exit, werr := p.Wait(ctx)
			t.Fatalf("%q printed %q then %v (exit %+v, %v)", command, f.lines, f.err, exit, werr)
		}
		lines = f.lines
	case <-ctx.Done():
		_ = p.Close()
		t.Fatalf("%q printed nothing within the hang guard", command)
	}
	return p, lines[0], lines[1], nil
}

// closeHolder closes a holder and waits for it to end.
func closeHolder(t *testing.T, p backend.Process) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := p.Wait(ctx); err != nil && backend.CodeOf(err) != backend.CodeCancelled {
		t.Logf("wait after close: %v", err)
	}
}
