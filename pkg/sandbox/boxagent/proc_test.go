package boxagent

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// procOutput gathers a process's events until its final response,
// acknowledging output as it goes, and returns stdout, stderr and the
// final response.
func procOutput(t *testing.T, c *client, id uint64, ch chan agentproto.Response) (stdout, stderr string, final agentproto.Response) {
	t.Helper()
	var out, errb strings.Builder
	deadline := time.After(callTimeout)
	for {
		select {
		case r := <-ch:
			switch {
			case r.Done:
				return out.String(), errb.String(), r
			case r.Event == agentproto.EventStdout:
				out.Write(r.Data)
			case r.Event == agentproto.EventStderr:
				errb.Write(r.Data)
			}
			if len(r.Data) > 0 {
				c.start(agentproto.OpProcAck, agentproto.ProcAckArgs{Target: id, Bytes: int64(len(r.Data) + agentproto.EventCost)})
			}
		case <-deadline:
			t.Fatalf("process %d: no final response within %v", id, callTimeout)
		}
	}
}

func procExit(t *testing.T, final agentproto.Response) backend.ProcessExit {
	t.Helper()
	if final.Error != nil {
		t.Fatalf("process failed: %v", final.Error)
	}
	var exit backend.ProcessExit
	if err := json.Unmarshal(final.Result, &exit); err != nil {
		t.Fatalf("decode exit %s: %v", final.Result, err)
	}
	return exit
}

// awaitStarted waits for a process's started event.
func awaitStarted(t *testing.T, ch chan agentproto.Response) {
	t.Helper()
	select {
	case r := <-ch:
		if r.Event != agentproto.EventStarted {
			t.Fatalf("first response %+v, want a started event", r)
		}
	case <-time.After(callTimeout):
		t.Fatal("no started event")
	}
}

func TestProcessStdio(t *testing.T) {
	tests := []struct {
		name       string
		command    string
		stdin      []string
		wantOut    string
		wantErr    string
		wantExit   int
		wantSignal string
	}{
		{name: "cat echoes stdin", command: "cat", stdin: []string{"hello\n", "world\n"}, wantOut: "hello\nworld\n"},
		{name: "stderr and exit code", command: "echo out; echo err >&2; exit 3", wantOut: "out\n", wantErr: "err\n", wantExit: 3},
		{name: "killed by a signal", command: "kill -USR1 $$", wantExit: 128 + 10, wantSignal: "USR1"},
		{name: "env and cwd", command: "echo $GREETING; pwd", wantOut: "hi\n/tmp\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
			req := backend.ProcessRequest{Command: tt.command}
			if strings.Contains(tt.command, "GREETING") {
				req.Env, req.Cwd = map[string]string{"GREETING": "hi"}, "/tmp"
			}
			id, ch := c.start(agentproto.OpProcStart, req)
			awaitStarted(t, ch)
			for _, in := range tt.stdin {
				c.ok(agentproto.OpProcWrite, withPayload{agentproto.ProcWriteArgs{Target: id}, []byte(in)}, nil)
			}
			c.ok(agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: id, EOF: true}, nil)
			out, errs, final := procOutput(t, c, id, ch)
			exit := procExit(t, final)
			if out != tt.wantOut || errs != tt.wantErr || exit.ExitCode != tt.wantExit || exit.Signal != tt.wantSignal {
				t.Fatalf("got stdout %q stderr %q exit %+v; want %q %q %d %q", out, errs, exit, tt.wantOut, tt.wantErr, tt.wantExit, tt.wantSignal)
			}
		})
	}
}

// TestProcessOutputWindow: without acknowledgements the agent sends at
// most ProcWindow of output; each ack lets more through, and all of it
// arrives in the end.
func TestProcessOutputWindow(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	const total = 3 * agentproto.ProcWindow
	id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Command: "head -c " + strconv.Itoa(total) + " /dev/zero"})
	awaitStarted(t, ch)
	sent, data := 0, 0
	for sent+agentproto.ProcChunkBytes+agentproto.EventCost <= agentproto.ProcWindow-agentproto.EventCost {
		r := <-ch
		if r.Event != agentproto.EventStdout {
			t.Fatalf("unexpected %+v", r)
		}
		sent += len(r.Data) + agentproto.EventCost
		data += len(r.Data)
	}
	// Whatever is left of the window may still come; nothing past it.
	quiet := time.After(200 * time.Millisecond)
	for done := false; !done; {
		select {
		case r := <-ch:
			sent += len(r.Data) + agentproto.EventCost
			data += len(r.Data)
		case <-quiet:
			done = true
		}
	}
	if sent > agentproto.ProcWindow {
		t.Fatalf("%d bytes of events unacknowledged, window %d", sent, agentproto.ProcWindow)
	}
	c.start(agentproto.OpProcAck, agentproto.ProcAckArgs{Target: id, Bytes: int64(sent)})
	out, _, final := procOutput(t, c, id, ch)
	procExit(t, final)
	if data+len(out) != total {
		t.Fatalf("received %d bytes before the ack and %d after, want %d in all", data, len(out), total)
	}
}

func TestProcessSignalAndCancel(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Command: "sleep 100"})
	awaitStarted(t, ch)
	c.fails(agentproto.OpProcSignal, agentproto.ProcSignalArgs{Target: id, Signal: "BOGUS"}, backend.CodeInvalidArgument)
	c.ok(agentproto.OpProcSignal, agentproto.ProcSignalArgs{Target: id, Signal: "TERM"}, nil)
	_, _, final := procOutput(t, c, id, ch)
	if exit := procExit(t, final); exit.Signal != "TERM" || exit.ExitCode != 143 {
		t.Fatalf("exit %+v, want TERM/143", exit)
	}
	c.fails(agentproto.OpProcWrite, withPayload{agentproto.ProcWriteArgs{Target: id}, []byte("x")}, backend.CodeInvalidArgument)

	id, ch = c.start(agentproto.OpProcStart, backend.ProcessRequest{Command: "sleep 100 & sleep 100"})
	awaitStarted(t, ch)
	c.ok(agentproto.OpCancel, agentproto.CancelArgs{Target: id}, nil)
	if _, _, final = procOutput(t, c, id, ch); final.Error == nil || final.Error.Code != backend.CodeCancelled {
		t.Fatalf("cancelled process answered %+v", final)
	}
}

func TestProcessLimit(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	var ids []uint64
	for range agentproto.MaxProcesses {
		id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Command: "cat"})
		awaitStarted(t, ch)
		ids = append(ids, id)
	}
	c.fails(agentproto.OpProcStart, backend.ProcessRequest{Command: "cat"}, backend.CodeTooLarge)
	c.fails(agentproto.OpProcStart, backend.ProcessRequest{Command: "  "}, backend.CodeInvalidArgument)
	for _, id := range ids {
		c.ok(agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: id, EOF: true}, nil)
	}
}
