package agentd

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// forwarder is a TCP forwarder on a fixed loopback address in front of a
// worker. Stopping it closes its listener and every connection, so the
// worker is unreachable exactly as a lost pod is; starting it again
// listens on the same address.
type forwarder struct {
	t        *testing.T
	addr, to string

	mu    sync.Mutex
	lis   net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func startForwarder(t *testing.T, to string) *forwarder {
	f := &forwarder{t: t, addr: "127.0.0.1:0", to: to}
	f.start()
	f.addr = f.lis.Addr().String()
	t.Cleanup(f.stop)
	return f
}

func (f *forwarder) start() {
	f.t.Helper()
	lis, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.lis = lis
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			f.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			f.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
}

func (f *forwarder) stop() {
	f.mu.Lock()
	if f.lis != nil {
		f.lis.Close()
		f.lis = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// TestSandboxWorkerLost (issue 10 item 2): when the thread's worker is
// unreachable, sandbox calls fail with an error naming the worker (in the
// tool_result event the model and client see), no fresh sandbox is made
// behind the model's back, and once the worker is back the same sandbox,
// with its files, is used again.
func TestSandboxWorkerLost(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	fw := startForwarder(t, w.Addr)
	s := startStack(t, &sandboxsvctest.Worker{Client: w.Client, Name: w.Name, Addr: fw.addr},
		"backends: {default: sandbox}\n")
	s.model.Script("main",
		modeltest.Calls(mcall("e1", "execute", `{"command":"echo kept > /workspace/a.txt"}`)),
		modeltest.Text("done"),
	)
	thread, _ := s.mustRun(input("", "Write a file."))

	fw.stop()
	s.model.Script("main",
		modeltest.Calls(mcall("e2", "execute", `{"command":"cat /workspace/a.txt"}`)),
		modeltest.Calls(mcall("r2", "read_file", `{"file_path":"/workspace/a.txt"}`)),
		modeltest.Text("lost"),
	)
	evs, results, err := s.run(input(thread, "Read it."))
	if err != nil || len(evs) == 0 || evs[len(evs)-1].GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run with the worker lost: %v, %v", evs, err)
	}
	for _, id := range []string{"e2", "r2"} {
		r := wantResult(t, results, id, true, w.Name, "unreachable")
		if r != nil && strings.Contains(r.GetContent(), resetMarker) {
			t.Errorf("%s: the workspace was reset while its worker was only unreachable: %s", id, r.GetContent())
		}
	}
	// Each failed call's tool_result is followed by a sandbox_lost event
	// naming the worker.
	var lost []string
	for i, ev := range evs {
		if l := ev.GetSandboxLost(); l != nil {
			prev := evs[i-1].GetToolResult()
			if l.GetWorker() != w.Name || sandbox.WorkerOf(l.GetSandboxId()) != w.Name || !strings.Contains(l.GetMessage(), "unreachable") {
				t.Errorf("sandbox_lost = %v", l)
			}
			lost = append(lost, prev.GetId())
		}
	}
	if strings.Join(lost, ",") != "e2,r2" {
		t.Errorf("sandbox_lost events follow the results of %v, want e2,r2", lost)
	}
	list, err := w.Client.ListSandboxes(s.ctx(), &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 {
		t.Fatalf("sandboxes on the worker = %v, %v; want the thread's one only", list.GetSandboxes(), err)
	}

	fw.start()
	s.model.Script("main",
		modeltest.Calls(mcall("e3", "execute", `{"command":"cat /workspace/a.txt"}`)),
		modeltest.Text("back"),
	)
	_, results = s.mustRun(input(thread, "Read it again."))
	if r := wantResult(t, results, "e3", false, "kept"); r != nil && strings.Contains(r.GetContent(), resetMarker) {
		t.Errorf("e3 after the worker came back: %s", r.GetContent())
	}
}
