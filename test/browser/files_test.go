package browser

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runToInterrupt runs the demo on a new thread until it pauses at its
// gated execute call, and returns the thread id.
func runToInterrupt(t *testing.T, ctx context.Context, c plumbv1.AgentServiceClient) string {
	t.Helper()
	st, err := c.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "show me"}}})
	if err != nil {
		t.Fatal(err)
	}
	var thread string
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ev := r.GetEvent()
		if s := ev.GetRunStarted(); s != nil {
			thread = s.GetThreadId()
		}
		if e := ev.GetError(); e != nil {
			t.Fatalf("run failed: %v", e)
		}
		if f := ev.GetRunFinished(); f != nil {
			t.Fatalf("run finished (%v) without the demo's approval", f.GetStatus())
		}
	}
	return thread
}

func TestThreadFiles(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := plumbv1.NewAgentServiceClient(s.conn)
	thread := runToInterrupt(t, ctx, c)

	ls, err := c.ListThreadFiles(ctx, &plumbv1.ListThreadFilesRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if ls.GetPath() != "/workspace" {
		t.Errorf("listed %q, want the workspace", ls.GetPath())
	}
	var found bool
	for _, e := range ls.GetEntries() {
		found = found || e.GetPath() == "/workspace/hello.sh"
	}
	if !found {
		t.Fatalf("the demo's script is not listed: %v", ls.GetEntries())
	}
	whole, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/hello.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(whole.GetContent()), "hello from the plumb demo") || whole.GetMore() || whole.GetSize() != int64(len(whole.GetContent())) {
		t.Fatalf("read %q (size %d, more %v)", whole.GetContent(), whole.GetSize(), whole.GetMore())
	}
	part, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/hello.sh", Offset: 2, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if string(part.GetContent()) != string(whole.GetContent()[2:7]) || !part.GetMore() {
		t.Fatalf("read [2,7) = %q (more %v), want %q", part.GetContent(), part.GetMore(), whole.GetContent()[2:7])
	}

	other := plumbv1.NewAgentServiceClient(s.other)
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
		field  string
	}{
		{"other tenant lists", func() error {
			_, err := other.ListThreadFiles(ctx, &plumbv1.ListThreadFilesRequest{ThreadId: thread})
			return err
		}, codes.NotFound, "THREAD_NOT_FOUND", ""},
		{"other tenant reads", func() error {
			_, err := other.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/hello.sh"})
			return err
		}, codes.NotFound, "THREAD_NOT_FOUND", ""},
		{"no thread id", func() error {
			_, err := c.ListThreadFiles(ctx, &plumbv1.ListThreadFilesRequest{})
			return err
		}, codes.InvalidArgument, "", "thread_id"},
		{"no path", func() error {
			_, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread})
			return err
		}, codes.InvalidArgument, "", "path"},
		{"limit too large", func() error {
			_, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/hello.sh", Limit: 2 << 20})
			return err
		}, codes.InvalidArgument, "", "limit"},
		{"negative offset", func() error {
			_, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/hello.sh", Offset: -1})
			return err
		}, codes.InvalidArgument, "", "offset"},
		{"missing file", func() error {
			_, err := c.ReadThreadFile(ctx, &plumbv1.ReadThreadFileRequest{ThreadId: thread, Path: "/workspace/nope"})
			return err
		}, codes.NotFound, "", ""},
		{"path escapes", func() error {
			_, err := c.ListThreadFiles(ctx, &plumbv1.ListThreadFilesRequest{ThreadId: thread, Path: "../../etc"})
			return err
		}, codes.InvalidArgument, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tc.code)
			}
			if tc.reason != "" && reason(st) != tc.reason {
				t.Errorf("reason %q, want %q", reason(st), tc.reason)
			}
			if tc.field != "" && !hasField(st, tc.field) {
				t.Errorf("no violation of %s in %v", tc.field, st.Details())
			}
		})
	}
}
