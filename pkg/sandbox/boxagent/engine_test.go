package boxagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// TestWithFileEngine runs the agent over the real os.Root engine, as the
// container does: a multi-chunk upload and download round trip (docs/file-tools.md §7 71–72
// through the channel), per-item errors, and files shared between execute
// and the file ops.
func TestWithFileEngine(t *testing.T) {
	requireShell(t)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	eng, err := fileops.New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	c := startAgent(t, Config{Files: eng, Root: root})

	upload := func(t *testing.T, path string, data []byte) *backend.Error {
		t.Helper()
		return uploadVia(c.on(t), path, data)
	}
	download := func(t *testing.T, path string) ([]byte, *backend.Error) {
		t.Helper()
		return downloadVia(c.on(t), path)
	}

	t.Run("71 upload items in order", func(t *testing.T) {
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		for _, tt := range []struct {
			path string
			data []byte
			want backend.Code
		}{
			{"/a.bin", all, ""},
			{"/../x", []byte("x"), backend.CodeInvalidPath},
			{"/d", []byte("x"), backend.CodeIsDirectory},
		} {
			if e := upload(t, tt.path, tt.data); (e == nil) != (tt.want == "") || (e != nil && e.Code != tt.want) {
				t.Fatalf("upload %s: %v, want %q", tt.path, e, tt.want)
			}
		}
		if got, e := download(t, "/a.bin"); e != nil || !bytes.Equal(got, all) {
			t.Fatalf("round trip: %v", e)
		}
	})
	t.Run("72 download errors", func(t *testing.T) {
		for path, want := range map[string]backend.Code{"/missing": backend.CodeFileNotFound, "/d": backend.CodeIsDirectory} {
			if _, e := download(t, path); e == nil || e.Code != want {
				t.Fatalf("download %s: %v, want %s", path, e, want)
			}
		}
	})
	t.Run("multi-chunk round trip", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), (2*agentproto.ChunkBytes+999)/18)
		if e := upload(t, "/big/nested/blob", data); e != nil {
			t.Fatal(e)
		}
		got, e := download(t, "/big/nested/blob")
		if e != nil || !bytes.Equal(got, data) {
			t.Fatalf("downloaded %d bytes (%v), want %d", len(got), e, len(data))
		}
	})
	t.Run("execute and file ops see the same files", func(t *testing.T) {
		c := c.on(t)
		if res, e := c.execute(backend.ExecuteRequest{Command: "printf made > d/by-shell.txt && cat a.bin | wc -c", Cwd: "/"}); e != nil || res.Output != "256\n" {
			t.Fatalf("execute: %+v %v", res, e)
		}
		var rr backend.ReadResult
		c.ok(agentproto.OpRead, backend.ReadRequest{Path: "/d/by-shell.txt", Limit: 5}, &rr)
		if rr.Content != "made" {
			t.Fatalf("read %+v", rr)
		}
	})
}

// uploadVia uploads data in order through the agent's upload ops.
func uploadVia(c *client, path string, data []byte) *backend.Error {
	c.t.Helper()
	_, final := c.call(agentproto.OpUploadOpen, agentproto.PathArgs{Path: path})
	if final.Error != nil {
		return final.Error
	}
	var h agentproto.UploadHandle
	if err := json.Unmarshal(final.Result, &h); err != nil {
		c.t.Fatal(err)
	}
	size := int64(len(data))
	for off := int64(0); len(data) > 0; {
		n := min(len(data), agentproto.ChunkBytes)
		c.ok(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h.Handle, Offset: off}, data[:n]}, nil)
		data, off = data[n:], off+int64(n)
	}
	_, final = c.call(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true, Size: size})
	return final.Error
}

// downloadVia downloads a file through open, sequential reads and close.
func downloadVia(c *client, path string) ([]byte, *backend.Error) {
	c.t.Helper()
	_, final := c.call(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: path})
	if final.Error != nil {
		return nil, final.Error
	}
	var h agentproto.DownloadHandle
	if err := json.Unmarshal(final.Result, &h); err != nil {
		c.t.Fatal(err)
	}
	defer c.ok(agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: h.Handle}, nil)
	got := []byte{}
	for off := int64(0); off < h.Size; {
		n := int(min(h.Size-off, agentproto.ChunkBytes))
		_, final := c.call(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Offset: off, Length: n})
		if final.Error != nil {
			return got, final.Error
		}
		if len(final.Data) != n {
			c.t.Fatalf("read %d at %d: %d bytes", n, off, len(final.Data))
		}
		got = append(got, final.Data...)
		off += int64(n)
	}
	return got, nil
}

// tempFiles lists the atomic-write temp files left under root.
func tempFiles(t *testing.T, root string) []string {
	t.Helper()
	var left []string
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, _ error) error {
		if strings.Contains(filepath.Base(p), ".plumb-tmp-") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

// TestTransfers covers the pipelined upload and download rules: chunks in
// any order (several in flight), the size check at close, abort and
// shutdown removing the temp file, the item cap, and a file that changes
// size during a download.
func TestTransfers(t *testing.T) {
	root := t.TempDir()
	eng, err := fileops.New(root, fileops.WithItemCap(3*agentproto.ChunkBytes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	c := startAgent(t, Config{Files: eng, Root: root})
	open := func(c *client, path string) string {
		var h agentproto.UploadHandle
		c.ok(agentproto.OpUploadOpen, agentproto.PathArgs{Path: path}, &h)
		return h.Handle
	}
	data := make([]byte, 2*agentproto.ChunkBytes+777)
	for i := range data {
		data[i] = byte(i*31 + i/7)
	}

	t.Run("out of order chunks in flight at once", func(t *testing.T) {
		c := c.on(t)
		h := open(c, "/ooo/file.bin")
		// Chunks of 100 KiB sent last to first, all before any answer.
		const cs = 100 << 10
		var ids []chan agentproto.Response
		for off := (len(data) - 1) / cs * cs; off >= 0; off -= cs {
			end := min(off+cs, len(data))
			_, ch := c.start(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h, Offset: int64(off)}, data[off:end]})
			ids = append(ids, ch)
		}
		for _, ch := range ids {
			if _, final := c.wait(ch); final.Error != nil {
				t.Fatal(final.Error)
			}
		}
		if _, err := os.Stat(filepath.Join(root, "ooo/file.bin")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the target exists before the commit: %v", err)
		}
		var w backend.WriteResult
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h, Commit: true, Size: int64(len(data))}, &w)
		if w.Path != "/ooo/file.bin" || w.BytesWritten != int64(len(data)) || !w.Created {
			t.Fatalf("result %+v", w)
		}
		got, e := downloadVia(c, "/ooo/file.bin")
		if e != nil || !bytes.Equal(got, data) {
			t.Fatalf("downloaded %d bytes (%v)", len(got), e)
		}
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temp files left: %v", left)
		}
	})
	t.Run("size mismatch at close", func(t *testing.T) {
		c := c.on(t)
		for _, tt := range []struct {
			name   string
			chunks [][2]int // offset, length
			size   int64
		}{
			{"short", [][2]int{{0, 10}}, 11},
			{"long", [][2]int{{0, 10}}, 9},
			{"gap", [][2]int{{0, 5}, {10, 5}}, 15},
			{"overlap", [][2]int{{0, 10}, {5, 10}}, 20},
		} {
			if err := os.WriteFile(filepath.Join(root, "keep.txt"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			h := open(c, "/keep.txt")
			for _, ch := range tt.chunks {
				c.ok(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h, Offset: int64(ch[0])}, data[:ch[1]]}, nil)
			}
			e := c.fails(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h, Commit: true, Size: tt.size}, backend.CodeInvalidArgument)
			if !strings.Contains(e.Message, "declared") {
				t.Fatalf("%s: %v", tt.name, e)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "keep.txt")); string(b) != "old" {
				t.Fatalf("%s: target changed to %q", tt.name, b)
			}
			if left := tempFiles(t, root); len(left) > 0 {
				t.Fatalf("%s: temp files left: %v", tt.name, left)
			}
			// The handle is gone.
			c.fails(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h}, []byte("x")}, backend.CodeInvalidArgument)
		}
	})
	t.Run("lent descriptors", func(t *testing.T) {
		// The agent runs in this process: its descriptors are ours, so a
		// dup stands in for the worker's pidfd_getfd.
		c := c.on(t)
		borrow := func(l *agentproto.Lent, path string) *os.File {
			t.Helper()
			if l == nil {
				t.Fatal("no descriptor lent")
			}
			var st, want syscall.Stat_t
			if err := syscall.Fstat(l.FD, &st); err != nil {
				t.Fatal(err)
			}
			if uint64(st.Dev) != l.Dev || st.Ino != l.Ino {
				t.Fatalf("lent %+v, but the descriptor is dev %d ino %d", l, st.Dev, st.Ino)
			}
			if path != "" {
				if err := syscall.Stat(path, &want); err != nil || want.Ino != st.Ino {
					t.Fatalf("lent inode %d, %s is %d (%v)", st.Ino, path, want.Ino, err)
				}
			}
			fd, err := syscall.Dup(l.FD)
			if err != nil {
				t.Fatal(err)
			}
			return os.NewFile(uintptr(fd), "lent")
		}
		var h agentproto.UploadHandle
		c.ok(agentproto.OpUploadOpen, agentproto.OpenArgs{Path: "/lent/up.bin"}, &h)
		if h.Lent != nil {
			t.Fatalf("lent %+v without lend", h.Lent)
		}
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle}, nil)

		// Bytes written through the lent descriptor are committed by size.
		c.ok(agentproto.OpUploadOpen, agentproto.OpenArgs{Path: "/lent/up.bin", Lend: true}, &h)
		f := borrow(h.Lent, "")
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		c.fails(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true, Size: int64(len(data)) - 1}, backend.CodeInvalidArgument)
		if _, err := os.Stat(filepath.Join(root, "lent/up.bin")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a refused commit made the target: %v", err)
		}
		c.ok(agentproto.OpUploadOpen, agentproto.OpenArgs{Path: "/lent/up.bin", Lend: true}, &h)
		f = borrow(h.Lent, "")
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var w backend.WriteResult
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true, Size: int64(len(data))}, &w)
		if w.BytesWritten != int64(len(data)) || !w.Created {
			t.Fatalf("result %+v", w)
		}

		// A download lends the file it opened, read-only.
		var d agentproto.DownloadHandle
		c.ok(agentproto.OpDownloadOpen, agentproto.OpenArgs{Path: "/lent/up.bin", Lend: true}, &d)
		f = borrow(d.Lent, filepath.Join(root, "lent/up.bin"))
		got := make([]byte, d.Size)
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read through the lent descriptor: %v", err)
		}
		if _, err := f.WriteAt([]byte("x"), 0); err == nil {
			t.Fatal("a download's lent descriptor is writable")
		}
		f.Close()
		c.ok(agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: d.Handle}, nil)
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temp files left: %v", left)
		}
	})
	t.Run("abort without commit removes the temp file", func(t *testing.T) {
		c := c.on(t)
		h := open(c, "/aborted.bin")
		c.ok(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h}, data[:1000]}, nil)
		if left := tempFiles(t, root); len(left) != 1 {
			t.Fatalf("temp files while open: %v, want one", left)
		}
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h}, nil)
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h}, nil) // idempotent
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temp files left: %v", left)
		}
		c.fails(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h, Commit: true}, backend.CodeInvalidArgument)
		c.fails(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/aborted.bin"}, backend.CodeFileNotFound)
	})
	t.Run("item cap", func(t *testing.T) {
		c := c.on(t)
		h := open(c, "/capped.bin")
		c.ok(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h, Offset: 3*agentproto.ChunkBytes - 1}, []byte("x")}, nil)
		c.fails(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h, Offset: 3 * agentproto.ChunkBytes}, []byte("x")}, backend.CodeTooLarge)
		// too_large aborted the upload.
		c.fails(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h}, []byte("x")}, backend.CodeInvalidArgument)
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temp files left: %v", left)
		}
		c.fails(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: "nope"}, []byte("x")}, backend.CodeInvalidArgument)
		h = open(c, "/capped.bin")
		c.ok(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h}, nil)
	})
	t.Run("download of a file that changes size is an error", func(t *testing.T) {
		c := c.on(t)
		p := filepath.Join(root, "growing.log")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var h agentproto.DownloadHandle
		c.ok(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/growing.log"}, &h)
		if h.Size != int64(len(data)) {
			t.Fatalf("size %d", h.Size)
		}
		c.ok(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Length: 10}, nil)
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte("more"))
		f.Close()
		e := c.fails(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Offset: 10, Length: 10}, backend.CodeInvalidArgument)
		if !strings.Contains(e.Message, "changed size") {
			t.Fatalf("message %q", e.Message)
		}
		if err := os.Truncate(p, 5); err != nil {
			t.Fatal(err)
		}
		c.fails(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Length: 10}, backend.CodeInvalidArgument)
		// A range past the size at open and an oversized read are refused.
		c.fails(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Offset: h.Size, Length: 1}, backend.CodeOffsetOutOfRange)
		c.fails(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Length: agentproto.ChunkBytes + 1}, backend.CodeInvalidArgument)
		c.ok(agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: h.Handle}, nil)
		c.ok(agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: h.Handle}, nil)
		c.fails(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Length: 1}, backend.CodeInvalidArgument)
	})
	t.Run("download over the item cap", func(t *testing.T) {
		c := c.on(t)
		if err := os.WriteFile(filepath.Join(root, "huge"), make([]byte, 3*agentproto.ChunkBytes+1), 0o644); err != nil {
			t.Fatal(err)
		}
		c.fails(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/huge"}, backend.CodeTooLarge)
	})
	t.Run("shutdown aborts open uploads", func(t *testing.T) {
		root := t.TempDir()
		eng, err := fileops.New(root)
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		c2 := startAgent(t, Config{Files: eng, Root: root})
		h := open(c2.on(t), "/open.bin")
		c2.on(t).ok(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h}, []byte("abc")}, nil)
		var dh agentproto.DownloadHandle
		if err := os.WriteFile(filepath.Join(root, "r"), []byte("r"), 0o644); err != nil {
			t.Fatal(err)
		}
		c2.on(t).ok(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/r"}, &dh)
		if err := c2.stop(); err != nil {
			t.Fatal(err)
		}
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temp files left after shutdown: %v", left)
		}
	})
}
