package agentd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// pythonImage returns the Debian Python sandbox image of
// scripts/sandbox-image.sh. Under CI=true (or PLUMB_PYTHON_SANDBOX=1) it
// builds the image when this recipe's tag is missing (once per recipe: a
// minute or two); otherwise the test is skipped until `make sandbox-image`
// has built it.
func pythonImage(t *testing.T) string {
	t.Helper()
	build := os.Getenv("CI") == "true" || os.Getenv("PLUMB_PYTHON_SANDBOX") == "1"
	args := []string{"../../scripts/sandbox-image.sh"}
	if !build {
		args = append(args, "--if-present")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // hang guard
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !build && errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skip("the Python sandbox image is not built: make sandbox-image (CI=true builds it)")
	}
	if err != nil {
		t.Fatalf("scripts/sandbox-image.sh: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s", stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// TestPythonSandboxEndToEnd: in the Debian image built without a registry,
// through agentd and a real sandbox worker (which derives its image, adding
// the sandbox agent), the model writes a Python script and runs it, keeps
// state in the python tool's interpreter across calls, and
// the image has what the recipe promises: git, ripgrep, procps, file, user
// 1000 in /workspace.
func TestPythonSandboxEndToEnd(t *testing.T) {
	sandboxtest.Docker(t) // fails under CI=true without an engine
	ref := pythonImage(t)
	w := sandboxsvctest.StartWorker(t, sandbox.Config{Defaults: sandbox.Template{Image: ref}})
	s := startStack(t, w, "backends: {default: sandbox}\n")
	s.model.Script("main",
		modeltest.Calls(mcall("w1", "write_file", `{"file_path":"/workspace/fizzbuzz.py","content":"for i in range(1, 16):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n"}`)),
		modeltest.Calls(
			mcall("e1", "execute", `{"command":"python3 fizzbuzz.py | tail -3"}`),
			mcall("e2", "execute", `{"command":"id -u; pwd; git --version; rg --version | head -1; ps -o pid= -p 1 >/dev/null && echo procps; file fizzbuzz.py"}`),
		),
		modeltest.Calls(mcall("p1", "python", `{"code":"import sys\nx = 21"}`)),
		modeltest.Calls(mcall("p2", "python", `{"code":"print(sys.version_info[0])\nx * 2"}`)),
		modeltest.Text("It prints FizzBuzz."),
	)
	_, results := s.mustRun(input("", "Write fizzbuzz.py and run it."))
	wantResult(t, results, "w1", false)
	wantResult(t, results, "e1", false, "13\n14\nFizzBuzz")
	wantResult(t, results, "e2", false, "1000\n/workspace\ngit version", "ripgrep ", "procps", "fizzbuzz.py: ASCII text")
	// The stateful interpreter, through the sandbox's process stream.
	if !offersTool(s, "main", 0, "python") {
		t.Error("python was not offered in a sandbox with python3")
	}
	wantResult(t, results, "p1", false, "(no output)")
	wantResult(t, results, "p2", false, "stdout:\n3\n", "value:\n42")
}
