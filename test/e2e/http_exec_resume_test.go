package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestHTTPExecuteStreamResume: a resumable ExecuteStream read by a real
// curl -N that is killed after the first lines (the connection drops), the
// command going on meanwhile, then a second curl -N with Last-Event-ID and
// the execution id: the rest of the output, each line once, then the exit.
// A resume from another tenant is 404, and Last-Event-ID without the
// execution id is refused rather than running the command again.
func TestHTTPExecuteStreamResume(t *testing.T) {
	curl := curlPath(t)
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("other "+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken), "--credentials-file", creds)
	base := "http://" + sd.HTTPAddr + "/plumb.v1.SandboxService/"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	auth := "Authorization: Bearer " + sandboxdToken
	run := func(method, body string) []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, curl, "-sS", "--fail-with-body", "-H", auth, base+method, "--json", body).Output()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", method, err, out)
		}
		return out
	}
	var created plumbv1.CreateSandboxResponse
	if err := protojson.Unmarshal(run("CreateSandbox", `{}`), &created); err != nil {
		t.Fatal(err)
	}
	id := created.GetSandbox().GetId()

	// stream starts curl -N with the extra arguments and returns its SSE
	// events as they come, and a kill that drops the connection.
	stream := func(body string, extra ...string) (<-chan sseEvent, func()) {
		t.Helper()
		args := append([]string{"-sS", "-N", "-H", auth, "-H", "Accept: text/event-stream"}, extra...)
		cmd := exec.CommandContext(ctx, curl, append(args, base+"ExecuteStream", "--json", body)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		evs := make(chan sseEvent)
		go func() {
			defer close(evs)
			readSSE(t, out, func(ev sseEvent) bool {
				select {
				case evs <- ev:
					return false
				case <-ctx.Done():
					return true
				}
			})
		}()
		kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
		t.Cleanup(kill)
		return evs, kill
	}
	decode := func(ev sseEvent) *plumbv1.ExecuteStreamResponse {
		t.Helper()
		if ev.event != "" {
			t.Fatalf("SSE %s event: %s", ev.event, ev.data)
		}
		var m plumbv1.ExecuteStreamResponse
		if err := protojson.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatalf("not an ExecuteStreamResponse: %v: %s", err, ev.data)
		}
		return &m
	}

	command := `echo line1; echo line2; until [ -e /tmp/gate ]; do sleep 0.05; done; for i in 3 4 5; do echo line$i; sleep 0.05; done; exit 4`
	evs, kill := stream(`{"sandboxId":"` + id + `","resumable":true,"command":{"command":"` + command + `"}}`)
	var xid string
	var out strings.Builder
	lastID := ""
	for ev := range evs {
		m := decode(ev)
		if s := m.GetStarted(); s != nil {
			xid = s.GetExecutionId()
			if ev.id != "" {
				t.Errorf("started has id %q", ev.id)
			}
			continue
		}
		if ev.id == "" || m.GetSequence() == 0 || ev.id != strconv.FormatUint(m.GetSequence(), 10) {
			t.Fatalf("event id %q, sequence %d", ev.id, m.GetSequence())
		}
		lastID = ev.id
		out.Write(m.GetOutput().GetData())
		if out.String() == "line1\nline2\n" {
			break
		}
	}
	if xid == "" || out.String() != "line1\nline2\n" {
		t.Fatalf("first connection: execution %q, output %q", xid, out.String())
	}
	kill() // the connection drops; the command waits at its gate

	run("Execute", `{"sandboxId":"`+id+`","command":{"command":"touch /tmp/gate"}}`)

	// Last-Event-ID without the execution id would run the command twice.
	refused := func(token, body string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, curl, "-sS", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+token,
			"-H", "Last-Event-ID: "+lastID, base+"ExecuteStream", "--json", body).Output()
		if err != nil {
			t.Fatalf("curl: %v %s", err, out)
		}
		return string(out)
	}
	if out := refused(sandboxdToken, `{"sandboxId":"`+id+`","command":{"command":"echo again"}}`); !strings.HasSuffix(out, "\n400") || !strings.Contains(out, "after_sequence") {
		t.Errorf("Last-Event-ID without executionId: %s", out)
	}
	if out := refused(otherToken, `{"sandboxId":"`+id+`","executionId":"`+xid+`"}`); !strings.HasSuffix(out, "\n404") {
		t.Errorf("another tenant's resume: %s", out)
	}

	evs, _ = stream(`{"sandboxId":"`+id+`","executionId":"`+xid+`"}`, "-H", "Last-Event-ID: "+lastID)
	var rest strings.Builder
	var res *plumbv1.ExecuteResult
	prev := lastID
	for ev := range evs {
		m := decode(ev)
		want, _ := strconv.ParseUint(prev, 10, 64)
		if m.GetLostMessages() != 0 || ev.id != strconv.FormatUint(want+1, 10) {
			t.Fatalf("resumed event id %q after %q, lost %d", ev.id, prev, m.GetLostMessages())
		}
		prev = ev.id
		rest.Write(m.GetOutput().GetData())
		if res = m.GetResult(); res != nil {
			break
		}
	}
	if rest.String() != "line3\nline4\nline5\n" {
		t.Errorf("after Last-Event-ID %s: %q, want line3..line5 once", lastID, rest.String())
	}
	if res == nil || res.GetExitCode() != 4 || res.GetOutput() != "line1\nline2\nline3\nline4\nline5\n" {
		t.Errorf("result %v, want exit 4 and the whole output", res)
	}
}
