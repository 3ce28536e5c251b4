package sandboxsvc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestErrorsMapToStableCodes(t *testing.T) {
	wk := sandboxtest.StartWorker(t, sandbox.Config{})
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			st := status.Convert(err)
			if st.Code() != tt.code || server.Reason(err) != tt.reason || !strings.Contains(st.Message(), tt.msgContain) {
				t.Fatalf("got %v (reason %q), want %v reason %q mentioning %q", err, server.Reason(err), tt.code, tt.reason, tt.msgContain)
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
	wk := sandboxtest.StartWorker(t, sandbox.Config{})
	c := wk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()

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

// An empty path in Ls, Glob or Grep means the sandbox's home: the working
// dir, which is "/" in file paths when files_root is the working dir.
func TestEmptyPathIsTheHome(t *testing.T) {
	wk := sandboxtest.StartWorker(t, sandbox.Config{})
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
// the status quotes the path once, cut at 200 characters (file-tools §6),
// so its trailers stay far below the 8 KiB header list that default HTTP/2
// clients (grpcio among them) accept.
func TestLongPathErrorFitsDefaultHeaderLimits(t *testing.T) {
	wk := sandboxtest.StartWorker(t, sandbox.Config{})
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
				if st.Code() != c.code || server.Reason(err) != c.reason {
					t.Fatalf("%s: %v (reason %q), want %v %q", c.op, err, server.Reason(err), c.code, c.reason)
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
