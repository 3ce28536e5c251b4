package sandboxsvc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/moby/moby/client"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestErrorsMapToStableCodes(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Labels: map[string]string{"suite": "svc"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	unknown := "sbx-" + wk.Name + "-nope"

	tests := []struct {
		name       string
		call       func() error
		code       codes.Code
		reason     string
		msgContain string
	}{
		{"unknown sandbox", func() error {
			_, err := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: unknown})
			return err
		}, codes.NotFound, "sandbox_not_found", unknown},
		{"op on unknown sandbox", func() error {
			_, err := c.Ls(ctx, &plumbv1.LsRequest{SandboxId: unknown, Path: "/"})
			return err
		}, codes.NotFound, "sandbox_not_found", unknown},
		{"missing image", func() error {
			_, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Image: "plumb-absent:v9"})
			return err
		}, codes.FailedPrecondition, "image_not_found", "plumb-absent:v9"},
		{"bad path", func() error {
			_, err := c.Read(ctx, &plumbv1.ReadRequest{SandboxId: id, Path: "/a/../../etc/passwd"})
			return err
		}, codes.InvalidArgument, "invalid_path", ".."},
		{"bad pattern", func() error {
			_, err := c.Glob(ctx, &plumbv1.GlobRequest{SandboxId: id, Pattern: "[ab"})
			return err
		}, codes.InvalidArgument, "invalid_pattern", ""},
		{"missing file", func() error {
			_, err := c.Read(ctx, &plumbv1.ReadRequest{SandboxId: id, Path: "/workspace/missing.txt"})
			return err
		}, codes.NotFound, "file_not_found", "/workspace/missing.txt"},
		{"read-only root", func() error {
			_, err := c.Write(ctx, &plumbv1.WriteRequest{SandboxId: id, Path: "/etc/x", Content: []byte("x")})
			return err
		}, codes.PermissionDenied, "permission_denied", "/workspace"},
		{"blank command", func() error {
			_, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "  "}})
			return err
		}, codes.InvalidArgument, "invalid_argument", ""},
		{"timeout out of range", func() error {
			_, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true", Timeout: durationpb.New(2 * time.Hour)}})
			return err
		}, codes.InvalidArgument, "invalid_argument", "3600"},
		{"bad memory", func() error {
			_, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{MemoryBytes: 10}})
			return err
		}, codes.InvalidArgument, "invalid_argument", "memory"},
		{"request over the message limit", func() error {
			_, err := c.Write(ctx, &plumbv1.WriteRequest{SandboxId: id, Path: "/workspace/big", Content: make([]byte, 17<<20)})
			return err
		}, codes.ResourceExhausted, "", "larger than max"},
		{"small method's request over its limit", func() error {
			_, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: strings.Repeat("x", daemon.DefaultMaxRecvBytes+1)}})
			return err
		}, codes.ResourceExhausted, "", "over the limit of 4194304 bytes for /plumb.v1.SandboxService/Execute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			st := status.Convert(err)
			if st.Code() != tt.code || pbconv.Reason(err) != tt.reason || !strings.Contains(st.Message(), tt.msgContain) {
				t.Fatalf("got %v (reason %q), want %v reason %q mentioning %q", err, pbconv.Reason(err), tt.code, tt.reason, tt.msgContain)
			}
		})
	}
	// The worker is still fine after all of that.
	if _, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{Labels: map[string]string{"suite": "svc"}})
	if err != nil || len(list.GetSandboxes()) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	d, err := c.DescribeWorker(ctx, &plumbv1.DescribeWorkerRequest{})
	if err != nil || d.GetName() != wk.Name || d.GetSandboxes() != 1 {
		t.Fatalf("describe = %v, %v", d, err)
	}
}

func TestStreamsAndChunkedTransfers(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()

	t.Run("resumable execute stream", func(t *testing.T) {
		// A call cancelled after the first line leaves the command running;
		// re-attaching after sequence 1 gets the rest once, then the exit.
		cctx, ccancel := context.WithCancel(ctx)
		s, err := c.ExecuteStream(cctx, &plumbv1.ExecuteStreamRequest{SandboxId: id, Resumable: true, Command: &plumbv1.Command{
			Command: "echo first; until [ -e /tmp/svc-gate ]; do sleep 0.05; done; echo second; exit 5"}})
		if err != nil {
			t.Fatal(err)
		}
		started, err := s.Recv()
		if err != nil || started.GetStarted().GetExecutionId() == "" || started.GetSequence() != 0 {
			t.Fatalf("first message %v, %v: want started with an execution id", started, err)
		}
		xid := started.GetStarted().GetExecutionId()
		first, err := s.Recv()
		if err != nil || string(first.GetOutput().GetData()) != "first\n" || first.GetSequence() != 1 {
			t.Fatalf("second message %v, %v", first, err)
		}
		ccancel()
		if _, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "touch /tmp/svc-gate"}}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			req   *plumbv1.ExecuteStreamRequest
			code  codes.Code
			field string
		}{
			{"after without id", &plumbv1.ExecuteStreamRequest{SandboxId: id, AfterSequence: 1, Command: &plumbv1.Command{Command: "true"}}, codes.InvalidArgument, "after_sequence"},
			{"id with command", &plumbv1.ExecuteStreamRequest{SandboxId: id, ExecutionId: xid, Command: &plumbv1.Command{Command: "true"}}, codes.InvalidArgument, "command"},
			{"unknown id", &plumbv1.ExecuteStreamRequest{SandboxId: id, ExecutionId: "x-nope"}, codes.NotFound, ""},
		} {
			s, err := c.ExecuteStream(ctx, tc.req)
			if err == nil {
				_, err = s.Recv()
			}
			if status.Code(err) != tc.code || (tc.field != "" && !strings.Contains(fmt.Sprint(pbconv.FieldViolations(err)), tc.field)) {
				t.Errorf("%s: %v (violations %v), want %v on %q", tc.name, err, pbconv.FieldViolations(err), tc.code, tc.field)
			}
		}
		s, err = c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{SandboxId: id, ExecutionId: xid, AfterSequence: 1})
		if err != nil {
			t.Fatal(err)
		}
		var rest bytes.Buffer
		var res *plumbv1.ExecuteResult
		for seq := uint64(2); res == nil; seq++ {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("re-attached: %v", err)
			}
			if m.GetSequence() != seq || m.GetLostMessages() != 0 {
				t.Fatalf("message %v, want sequence %d", m, seq)
			}
			rest.Write(m.GetOutput().GetData())
			res = m.GetResult()
		}
		if rest.String() != "second\n" || res.GetExitCode() != 5 {
			t.Fatalf("re-attached: %q, result %v", rest.String(), res)
		}
	})

	t.Run("execute stream order", func(t *testing.T) {
		s, err := c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{SandboxId: id, Command: &plumbv1.Command{
			Command: "for i in 1 2 3; do echo out$i; echo err$i 1>&2; sleep 0.05; done; exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		var res *plumbv1.ExecuteResult
		chunks := 0
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if res != nil {
				t.Fatal("message after the result")
			}
			if o := m.GetOutput(); o != nil {
				out.Write(o.GetData())
				chunks++
			}
			res = m.GetResult()
		}
		want := "out1\nerr1\nout2\nerr2\nout3\nerr3\n"
		if out.String() != want || res == nil || res.GetExitCode() != 7 || res.GetOutput() != want || chunks < 2 {
			t.Fatalf("streamed %q in %d chunks, result %v", out.String(), chunks, res)
		}
	})

	t.Run("upload and download in chunks", func(t *testing.T) {
		big := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16+7) // > 3 chunks
		up, err := c.UploadFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		send := func(m *plumbv1.UploadFilesRequest) {
			if err := up.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		send(&plumbv1.UploadFilesRequest{SandboxId: id, Path: "/workspace/big.bin", Data: big[:1<<20]})
		send(&plumbv1.UploadFilesRequest{Data: big[1<<20 : 2<<20]})
		send(&plumbv1.UploadFilesRequest{Data: big[2<<20:], Eof: true})
		send(&plumbv1.UploadFilesRequest{Path: "/a/../x", Eof: true})
		send(&plumbv1.UploadFilesRequest{Path: "/workspace/empty", Eof: true})
		resp, err := up.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()
		if len(r) != 3 || r[0].GetBytesWritten() != int64(len(big)) || r[1].GetError().GetCode() != "invalid_path" || r[2].GetError() != nil {
			t.Fatalf("upload results = %v", r)
		}

		dl, err := c.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{"/workspace/big.bin", "/missing", "/workspace/empty"}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[int32]*bytes.Buffer{}
		ends := map[int32]string{}
		for {
			m, err := dl.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if got[m.GetIndex()] == nil {
				got[m.GetIndex()] = &bytes.Buffer{}
			}
			got[m.GetIndex()].Write(m.GetData())
			if len(m.GetData()) > 1<<20 {
				t.Fatalf("chunk of %d bytes", len(m.GetData()))
			}
			switch {
			case m.GetError() != nil:
				ends[m.GetIndex()] = m.GetError().GetCode()
			case m.GetEof():
				ends[m.GetIndex()] = "eof"
			}
		}
		if !bytes.Equal(got[0].Bytes(), big) || ends[0] != "eof" || ends[1] != "file_not_found" || ends[2] != "eof" || got[2].Len() != 0 {
			t.Fatalf("download: %d bytes, ends %v", got[0].Len(), ends)
		}
	})
}

// TestStalledStreamStallsOnlyItself: a client that opens an ExecuteStream
// and stops reading it does not freeze its sandbox. Other calls on the
// sandbox keep working, the stalled command is cancelled once its unread
// output passes the worker's bound, and the stream, when finally read,
// ends with RESOURCE_EXHAUSTED slow_consumer.
func TestStalledStreamStallsOnlyItself(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	run := func(cmd string) string {
		t.Helper()
		r, err := c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: cmd}})
		if err != nil {
			t.Fatalf("execute %q while a stream is stalled: %v", cmd, err)
		}
		return r.GetResult().GetOutput()
	}
	poll := func(cmd, want string) {
		t.Helper()
		for run(cmd) != want {
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Endless output that nobody reads.
	stalled, err := c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{SandboxId: id, Command: &plumbv1.Command{
		Command: "echo $$ > /tmp/stalled.pid; exec yes 0123456789abcdef0123456789abcdef", Timeout: durationpb.New(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	poll("test -s /tmp/stalled.pid && echo started", "started\n")

	// Other calls on the sandbox are served while the stream is stuck.
	if out := run("echo ok"); out != "ok\n" {
		t.Fatalf("execute = %q", out)
	}
	if _, err := c.Write(ctx, &plumbv1.WriteRequest{SandboxId: id, Path: "/workspace/note.txt", Content: []byte("still here\n")}); err != nil {
		t.Fatalf("write while a stream is stalled: %v", err)
	}
	r, err := c.Read(ctx, &plumbv1.ReadRequest{SandboxId: id, Path: "/workspace/note.txt"})
	if err != nil || r.GetContent() != "still here" {
		t.Fatalf("read while a stream is stalled: %v, %v", r, err)
	}

	// The stalled command is cancelled (its process killed) by the worker,
	// not left running until its hour-long timeout.
	poll("kill -0 $(cat /tmp/stalled.pid) 2>/dev/null && echo running || echo gone", "gone\n")

	// Reading the stream now gets what was buffered, then a clear status.
	var got int
	for {
		m, err := stalled.Recv()
		if err != nil {
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted || pbconv.Reason(err) != string(sandbox.CodeSlowConsumer) || !strings.Contains(st.Message(), "not read fast enough") {
				t.Fatalf("stalled stream ended with %v (reason %q), want RESOURCE_EXHAUSTED %s", err, pbconv.Reason(err), sandbox.CodeSlowConsumer)
			}
			break
		}
		if m.GetResult() != nil {
			t.Fatalf("stalled stream got a result: %v", m.GetResult())
		}
		got += len(m.GetOutput().GetData())
	}
	if got == 0 {
		t.Fatal("stalled stream delivered no output before its status")
	}
	if out := run("echo still ok"); out != "still ok\n" {
		t.Fatalf("execute after the stalled stream = %q", out)
	}
}

// TestCreateRuntimeMustExist: a runtime the engine lacks is the caller's
// mistake, INVALID_ARGUMENT naming the runtimes the worker has (as the
// engine reports them); a runtime it has works.
func TestCreateRuntimeMustExist(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	info, err := sandboxtest.Docker(t).Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Info.Runtimes) == 0 {
		t.Fatal("the engine reports no runtimes")
	}

	_, err = wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Runtime: "plumb-no-such-runtime"})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || pbconv.Reason(err) != string(sandbox.CodeInvalid) || !strings.Contains(st.Message(), `"plumb-no-such-runtime"`) {
		t.Fatalf("create with an unknown runtime: %v (reason %q), want INVALID_ARGUMENT %s naming it", err, pbconv.Reason(err), sandbox.CodeInvalid)
	}
	for name := range info.Info.Runtimes {
		if !strings.Contains(st.Message(), name) {
			t.Errorf("message %q does not name the engine's runtime %q", st.Message(), name)
		}
	}
	if n, _ := wk.Manager.Usage(); n != 0 {
		t.Fatalf("%d sandboxes after a rejected create", n)
	}

	sb, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Runtime: info.Info.DefaultRuntime})
	if err != nil || sb.GetSandbox().GetRuntime() != info.Info.DefaultRuntime {
		t.Fatalf("create with the engine's runtime %q: %v, %v", info.Info.DefaultRuntime, sb, err)
	}
}

// TestCancelledCreatesLeaveNothing: CreateSandbox calls cut short by tiny
// deadlines or a client going away, at every stage of a create, leave no
// container and no volume behind (labelled or not), and hold no quota.
func TestCancelledCreatesLeaveNothing(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	cli := sandboxtest.Docker(t)
	// Remove leftovers even when the test fails.
	t.Cleanup(func() { removeWorkerLeftovers(t, cli, wk.Name) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	// Warm up: the first create derives the sandbox image.
	sb, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wk.Client.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: sb.GetSandbox().GetId()}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		after  time.Duration
		cancel bool // the client goes away instead of a deadline passing
	}{
		{"deadline 50ms", 50 * time.Millisecond, false},
		{"deadline 100ms", 100 * time.Millisecond, false},
		{"deadline 150ms", 150 * time.Millisecond, false},
		{"deadline 200ms", 200 * time.Millisecond, false},
		{"deadline 300ms", 300 * time.Millisecond, false},
		{"deadline 400ms", 400 * time.Millisecond, false},
		{"deadline 600ms", 600 * time.Millisecond, false},
		{"cancel 50ms", 50 * time.Millisecond, true},
		{"cancel 200ms", 200 * time.Millisecond, true},
		{"cancel 400ms", 400 * time.Millisecond, true},
	}
	cutShort := 0
	for round := range 2 {
		for _, tt := range tests {
			var cctx context.Context
			var stop context.CancelFunc
			if tt.cancel {
				cctx, stop = context.WithCancel(ctx)
				time.AfterFunc(tt.after, stop)
			} else {
				cctx, stop = context.WithTimeout(ctx, tt.after)
			}
			sb, err := wk.Client.CreateSandbox(cctx, &plumbv1.CreateSandboxRequest{})
			stop()
			switch code := status.Code(err); {
			case err == nil: // fast enough: a real sandbox, not a leftover
				if _, err := wk.Client.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: sb.GetSandbox().GetId()}); err != nil {
					t.Fatal(err)
				}
			case code != codes.DeadlineExceeded && code != codes.Canceled:
				t.Fatalf("round %d, %s: %v, want DEADLINE_EXCEEDED or CANCELLED", round, tt.name, err)
			default:
				cutShort++
			}
		}
	}
	t.Logf("%d of %d creates cut short", cutShort, 2*len(tests))
	if cutShort == 0 {
		t.Fatal("no create was cut short: the test proves nothing")
	}

	// The worker cleans up after each cut-short create; wait until it has.
	for {
		cs, vs := workerLeftovers(t, cli, wk.Name)
		if len(cs)+len(vs) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("leftovers of cancelled creates: containers %v volumes %v", cs, vs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	list, err := wk.Client.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Fatalf("sandboxes after cancelled creates: %v, %v", list, err)
	}
	for n, mem := wk.Manager.Usage(); n != 0 || mem != 0; n, mem = wk.Manager.Usage() {
		if ctx.Err() != nil {
			t.Fatalf("quota still held after cancelled creates: %d sandboxes, %d bytes", n, mem)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workerLeftovers lists the containers (id) and volumes (name) of worker
// by label and by name, so unlabelled leftovers count too.
func workerLeftovers(t *testing.T, cli *client.Client, worker string) (containers, volumes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, vs, err := sandboxtest.Leftovers(ctx, cli, workerFilters(worker)...)
	if err != nil {
		t.Fatal(err)
	}
	return cs, vs
}

// removeWorkerLeftovers removes what workerLeftovers finds.
func removeWorkerLeftovers(t *testing.T, cli *client.Client, worker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := sandboxtest.RemoveLeftovers(ctx, cli, workerFilters(worker)...); err != nil {
		t.Errorf("remove leftovers of worker %s: %v", worker, err)
	}
}

// workerFilters match a worker's containers and volumes by label and by
// name.
func workerFilters(worker string) []client.Filters {
	return []client.Filters{
		sandboxtest.Label(sandbox.LabelWorker, worker),
		client.Filters{}.Add("name", "sbx-"+worker+"-"),
	}
}

// An empty path in Ls, Glob or Grep means the sandbox's home: the working
// dir, which is "/" in file paths when files_root is the working dir.
func TestEmptyPathIsTheHome(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tt := range []struct {
		filesRoot string
		home      string
	}{
		{"", "/workspace"},
		{"/workspace", "/"},
	} {
		t.Run("files_root="+tt.filesRoot, func(t *testing.T) {
			sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{FilesRoot: tt.filesRoot})
			if err != nil {
				t.Fatal(err)
			}
			id := sb.GetSandbox().GetId()
			want := strings.TrimSuffix(tt.home, "/") + "/needle.txt"
			if _, err := c.Write(ctx, &plumbv1.WriteRequest{SandboxId: id, Path: want, Content: []byte("needle\n")}); err != nil {
				t.Fatal(err)
			}
			ls, err := c.Ls(ctx, &plumbv1.LsRequest{SandboxId: id})
			if err != nil {
				t.Fatalf("ls with no path: %v", err)
			}
			var listed []string
			for _, e := range ls.GetEntries() {
				listed = append(listed, e.GetPath())
			}
			if !slices.Contains(listed, want) {
				t.Errorf("ls with no path = %v, want %s listed", listed, want)
			}
			gl, err := c.Glob(ctx, &plumbv1.GlobRequest{SandboxId: id, Pattern: "needle.txt"})
			if err != nil {
				t.Fatalf("glob with no path: %v", err)
			}
			if m := gl.GetMatches(); len(m) != 1 || m[0].GetPath() != want {
				t.Errorf("glob with no path = %v, want %s", m, want)
			}
			gr, err := c.Grep(ctx, &plumbv1.GrepRequest{SandboxId: id, Pattern: "needle", Glob: "needle.txt"})
			if err != nil {
				t.Fatalf("grep with no path: %v", err)
			}
			if m := gr.GetMatches(); len(m) != 1 || m[0].GetPath() != want || m[0].GetLine() != 1 {
				t.Errorf("grep with no path = %v, want %s:1", m, want)
			}
		})
	}
}

// A long but valid path that does not exist is NOT_FOUND for any client:
// the status quotes the path once, cut at 200 characters (docs/file-tools.md §6),
// so its trailers stay far below the 8 KiB header list that default HTTP/2
// clients (grpcio among them) accept.
func TestLongPathErrorFitsDefaultHeaderLimits(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	path := "/workspace/" + strings.Repeat(strings.Repeat("d", 199)+"/", 11) + "missing.txt"
	if len(path) < 2200 || len(path) > 4096 {
		t.Fatalf("path of %d bytes, want a valid 2.2 KB path", len(path))
	}
	strict, err := grpc.NewClient(wk.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithMaxHeaderListSize(8192))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { strict.Close() })
	for _, tt := range []struct {
		name string
		c    plumbv1.SandboxServiceClient
	}{
		{"default client", wk.Client},
		{"client with an 8 KiB header list", plumbv1.NewSandboxServiceClient(strict)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				op     string
				call   func() error
				code   codes.Code
				reason string
			}{
				{"read", func() error {
					_, err := tt.c.Read(ctx, &plumbv1.ReadRequest{SandboxId: id, Path: path})
					return err
				}, codes.NotFound, "file_not_found"},
				{"edit", func() error {
					_, err := tt.c.Edit(ctx, &plumbv1.EditRequest{SandboxId: id, Path: path, OldString: strings.Repeat("o", 3000), NewString: "n"})
					return err
				}, codes.NotFound, "file_not_found"},
				{"ls", func() error {
					_, err := tt.c.Ls(ctx, &plumbv1.LsRequest{SandboxId: id, Path: path})
					return err
				}, codes.NotFound, "file_not_found"},
				{"upload without eof", func() error {
					up, err := tt.c.UploadFiles(ctx)
					if err != nil {
						return err
					}
					if err := up.Send(&plumbv1.UploadFilesRequest{SandboxId: id, Path: path, Data: []byte("x")}); err != nil {
						return err
					}
					_, err = up.CloseAndRecv()
					return err
				}, codes.InvalidArgument, ""},
			} {
				err := c.call()
				st := status.Convert(err)
				if st.Code() != c.code || pbconv.Reason(err) != c.reason {
					t.Fatalf("%s: %v (reason %q), want %v %q", c.op, err, pbconv.Reason(err), c.code, c.reason)
				}
				if size := proto.Size(st.Proto()); size > 1024 {
					t.Errorf("%s: status of %d bytes (message and details), want at most 1 KiB: %v", c.op, size, st.Proto())
				}
				if msg := st.Message(); strings.Count(msg, path[:150]) != 1 || strings.Contains(msg, path[:250]) {
					t.Errorf("%s: message %q should quote the path once, cut at 200 characters", c.op, msg)
				}
			}
		})
	}
}
