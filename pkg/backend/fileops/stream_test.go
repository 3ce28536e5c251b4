package fileops_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// TestTempFile covers the streaming upload: concurrent out-of-order
// writes, commit semantics like Write (perm kept, created), the size
// check, abort, the item cap, and a target that turns into a directory.
func TestTempFile(t *testing.T) {
	ctx := context.Background()
	for _, durable := range []bool{true, false} {
		e, root := newEngine(t, fileops.WithItemCap(1000), fileops.WithSync(durable))
		data := bytes.Repeat([]byte("0123456789"), 100) // exactly the cap

		tf, err := e.CreateTemp(ctx, "/new/dir/f.bin")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for off := 900; off >= 0; off -= 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := tf.WriteAt(data[off:off+100], int64(off)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if _, err := os.Stat(filepath.Join(root, "new/dir/f.bin")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("visible before commit: %v", err)
		}
		res, err := tf.Commit(ctx, int64(len(data)))
		if err != nil || res.Path != "/new/dir/f.bin" || res.BytesWritten != 1000 || !res.Created {
			t.Fatalf("commit: %+v %v", res, err)
		}
		if got, _ := os.ReadFile(filepath.Join(root, "new/dir/f.bin")); !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
		if _, err := tf.WriteAt([]byte("x"), 0); err == nil {
			t.Fatal("write after commit succeeded")
		}
		_, err = tf.Commit(ctx, 1000)
		wantCode(t, "second commit", err, backend.CodeInvalidArgument)

		// Replacing keeps the permission bits; created is false.
		if err := os.Chmod(filepath.Join(root, "new/dir/f.bin"), 0o600); err != nil {
			t.Fatal(err)
		}
		tf, err = e.CreateTemp(ctx, "/new/dir/f.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tf.WriteAt([]byte("abc"), 0); err != nil {
			t.Fatal(err)
		}
		if res, err := tf.Commit(ctx, 3); err != nil || res.Created {
			t.Fatalf("replace: %+v %v", res, err)
		}
		if fi, _ := os.Stat(filepath.Join(root, "new/dir/f.bin")); fi.Mode().Perm() != 0o600 || fi.Size() != 3 {
			t.Fatalf("after replace: %v %d", fi.Mode(), fi.Size())
		}

		// Size mismatch: nothing changes, the temp file is gone.
		tf, _ = e.CreateTemp(ctx, "/new/dir/f.bin")
		_, _ = tf.WriteAt([]byte("abcdef"), 0)
		_, err = tf.Commit(ctx, 5)
		wantCode(t, "size mismatch", err, backend.CodeInvalidArgument)
		if got, _ := os.ReadFile(filepath.Join(root, "new/dir/f.bin")); string(got) != "abc" {
			t.Fatalf("target changed: %q", got)
		}
		assertNoTemp(t, root)

		// The item cap, then abort.
		tf, _ = e.CreateTemp(ctx, "/capped")
		_, err = tf.WriteAt([]byte("xx"), 999)
		wantCode(t, "past the cap", err, backend.CodeTooLarge)
		if err := tf.Abort(); err != nil || tf.Abort() != nil {
			t.Fatal(err)
		}
		assertNoTemp(t, root)
		if _, err := os.Stat(filepath.Join(root, "capped")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("aborted upload created its target: %v", err)
		}

		// The target became a directory between create and commit.
		tf, _ = e.CreateTemp(ctx, "/later-dir")
		if err := os.Mkdir(filepath.Join(root, "later-dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err = tf.Commit(ctx, 0)
		wantCode(t, "commit over a directory", err, backend.CodeIsDirectory)
		assertNoTemp(t, root)

		// Refused at create like Write refuses.
		_, err = e.CreateTemp(ctx, "/")
		wantCode(t, "create at the root", err, backend.CodeIsDirectory)
		_, err = e.CreateTemp(ctx, "/a/../b")
		wantCode(t, "bad path", err, backend.CodeInvalidPath)
	}
}

// TestOpenDownload covers the streaming download: reads at offsets, the
// range check, the item cap, and a file that changes size.
func TestOpenDownload(t *testing.T) {
	ctx := context.Background()
	e, root := newEngine(t, fileops.WithItemCap(100))
	put(t, root, map[string]string{"f": "hello world", "big": string(make([]byte, 101))})
	d, err := e.OpenDownload(ctx, "/f")
	if err != nil || d.Size() != 11 || d.Path() != "/f" {
		t.Fatalf("open: %v", err)
	}
	defer d.Close()
	b := make([]byte, 5)
	if _, err := d.ReadAt(b, 6); err != nil || string(b) != "world" {
		t.Fatalf("read: %q %v", b, err)
	}
	_, err = d.ReadAt(b, 7)
	wantCode(t, "past the end", err, backend.CodeOffsetOutOfRange)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = d.ReadAt(b, 0)
	wantCode(t, "shrunk", err, backend.CodeInvalidArgument)

	_, err = e.OpenDownload(ctx, "/big")
	wantCode(t, "over the cap", err, backend.CodeTooLarge)
	_, err = e.OpenDownload(ctx, "/")
	wantCode(t, "directory", err, backend.CodeIsDirectory)
	_, err = e.OpenDownload(ctx, "/missing")
	wantCode(t, "missing", err, backend.CodeFileNotFound)
}
