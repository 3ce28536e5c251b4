//go:build unix

// Package examples tests the client examples as a user runs them: each one
// talks to a real agentd process (SQLite threads, a scripted
// OpenAI-compatible model, a bearer token) over loopback.
package examples

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var bins = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-examples")
	if err != nil {
		panic(err)
	}
	code := 1
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles agentd and the Go example into dir.
func build(dir string) error {
	for _, pkg := range []string{"cmd/agentd", "examples/go/runagent", "examples/go/approvalhook"} {
		p, err := daemontest.Build(dir, "github.com/plumbhq/plumb/"+pkg)
		if err != nil {
			return fmt.Errorf("build %s: %w", pkg, err)
		}
		bins[filepath.Base(pkg)] = p
	}
	return nil
}

const token = "examples-token"

// agentd starts agentd with write_file gated behind an approval (and
// extra config appended), and returns its address, its scripted model and
// a client for checking the thread afterwards.
func agentd(t *testing.T, extra ...string) (string, *modeltest.Server, plumbv1.AgentServiceClient) {
	t.Helper()
	model := modeltest.New(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`version: 1
storage: {sqlite_path: %s}
models:
  scripted: {base_url: %s, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
backends: {default: state}
agents:
  main:
    interrupt_on:
      write_file: {description: "Writes a file"}
`, filepath.Join(dir, "agentd.db"), model.URL()) + strings.Join(extra, "")
	for name, content := range map[string]string{"agentd.yaml": cfg, "token": token + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := daemontest.Start(t, bins["agentd"], "--config", filepath.Join(dir, "agentd.yaml"), "--token-file", filepath.Join(dir, "token"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json", "--shutdown-grace", "2s")
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(grpccreds.BearerToken(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p.GRPCAddr, model, plumbv1.NewAgentServiceClient(conn)
}

// example is how to start one client example: argv before its own flags,
// and environment additions.
type example struct {
	argv []string
	env  []string
}

// goExample is the Go example, built in TestMain.
func goExample(*testing.T) example { return example{argv: []string{bins["runagent"]}} }

// debianPackages is what the Python example needs (scripts/test-deps.sh
// installs them).
const debianPackages = "python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev"

// pythonExample is the Python example through run.sh, as the README runs
// it. Without its tools the test fails under CI and is skipped elsewhere.
func pythonExample(t *testing.T) example {
	t.Helper()
	python, err := pythonPrereqs()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Python example needs Debian's %s (make test-deps installs them): %v", debianPackages, err)
		}
		t.Skipf("skipping the Python example: %v; install Debian's %s", err, debianPackages)
	}
	// run.sh generates the stubs under TMPDIR: the test's own directory.
	return example{argv: []string{"python/run.sh"}, env: []string{"PYTHON=" + python, "TMPDIR=" + t.TempDir()}}
}

// pythonPrereqs returns a Python interpreter that has grpc and protobuf
// (pyenv's python3 comes first on some PATHs and does not see Debian's
// packages), after checking that protoc, its well-known types and the gRPC
// Python plugin are there.
func pythonPrereqs() (string, error) {
	if _, err := exec.LookPath("grpc_python_plugin"); err != nil {
		return "", err
	}
	// Resolving agent.proto needs protoc and the well-known types.
	if out, err := exec.Command("protoc", "-I", "../proto", "--descriptor_set_out", os.DevNull, "plumb/v1/agent.proto").CombinedOutput(); err != nil {
		return "", fmt.Errorf("protoc: %v: %s", err, bytes.TrimSpace(out))
	}
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import grpc, google.protobuf").Run() == nil {
			return py, nil
		}
	}
	return "", errors.New("no python3 can import grpc and google.protobuf")
}

// run runs an example to completion with stdin and returns what it printed.
func (e example) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, e.argv[0], append(e.argv[1:], args...)...)
	cmd.Env = append(os.Environ(), e.env...)
	// run.sh starts python: a hung run is ended as a whole process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func TestGoExample(t *testing.T)     { testExample(t, goExample) }
func TestPythonExample(t *testing.T) { testExample(t, pythonExample) }

// testExample runs an agent through the example: the model streams text
// and calls write_file, which waits for approval; the example asks on
// stdin, resumes with the answer, and prints the final answer. The
// thread's files show whether the decision reached agentd (a rejected call
// is reported with a tool result too, but does not run).
func testExample(t *testing.T, start func(*testing.T) example) {
	const (
		args     = `{"file_path":"/hello.txt","content":"hi\n"}`
		question = `approve write_file ` + args + `? [y/N]`
		call     = `→ write_file ` + args
	)
	tests := []struct {
		name     string
		answer   string
		want     []string
		wantFile bool
	}{
		{"approve", "y\n", []string{"Writing the file.\n", question, call, "← write_file: ", "final answer (RUN_STATUS_COMPLETED): Saved /hello.txt.\n"}, true},
		{"reject", "n\n", []string{"Writing the file.\n", question, call, "← write_file: ", "final answer (RUN_STATUS_COMPLETED): Skipped it.\n"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := start(t)
			addr, model, client := agentd(t)
			final := "Saved /hello.txt."
			if !tt.wantFile {
				final = "Skipped it."
			}
			model.Script("main",
				modeltest.Turn{Text: []string{"Writing ", "the file."}, Calls: []modeltest.Call{{ID: "c1", Name: "write_file", Args: args}}},
				modeltest.Text(final))

			out, errOut, err := ex.run(t, tt.answer, "--addr", addr, "--token", token, "write hello")
			if err != nil {
				t.Fatalf("example: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			threads, err := client.ListThreads(ctx, &plumbv1.ListThreadsRequest{})
			if err != nil || len(threads.GetThreads()) != 1 {
				t.Fatalf("ListThreads = %v, %v; want one thread", threads, err)
			}
			th, err := client.GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threads.GetThreads()[0].GetId(), View: plumbv1.ThreadView_THREAD_VIEW_FULL})
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, f := range th.GetThread().GetFiles() {
				files = append(files, f.GetPath())
			}
			if got := len(files) == 1 && files[0] == "/hello.txt"; got != tt.wantFile {
				t.Fatalf("thread files %v; want /hello.txt written: %t", files, tt.wantFile)
			}
		})
	}
}

// A wrong token is refused, and the example says so and fails.
func TestExamplesWrongToken(t *testing.T) {
	for name, start := range map[string]func(*testing.T) example{"go": goExample, "python": pythonExample} {
		t.Run(name, func(t *testing.T) {
			ex := start(t)
			addr, _, _ := agentd(t)
			out, errOut, err := ex.run(t, "", "--addr", addr, "--token", "wrong", "hello")
			if err == nil || !strings.Contains(strings.ToLower(errOut), "unauthenticated") {
				t.Fatalf("err = %v, stderr %q, stdout %q; want a failure naming UNAUTHENTICATED", err, errOut, out)
			}
		})
	}
}

// TestApprovalHookExample runs the product-style example: a detached run
// whose signed run.interrupted webhook the example verifies and approves,
// then WaitRun and the run's final webhook. The file the approved call
// writes shows the approval reached agentd.
func TestApprovalHookExample(t *testing.T) {
	t.Setenv("PLUMB_SECRETS_KEY", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("e", 32))))
	addr, model, client := agentd(t, "webhooks: {allow_http: true, allow: [127.0.0.0/8]}\n")
	const args = `{"file_path":"/hello.txt","content":"hi\n"}`
	model.Script("main",
		modeltest.Turn{Text: []string{"Writing the file."}, Calls: []modeltest.Call{{ID: "c1", Name: "write_file", Args: args}}},
		modeltest.Text("Saved /hello.txt."))

	ex := example{argv: []string{bins["approvalhook"]}}
	out, errOut, err := ex.run(t, "", "--addr", addr, "--token", token, "--listen", "127.0.0.1:0", "write hello")
	if err != nil {
		t.Fatalf("example: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, w := range []string{
		"webhook run.interrupted for run ", "signature verified",
		"approving write_file " + args,
		": RUN_STATUS_COMPLETED\n",
		"final webhook run.succeeded: status COMPLETED\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	threads, err := client.ListThreads(ctx, &plumbv1.ListThreadsRequest{})
	if err != nil || len(threads.GetThreads()) != 1 {
		t.Fatalf("ListThreads = %v, %v; want one thread", threads, err)
	}
	th, err := client.GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threads.GetThreads()[0].GetId(), View: plumbv1.ThreadView_THREAD_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	if files := th.GetThread().GetFiles(); len(files) != 1 || files[0].GetPath() != "/hello.txt" {
		t.Fatalf("thread files %v; want /hello.txt written by the approved call", files)
	}
}
