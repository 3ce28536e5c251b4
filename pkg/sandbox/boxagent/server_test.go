package boxagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// memFiles is a TEST-ONLY in-memory backend.Backend for the dispatch tests:
// it is not a file engine (it has no directories and none of the docs/file-tools.md §4
// semantics) and only records what it was asked, so that the tests can
// check how the agent decodes arguments and relays results and errors.
// The real engine is tested by the backend conformance suite.
type memFiles struct {
	mu    sync.Mutex
	files map[string][]byte
	calls []string
	// block, when non-nil, makes Ls wait for it or for ctx.
	block chan struct{}
}

func newMemFiles() *memFiles { return &memFiles{files: map[string][]byte{}} }

func (m *memFiles) record(format string, args ...any) {
	m.mu.Lock()
	m.calls = append(m.calls, fmt.Sprintf(format, args...))
	m.mu.Unlock()
}

func (m *memFiles) lastCall() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) == 0 {
		return ""
	}
	return m.calls[len(m.calls)-1]
}

func (m *memFiles) Ls(ctx context.Context, path string) (backend.LsResult, error) {
	m.record("ls %s", path)
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return backend.LsResult{}, ctx.Err()
		}
	}
	switch path {
	case "/missing":
		return backend.LsResult{}, backend.Errorf(backend.CodeFileNotFound, path, "ls %s: no such file or directory", path)
	case "/oserror":
		return backend.LsResult{}, &os.PathError{Op: "open", Path: "/host/secret/dir", Err: os.ErrNotExist}
	case "/huge":
		// More than one frame can hold.
		return backend.LsResult{Entries: []backend.FileInfo{{Path: strings.Repeat("x", agentproto.MaxFrameBytes)}}}, nil
	}
	return backend.LsResult{Entries: []backend.FileInfo{{Path: path + "/a", Kind: backend.KindFile, Size: 1}}}, nil
}

func (m *memFiles) Read(_ context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	m.record("read %s %d %d", req.Path, req.Offset, req.Limit)
	return backend.ReadResult{Path: req.Path, Encoding: backend.EncodingUTF8, Content: "line", StartLine: 1, EndLine: 1}, nil
}

func (m *memFiles) Write(_ context.Context, path string, content []byte) (backend.WriteResult, error) {
	m.record("write %s %q", path, content)
	return backend.WriteResult{Path: path, BytesWritten: int64(len(content)), Created: true}, nil
}

func (m *memFiles) Edit(_ context.Context, req backend.EditRequest) (backend.EditResult, error) {
	m.record("edit %s %q %q %v", req.Path, req.Old, req.New, req.ReplaceAll)
	return backend.EditResult{Path: req.Path, Occurrences: 1}, nil
}

func (m *memFiles) Delete(_ context.Context, path string) (backend.DeleteResult, error) {
	m.record("delete %s", path)
	return backend.DeleteResult{Path: path, Removed: 2}, nil
}

func (m *memFiles) Grep(_ context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	m.record("grep %q %s %q %v %d", req.Pattern, req.Path, req.Glob, req.Regex, req.MaxCount)
	return backend.GrepResult{Matches: []backend.GrepMatch{{Path: "/a", Line: 3, Text: "x"}}, FilesSearched: 1}, nil
}

func (m *memFiles) Glob(_ context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	m.record("glob %q %s", req.Pattern, req.Path)
	return backend.GlobResult{Matches: []backend.FileInfo{{Path: "/a.go"}}}, nil
}

func (m *memFiles) Upload(_ context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, it := range items {
		m.calls = append(m.calls, fmt.Sprintf("upload %s %d", it.Path, len(it.Content)))
		out[i].Path = it.Path
		if strings.HasPrefix(it.Path, "/ro/") {
			out[i].Err = backend.Errorf(backend.CodePermissionDenied, it.Path, "upload %s: read-only file system", it.Path)
			continue
		}
		m.files[it.Path] = bytes.Clone(it.Content)
		out[i].BytesWritten = int64(len(it.Content))
	}
	return out, nil
}

func (m *memFiles) Download(_ context.Context, paths []string) ([]backend.DownloadResult, error) {
	out := make([]backend.DownloadResult, len(paths))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range paths {
		out[i].Path = p
		np, err := vpath.Normalize(p)
		if err != nil {
			out[i].Err = backend.FromOS("download", p, err)
			continue
		}
		b, ok := m.files[np]
		if !ok {
			out[i].Err = backend.Errorf(backend.CodeFileNotFound, np, "download %s: no such file or directory", np)
			continue
		}
		out[i].Content, out[i].Size = bytes.Clone(b), int64(len(b))
	}
	return out, nil
}

// TestFileOpsDispatch checks that each file op reaches the engine with its
// arguments and that results and errors come back unchanged.
func TestFileOpsDispatch(t *testing.T) {
	files := newMemFiles()
	c := startAgent(t, Config{Files: files})
	big := bytes.Repeat([]byte("x"), agentproto.ChunkBytes+1)
	tests := []struct {
		name     string
		op       agentproto.Op
		args     any
		wantCall string
		want     any // expected result, compared as JSON
		wantErr  backend.Code
		errNot   string // must not appear in the error message
	}{
		{name: "ls", op: agentproto.OpLs, args: agentproto.PathArgs{Path: "/d"}, wantCall: "ls /d",
			want: backend.LsResult{Entries: []backend.FileInfo{{Path: "/d/a", Kind: backend.KindFile, Size: 1}}}},
		{name: "ls error passes through", op: agentproto.OpLs, args: agentproto.PathArgs{Path: "/missing"}, wantCall: "ls /missing", wantErr: backend.CodeFileNotFound},
		{name: "os error is classified, host path hidden", op: agentproto.OpLs, args: agentproto.PathArgs{Path: "/oserror"}, wantCall: "ls /oserror", wantErr: backend.CodeFileNotFound, errNot: "/host/secret"},
		{name: "result over the frame limit", op: agentproto.OpLs, args: agentproto.PathArgs{Path: "/huge"}, wantCall: "ls /huge", wantErr: backend.CodeTooLarge},
		{name: "read", op: agentproto.OpRead, args: backend.ReadRequest{Path: "/f", Offset: 7, Limit: 5}, wantCall: "read /f 7 5",
			want: backend.ReadResult{Path: "/f", Encoding: backend.EncodingUTF8, Content: "line", StartLine: 1, EndLine: 1}},
		{name: "write", op: agentproto.OpWrite, args: withPayload{agentproto.WriteArgs{Path: "/w"}, []byte("a\x00\nb")}, wantCall: `write /w "a\x00\nb"`,
			want: backend.WriteResult{Path: "/w", BytesWritten: 4, Created: true}},
		{name: "empty write", op: agentproto.OpWrite, args: agentproto.WriteArgs{Path: "/empty"}, wantCall: `write /empty ""`,
			want: backend.WriteResult{Path: "/empty", Created: true}},
		{name: "write larger than a chunk", op: agentproto.OpWrite, args: withPayload{agentproto.WriteArgs{Path: "/big"}, big}, wantCall: fmt.Sprintf("write /big %q", big),
			want: backend.WriteResult{Path: "/big", BytesWritten: int64(len(big)), Created: true}},
		{name: "edit", op: agentproto.OpEdit, args: backend.EditRequest{Path: "/e", Old: "a", New: "b", ReplaceAll: true}, wantCall: `edit /e "a" "b" true`,
			want: backend.EditResult{Path: "/e", Occurrences: 1}},
		{name: "delete", op: agentproto.OpDelete, args: agentproto.PathArgs{Path: "/dir"}, wantCall: "delete /dir",
			want: backend.DeleteResult{Path: "/dir", Removed: 2}},
		{name: "grep", op: agentproto.OpGrep, args: backend.GrepRequest{Pattern: "p", Path: "/", Glob: "*.go", Regex: true, MaxCount: 9}, wantCall: `grep "p" / "*.go" true 9`,
			want: backend.GrepResult{Matches: []backend.GrepMatch{{Path: "/a", Line: 3, Text: "x"}}, FilesSearched: 1}},
		{name: "glob", op: agentproto.OpGlob, args: backend.GlobRequest{Pattern: "*.go", Path: "/src"}, wantCall: `glob "*.go" /src`,
			want: backend.GlobResult{Matches: []backend.FileInfo{{Path: "/a.go"}}}},
		{name: "unknown argument field", op: agentproto.OpLs, args: map[string]any{"path": "/", "recursive": true}, wantErr: backend.CodeInvalidArgument},
		{name: "wrong argument type", op: agentproto.OpRead, args: map[string]any{"path": "/", "offset": "x"}, wantErr: backend.CodeInvalidArgument},
		{name: "unknown op", op: "chmod", args: agentproto.PathArgs{Path: "/"}, wantErr: backend.CodeUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := c.on(t)
			before := files.lastCall()
			_, final := c.call(tt.op, tt.args)
			if tt.wantCall != "" && files.lastCall() != tt.wantCall {
				t.Fatalf("engine call %q, want %q", files.lastCall(), tt.wantCall)
			}
			if tt.wantCall == "" && files.lastCall() != before {
				t.Fatalf("engine was called (%q) for a request that should fail first", files.lastCall())
			}
			if tt.wantErr != "" {
				if final.Error == nil || final.Error.Code != tt.wantErr {
					t.Fatalf("final %s / %v, want error %s", final.Result, final.Error, tt.wantErr)
				}
				if tt.errNot != "" && strings.Contains(final.Error.Message, tt.errNot) {
					t.Fatalf("error message %q leaks %q", final.Error.Message, tt.errNot)
				}
				return
			}
			if final.Error != nil {
				t.Fatal(final.Error)
			}
			want, _ := json.Marshal(tt.want)
			if !bytes.Equal(final.Result, want) {
				t.Fatalf("result %s, want %s", final.Result, want)
			}
		})
	}
}

// TestFileOpsWithoutEngine: with no engine every file op is unsupported,
// and execute and hello still work.
func TestFileOpsWithoutEngine(t *testing.T) {
	c := startAgent(t, Config{})
	for _, op := range []agentproto.Op{agentproto.OpLs, agentproto.OpRead, agentproto.OpWrite, agentproto.OpEdit, agentproto.OpDelete, agentproto.OpGrep, agentproto.OpGlob, agentproto.OpUploadOpen, agentproto.OpDownloadOpen} {
		t.Run(string(op), func(t *testing.T) {
			c.on(t).fails(op, agentproto.PathArgs{Path: "/a"}, backend.CodeUnsupported)
		})
	}
	var h agentproto.Hello
	c.ok(agentproto.OpHello, nil, &h)
}

// TestBeforeCommands: requests that start no command are answered while
// Config.BeforeCommands runs; a command starts only after it returned.
func TestBeforeCommands(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "ran")
	release := make(chan struct{})
	ranEarly := make(chan bool, 1)
	c := startAgent(t, Config{Root: root, BeforeCommands: func() {
		<-release
		_, err := os.Stat(marker)
		ranEarly <- err == nil
	}})
	_, exec := c.start(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "touch " + marker}})
	// Answered while BeforeCommands waits; frames are read in order, so
	// the execute has been taken by the first answer. The rounds give a
	// command that did not wait the time to run.
	for range 200 {
		var h agentproto.Hello
		c.ok(agentproto.OpHello, nil, &h)
		if _, err := os.Stat(marker); err == nil {
			break
		}
	}
	close(release)
	if <-ranEarly {
		t.Fatal("the command ran before BeforeCommands returned")
	}
	if _, final := c.wait(exec); final.Error != nil {
		t.Fatalf("execute: %v", final.Error)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the command did not run after BeforeCommands: %v", err)
	}
}

func TestHello(t *testing.T) {
	for _, tt := range []struct{ version, want string }{{"", "dev"}, {"v1.2.3", "v1.2.3"}} {
		t.Run(tt.want, func(t *testing.T) {
			root := t.TempDir()
			c := startAgent(t, Config{Root: root, Workspace: "/work", Version: tt.version})
			var h agentproto.Hello
			c.ok(agentproto.OpHello, nil, &h)
			want := agentproto.Hello{Version: agentproto.Version, AgentVersion: tt.want, UID: os.Getuid(), GID: os.Getgid(), Root: root, Workspace: "/work"}
			if h != want {
				t.Fatalf("hello %+v, want %+v", h, want)
			}
		})
	}
}

// TestUploadNeedsStreamer: an engine without the streaming methods
// answers uploads and downloads with unsupported.
func TestUploadNeedsStreamer(t *testing.T) {
	c := startAgent(t, Config{Files: newMemFiles()})
	c.fails(agentproto.OpUploadOpen, agentproto.PathArgs{Path: "/x"}, backend.CodeUnsupported)
	c.fails(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/x"}, backend.CodeUnsupported)
}

// TestMalformedFrames: bad frames are answered when their id can be read,
// skipped otherwise, and the server keeps serving.
func TestMalformedFrames(t *testing.T) {
	c := startAgent(t, Config{Files: newMemFiles()})
	tests := []struct {
		name  string
		frame string
		id    uint64 // 0: no answer expected
		code  backend.Code
	}{
		{name: "not JSON", frame: `garbage`},
		{name: "JSON array", frame: `[1,2]`},
		{name: "missing id", frame: `{"op":"hello"}`},
		{name: "zero id", frame: `{"id":0,"op":"hello"}`},
		{name: "negative id", frame: `{"id":-3,"op":"hello"}`},
		{name: "missing op", frame: `{"id":11}`, id: 11, code: backend.CodeInvalidArgument},
		{name: "unknown field", frame: `{"id":12,"op":"hello","extra":1}`, id: 12, code: backend.CodeInvalidArgument},
		{name: "trailing data", frame: `{"id":13,"op":"hello"} {}`, id: 13, code: backend.CodeInvalidArgument},
		{name: "args not an object", frame: `{"id":14,"op":"ls","args":[1]}`, id: 14, code: backend.CodeInvalidArgument},
		{name: "bad base64", frame: `{"id":15,"op":"write","args":{"path":"/a","content":"!!"}}`, id: 15, code: backend.CodeInvalidArgument},
		{name: "execute args of the wrong type", frame: `{"id":16,"op":"execute","args":{"command":5}}`, id: 16, code: backend.CodeInvalidArgument},
		{name: "cancel args of the wrong type", frame: `{"id":17,"op":"cancel","args":{"target":"x"}}`, id: 17, code: backend.CodeInvalidArgument},
		{name: "unknown op", frame: `{"id":18,"op":"reboot"}`, id: 18, code: backend.CodeUnsupported},
		{name: "empty line", frame: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := c.on(t)
			var ch chan agentproto.Response
			if tt.id != 0 {
				ch = c.expect(tt.id)
			}
			c.raw([]byte(tt.frame))
			if ch != nil {
				_, final := c.wait(ch)
				if final.Error == nil || final.Error.Code != tt.code {
					t.Fatalf("final %+v, want error %s", final, tt.code)
				}
			}
			// The server is still there, and in order.
			var h agentproto.Hello
			c.ok(agentproto.OpHello, nil, &h)
		})
	}
	t.Run("oversized frame", func(t *testing.T) {
		c := c.on(t)
		big := append([]byte(`{"id":19,"op":"write","args":{"path":"/a","content":"`), bytes.Repeat([]byte("A"), agentproto.MaxFrameBytes)...)
		big = append(big, `"}}`...)
		c.raw(big)
		var h agentproto.Hello
		c.ok(agentproto.OpHello, nil, &h)
	})
}

// TestFileOpCancel cancels a blocked file op.
func TestFileOpCancel(t *testing.T) {
	files := newMemFiles()
	files.block = make(chan struct{})
	defer close(files.block)
	c := startAgent(t, Config{Files: files})
	id, ch := c.start(agentproto.OpLs, agentproto.PathArgs{Path: "/slow"})
	waitFor(t, func() bool { return files.lastCall() == "ls /slow" })
	c.ok(agentproto.OpCancel, agentproto.CancelArgs{Target: id}, nil)
	_, final := c.wait(ch)
	if final.Error == nil || final.Error.Code != backend.CodeCancelled {
		t.Fatalf("final %+v, want cancelled", final)
	}
}

// TestFileOpDeadline: a file op that outlives FileOpTimeout fails with
// timeout.
func TestFileOpDeadline(t *testing.T) {
	files := newMemFiles()
	files.block = make(chan struct{})
	defer close(files.block)
	c := startAgent(t, Config{Files: files, FileOpTimeout: 50 * time.Millisecond})
	c.fails(agentproto.OpLs, agentproto.PathArgs{Path: "/slow"}, backend.CodeTimeout)
}

// TestDuplicateID: a second request with the id of one in flight is
// refused, and the first one still completes.
func TestDuplicateID(t *testing.T) {
	files := newMemFiles()
	files.block = make(chan struct{})
	c := startAgent(t, Config{Files: files})
	ch := c.expect(77)
	c.raw([]byte(`{"id":77,"op":"ls","args":{"path":"/slow"}}`))
	waitFor(t, func() bool { return files.lastCall() == "ls /slow" })
	c.raw([]byte(`{"id":77,"op":"ls","args":{"path":"/other"}}`))
	_, first := c.wait(ch)
	if first.Error == nil || !strings.Contains(first.Error.Message, "already in flight") {
		t.Fatalf("got %+v, want the duplicate refused", first)
	}
	close(files.block)
	_, second := c.wait(ch)
	if second.Error != nil {
		t.Fatalf("the original request failed: %v", second.Error)
	}
}

// TestServeStops checks Serve's ways to end.
func TestServeStops(t *testing.T) {
	t.Run("context cancelled", func(t *testing.T) {
		inR, inW := io.Pipe()
		defer inW.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, inR, io.Discard, Config{Root: t.TempDir(), Env: []string{}}) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Serve returned %v, want context.Canceled", err)
			}
		case <-time.After(callTimeout):
			t.Fatal("Serve did not return")
		}
		inW.Close() // lets the reading goroutine end
	})
	t.Run("context cancelled, os pipe input", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, r, io.Discard, Config{Root: t.TempDir(), Env: []string{}}) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Serve returned %v", err)
			}
		case <-time.After(callTimeout):
			t.Fatal("Serve did not return")
		}
	})
	t.Run("output closed", func(t *testing.T) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		outR.Close()
		done := make(chan error, 1)
		go func() { done <- Serve(context.Background(), inR, outW, Config{Root: t.TempDir(), Env: []string{}}) }()
		go func() { _, _ = inW.Write([]byte(`{"id":1,"op":"hello"}` + "\n")) }()
		select {
		case err := <-done:
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("Serve returned %v, want the write error", err)
			}
		case <-time.After(callTimeout):
			t.Fatal("Serve did not return")
		}
		inW.Close()
	})
	t.Run("bad root", func(t *testing.T) {
		err := Serve(context.Background(), strings.NewReader(""), io.Discard, Config{Root: "/no/such/root/dir"})
		if err == nil {
			t.Fatal("Serve accepted a missing root")
		}
	})
}

// waitFor polls cond until it holds or the call timeout passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleWorkers: a request's goroutine stays for the next request, and
// once requests are done no more than maxIdleWorkers stay; Serve's end
// ends them (goleak in TestMain).
func TestIdleWorkers(t *testing.T) {
	workers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "boxagent.(*server).worker(")
	}
	files := newMemFiles()
	files.block = make(chan struct{})
	c := startAgent(t, Config{Files: files})
	var waiting []chan agentproto.Response
	for i := range 6 {
		_, ch := c.start(agentproto.OpLs, agentproto.PathArgs{Path: fmt.Sprintf("/slow%d", i)})
		waiting = append(waiting, ch)
	}
	waitFor(t, func() bool { return workers() == 6 })
	close(files.block)
	for _, ch := range waiting {
		if _, final := c.wait(ch); final.Error != nil {
			t.Fatalf("ls failed: %v", final.Error)
		}
	}
	waitFor(t, func() bool { return workers() == maxIdleWorkers })
	for range 20 {
		c.ok(agentproto.OpLs, agentproto.PathArgs{Path: "/a"}, nil)
	}
	if n := workers(); n != maxIdleWorkers {
		t.Errorf("%d request goroutines after 20 requests one at a time, want the %d idle ones reused", n, maxIdleWorkers)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return workers() == 0 })
}
