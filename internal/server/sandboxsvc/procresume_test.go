package sandboxsvc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// TestResumableProcess: a resumable Process stream cancelled mid-way
// leaves its process running; a stream that re-attaches with the
// execution id and the last sequence it saw gets the rest of the output
// exactly once and in order, its stdin reaches the same process, and the
// exit comes last. A newer stream takes over (the older ends
// UNAVAILABLE); another tenant's stream does not find the execution.
func TestResumableProcess(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(base, tenant.MetadataKey, name)
	}
	ctx := as("acme")
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()

	// The process prints its pid, then echoes each stdin line, and exits
	// 4 at "bye".
	sctx, scancel := context.WithCancel(ctx)
	s, err := c.Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(s plumbv1.SandboxService_ProcessClient, m *plumbv1.ProcessRequest) {
		t.Helper()
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	stdin := func(s plumbv1.SandboxService_ProcessClient, line string) {
		send(s, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Stdin{Stdin: []byte(line)}})
	}
	send(s, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{SandboxId: id, Resumable: true,
		Command: `echo pid=$$; while read l; do echo "got $l pid=$$"; [ "$l" = bye ] && exit 4; done`}}})
	m, err := s.Recv()
	xid := m.GetStarted().GetExecutionId()
	if err != nil || !strings.HasPrefix(xid, "p-") || m.GetSequence() != 0 {
		t.Fatalf("first message %v, %v: want started with an execution id", m, err)
	}
	// read takes messages until out holds want; it checks that sequences
	// follow last with no gap.
	var last uint64
	var out bytes.Buffer
	var exit *plumbv1.ProcessExit
	read := func(s plumbv1.SandboxService_ProcessClient, want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) && exit == nil {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("waiting for %q (have %q): %v", want, out.String(), err)
			}
			if m.GetSequence() != last+1 || m.GetLostMessages() != 0 {
				t.Fatalf("message %v after sequence %d", m, last)
			}
			last = m.GetSequence()
			out.Write(m.GetStdout())
			exit = m.GetExit()
		}
	}
	read(s, "\n")
	pid := strings.TrimSpace(strings.TrimPrefix(out.String(), "pid="))
	stdin(s, "one\n")
	read(s, "got one pid="+pid+"\n")
	scancel() // the connection drops

	// A second stream re-attaches and sends "two"; it sees the answer
	// (which this test does not count as read: the third stream gets it
	// again, replayed after the same sequence).
	s2ctx, s2cancel := context.WithCancel(ctx)
	defer s2cancel()
	s2, err := c.Process(s2ctx)
	if err != nil {
		t.Fatal(err)
	}
	send(s2, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{SandboxId: id, ExecutionId: xid, AfterSequence: last}}})
	stdin(s2, "two\n")
	var seen bytes.Buffer
	for seq := last + 1; !strings.Contains(seen.String(), "got two pid="+pid+"\n"); seq++ {
		m, err := s2.Recv()
		if err != nil || m.GetSequence() != seq {
			t.Fatalf("second stream: %v, %v; want sequence %d", m, err, seq)
		}
		seen.Write(m.GetStdout())
	}

	// Refused re-attaches: another tenant (its own sandbox, or ours), a
	// start that mixes a command in, after_sequence without an id, an
	// after_sequence beyond what was sent.
	other, err := c.CreateSandbox(as("beta"), &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		start *plumbv1.ProcessStart
		code  codes.Code
	}{
		{"another tenant's sandbox", as("beta"), &plumbv1.ProcessStart{SandboxId: other.GetSandbox().GetId(), ExecutionId: xid}, codes.NotFound},
		{"another tenant, our sandbox", as("beta"), &plumbv1.ProcessStart{SandboxId: id, ExecutionId: xid}, codes.NotFound},
		{"id with a command", ctx, &plumbv1.ProcessStart{SandboxId: id, ExecutionId: xid, Command: "true"}, codes.InvalidArgument},
		{"after without an id", ctx, &plumbv1.ProcessStart{SandboxId: id, AfterSequence: 1, Command: "true"}, codes.InvalidArgument},
		{"after beyond the end", ctx, &plumbv1.ProcessStart{SandboxId: id, ExecutionId: xid, AfterSequence: 1 << 40}, codes.InvalidArgument},
		{"unknown id", ctx, &plumbv1.ProcessStart{SandboxId: id, ExecutionId: "p-nope"}, codes.NotFound},
	} {
		s, err := c.Process(tc.ctx)
		if err != nil {
			t.Fatal(err)
		}
		send(s, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: tc.start}})
		if _, err := s.Recv(); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}

	// Takeover: a third stream attaches after the sequence the first saw
	// last; the second ends UNAVAILABLE.
	s3, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send(s3, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{SandboxId: id, ExecutionId: xid, AfterSequence: last}}})
	read(s3, "got two pid="+pid+"\n")
	for {
		_, err := s2.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the taken-over stream ended with %v, want UNAVAILABLE", err)
			}
			break
		}
	}
	stdin(s3, "bye\n")
	read(s3, "got bye pid="+pid+"\n")
	read(s3, "\x00") // nothing more but the exit
	if exit.GetExitCode() != 4 {
		t.Fatalf("exit %v, want 4", exit)
	}
	want := "pid=" + pid + "\ngot one pid=" + pid + "\ngot two pid=" + pid + "\ngot bye pid=" + pid + "\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q (each line once, in order)", out.String(), want)
	}
	if _, err := s3.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the exit: %v, want the end of the stream", err)
	}
}
