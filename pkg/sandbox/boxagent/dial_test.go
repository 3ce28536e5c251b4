package boxagent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// listenLoopback serves one line-echo per connection on 127.0.0.1: it
// answers "echo: LINE\n" for each line and closes when the client
// half-closes.
func listenLoopback(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, "echo: "+sc.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPortForward: a proc_start with a port relays both ways, half-closes
// on EOF, takes no signals, and ends with exit 0 when the box's side
// closes.
func TestPortForward(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	port := listenLoopback(t)
	id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Port: port})
	awaitStarted(t, ch)
	c.fails(agentproto.OpProcSignal, agentproto.ProcSignalArgs{Target: id, Signal: "KILL"}, backend.CodeInvalidArgument)
	c.ok(agentproto.OpProcWrite, withPayload{agentproto.ProcWriteArgs{Target: id}, []byte("hello\nworld\n")}, nil)
	c.ok(agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: id, EOF: true}, nil)
	out, _, final := procOutput(t, c, id, ch)
	if exit := procExit(t, final); exit.ExitCode != 0 || out != "echo: hello\necho: world\n" {
		t.Fatalf("forward answered %q, exit %+v", out, exit)
	}
}

func TestPortForwardRefusals(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	// A port nobody listens on: take one and close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tests := []struct {
		name string
		req  backend.ProcessRequest
		want backend.Code
	}{
		{"nothing listens", backend.ProcessRequest{Port: closed}, backend.CodeConnectionRefused},
		{"port too large", backend.ProcessRequest{Port: 70000}, backend.CodeInvalidArgument},
		{"negative port", backend.ProcessRequest{Port: -1}, backend.CodeInvalidArgument},
		{"port and command", backend.ProcessRequest{Port: closed, Command: "true"}, backend.CodeInvalidArgument},
		{"port and service", backend.ProcessRequest{Port: closed, Service: true}, backend.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.fails(agentproto.OpProcStart, tt.req, tt.want)
		})
	}
}

// TestPortForwardLimit: MaxConns forwards at once, then RESOURCE_EXHAUSTED;
// forwards do not take process slots; cancelling one frees its slot.
func TestPortForwardLimit(t *testing.T) {
	c := startAgent(t, Config{Root: "/", Workspace: t.TempDir()})
	port := listenLoopback(t)
	var ids []uint64
	var chans []chan agentproto.Response
	for range agentproto.MaxConns {
		id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Port: port})
		awaitStarted(t, ch)
		ids, chans = append(ids, id), append(chans, ch)
	}
	c.fails(agentproto.OpProcStart, backend.ProcessRequest{Port: port}, backend.CodeResourceExhausted)
	pid, pch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Command: "cat"})
	awaitStarted(t, pch)
	c.ok(agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: pid, EOF: true}, nil)
	procExit(t, func() agentproto.Response { _, _, f := procOutput(t, c, pid, pch); return f }())

	c.ok(agentproto.OpCancel, agentproto.CancelArgs{Target: ids[0]}, nil)
	if _, _, final := procOutput(t, c, ids[0], chans[0]); final.Error == nil || final.Error.Code != backend.CodeCancelled {
		t.Fatalf("cancelled forward answered %+v", final)
	}
	id, ch := c.start(agentproto.OpProcStart, backend.ProcessRequest{Port: port})
	awaitStarted(t, ch)
	for _, id := range append(ids[1:], id) {
		c.ok(agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: id, EOF: true}, nil)
	}
}

// TestDialLoopbackWaits: a connect that stays in progress (a listener whose
// accept queue is full drops the SYN) ends at the timeout, or when the
// context ends, and leaves no socket open.
func TestDialLoopbackWaits(t *testing.T) {
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 0); err != nil { // never accepted: the queue fills
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	// Fill the accept queue; a connect that then hangs is what the test needs.
	var fill []*os.File
	defer func() {
		for _, f := range fill {
			f.Close()
		}
	}()
	for {
		f, err := dialLoopback(context.Background(), port, 2*time.Second) // a loopback connect completes at once, or not at all here
		if errors.Is(err, errConnectTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if fill = append(fill, f); len(fill) > 64 {
			t.Fatal("the accept queue never filled: 65 connects to a listener that never accepts all completed, so no connect stays in progress to test")
		}
	}
	fds := openFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := dialLoopback(ctx, port, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled connect: %v, want context.Canceled", err)
	}
	if _, err := dialLoopback(context.Background(), port, 50*time.Millisecond); !errors.Is(err, errConnectTimeout) {
		t.Fatalf("connect past its timeout: %v, want %v", err, errConnectTimeout)
	}
	if n := openFDs(t); n != fds {
		t.Fatalf("%d descriptors open after the failed connects, %d before", n, fds)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
