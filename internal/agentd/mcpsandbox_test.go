package agentd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// TestMCPStdioInSandbox: a stdio MCP server runs inside the thread's real
// sandbox, started through sandboxd's process stream. On the thread's
// first run its binary is not there yet: the server is unavailable and
// the model is told why, and the run completes. Once the binary is in the
// workspace, the next run lists its tools, calls them (the server sees the
// sandbox's environment, not agentd's), a command run through execute
// meanwhile cannot read the server's environment (it runs as a uid of its
// own, issue 21 item 6), and the server process is gone from the box
// after the run.
func TestMCPStdioInSandbox(t *testing.T) {
	sandboxtest.Docker(t)
	bin := filepath.Join(t.TempDir(), "mcpserver")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/plumbhq/plumb/test/mcpserver")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the MCP test server: %v\n%s", err, out)
	}
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	s := startStack(t, w, `backends: {default: sandbox}
mcp_servers:
  box: {command: /bin/sh, args: [-c, "exec /workspace/mcpserver -mode serve"], env: {GREETING: from-config}}
`)
	s.model.Script("main",
		modeltest.Calls(mcall("u1", "mcp__box__unavailable", `{}`)),
		modeltest.Text("the server is missing"),
		modeltest.Calls(
			mcall("e1", "mcp__box__echo", `{"text":"hello from the box"}`),
			mcall("v1", "mcp__box__env", `{"name":"GREETING"}`),
			mcall("v2", "mcp__box__env", `{"name":"TEST_MODEL_KEY"}`),
			mcall("p1", "mcp__box__pid", `{}`),
			mcall("x1", "execute", fmt.Sprintf(`{"command":%q}`, `cat /proc/[0-9]*/environ 2>/dev/null | tr '\000' '\n' | grep GREETING; echo checked`)),
		),
		modeltest.Text("done"),
	)
	thread, results := s.mustRun(input("", "Use the box's MCP server."))
	wantResult(t, results, "u1", true, "MCP server box")

	// Put the server's binary into the thread's sandbox.
	list, err := w.Client.ListSandboxes(context.Background(), &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 {
		t.Fatalf("list sandboxes: %v, %v", list, err)
	}
	sb := list.GetSandboxes()[0]
	b := sandboxclient.New(w.Conn, sb.GetId(), sandboxclient.HomeOf(sb))
	up, err := b.Upload(context.Background(), []backend.UploadItem{{Path: "/workspace/mcpserver", Content: code}})
	if err != nil || up[0].Err != nil {
		t.Fatalf("upload the MCP server: %v %v", up, err)
	}
	// Made executable by its owner, the sandbox user: the server runs as a
	// uid of its own, which may write the file but not chmod it.
	if res, err := b.Execute(context.Background(), backend.ExecuteRequest{Command: "chmod +x /workspace/mcpserver"}); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("chmod the MCP server: %+v, %v", res, err)
	}

	_, results = s.mustRun(input(thread, "Again, now that it is there."))
	wantResult(t, results, "e1", false, "hello from the box")
	wantResult(t, results, "v1", false, "from-config")
	if r := wantResult(t, results, "v2", false); strings.Contains(r.GetContent(), "test-key") {
		t.Errorf("the server in the box sees agentd's environment: %q", r.GetContent())
	}
	if r := wantResult(t, results, "x1", false, "checked"); strings.Contains(r.GetContent(), "from-config") {
		t.Errorf("a command read the MCP server's environment: %q", r.GetContent())
	}
	pid := strings.TrimSpace(wantResult(t, results, "p1", false).GetContent())
	if pid == "" {
		t.Fatal("no pid from the server")
	}
	// The run ended: its server's process is gone from the box.
	res, err := b.Execute(context.Background(), backend.ExecuteRequest{Command: "while [ -d /proc/" + pid + " ] && ! grep -qs '^State:.*Z' /proc/" + pid + "/status; do sleep 0.1; done; echo gone"})
	if err != nil || strings.TrimSpace(res.Output) != "gone" {
		t.Fatalf("the MCP server after the run: %+v, %v", res, err)
	}
}
