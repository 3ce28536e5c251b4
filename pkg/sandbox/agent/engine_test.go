package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// TestWithFileEngine runs the agent over the real os.Root engine, as the
// container does: a multi-chunk upload and download round trip (§7 71–72
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
		c := c.on(t)
		_, final := c.call(agentproto.OpUploadOpen, agentproto.PathArgs{Path: path})
		if final.Error != nil {
			return final.Error
		}
		var h agentproto.UploadHandle
		if err := json.Unmarshal(final.Result, &h); err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			n := min(len(data), agentproto.ChunkBytes)
			c.ok(agentproto.OpUploadChunk, agentproto.UploadChunkArgs{Handle: h.Handle, Data: data[:n]}, nil)
			data = data[n:]
		}
		_, final = c.call(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true})
		return final.Error
	}
	download := func(t *testing.T, path string) ([]byte, *backend.Error) {
		t.Helper()
		events, final := c.on(t).call(agentproto.OpDownload, agentproto.PathArgs{Path: path})
		if final.Error != nil {
			return nil, final.Error
		}
		var got []byte
		for _, ev := range events {
			if ev.Event != agentproto.EventChunk || len(ev.Data) > agentproto.ChunkBytes {
				t.Fatalf("event %q with %d bytes", ev.Event, len(ev.Data))
			}
			got = append(got, ev.Data...)
		}
		var dr agentproto.DownloadResult
		if err := json.Unmarshal(final.Result, &dr); err != nil || dr.Size != int64(len(got)) {
			t.Fatalf("download result %s, %d bytes received", final.Result, len(got))
		}
		return got, nil
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
