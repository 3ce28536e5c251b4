package python

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// fakeInterpreter stands in for python3 in the busybox test image (which
// has none): it answers the driver's start like driver.py, then, at the
// first call, grows a string until the box's memory limit kills it.
const fakeInterpreter = `#!/bin/sh
read nonce
echo "$nonce {\"id\": 0, \"ready\": true, \"python\": \"0.0\"}"
read request
exec awk 'BEGIN { s = "x"; while (1) s = s s }'
`

// TestOOMKilledInterpreter (issue 21 item 13): an interpreter that the
// kernel kills because its real sandbox (64 MiB) ran out of memory is
// reported as having run out of memory, not as "killed by signal KILL",
// through the whole path: the in-box agent, sandboxd's process stream and
// the sandbox backend.
func TestOOMKilledInterpreter(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{Defaults: sandbox.Template{MemoryBytes: 64 << 20}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	sb, err := w.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b := sandboxclient.New(w.Conn, sb.GetSandbox().GetId(), sandboxclient.HomeOf(sb.GetSandbox()))
	if up, err := b.Upload(ctx, []backend.UploadItem{{Path: "/workspace/fakepy", Content: []byte(fakeInterpreter)}}); err != nil || up[0].Err != nil {
		t.Fatalf("upload: %v %v", up, err)
	}
	if r, err := b.Execute(ctx, backend.ExecuteRequest{Command: "chmod +x /workspace/fakepy"}); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("chmod: %+v %v", r, err)
	}

	m := New(Config{Python: "/workspace/fakepy"}, WithLogger(zaptest.NewLogger(t)),
		WithResolver(func(backend.Backend) (backend.ProcessStarter, backend.Executor) { return b, b }))
	t.Cleanup(m.Close)
	raw, _ := json.Marshal(map[string]any{"code": "x = 'y' * 10**9"})
	res, err := m.Tool().Func(ctx, &agent.ToolRequest{
		Call:  model.ToolCall{ID: "c", Name: ToolName, Args: string(raw)},
		Run:   &agent.RunContext{ThreadID: "t"},
		State: agent.NewState(),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "Error: the Python interpreter was killed for running out of memory (the sandbox's memory limit) while running this code; " + lost
	if !res.IsError || !strings.Contains(res.Content, want) {
		t.Fatalf("result (error %v):\n%s\nwant it to say %q", res.IsError, res.Content, want)
	}
}
