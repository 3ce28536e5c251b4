package fileops_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// newEngine returns an engine over a fresh temp dir and that dir.
func newEngine(t *testing.T, opts ...fileops.Option) (*fileops.Engine, string) {
	t.Helper()
	root := t.TempDir()
	e, err := fileops.New(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, root
}

// put writes host files under root directly (no fsync, fast).
func put(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		host := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func wantCode(t *testing.T, what string, err error, code backend.Code) *backend.Error {
	t.Helper()
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != code {
		t.Fatalf("%s: error %v, want code %s", what, err, code)
	}
	return be
}

func TestNewOptions(t *testing.T) {
	e, _ := newEngine(t, fileops.WithHome("workspace/"))
	if got := e.Home(); got != "/workspace" {
		t.Errorf("Home() = %q, want /workspace", got)
	}
	if got := backend.Home(e); got != "/workspace" {
		t.Errorf("backend.Home = %q", got)
	}
	for _, o := range []fileops.Option{
		fileops.WithHome("../x"), fileops.WithSkipDirs(""), fileops.WithWritableRoots("~"),
		fileops.WithMaxFileSize(-1), fileops.WithMediaCap(0), fileops.WithWriteCap(-1), fileops.WithItemCap(0),
		fileops.WithOpTimeout(-time.Second), fileops.WithBudgets(0, time.Second),
	} {
		if _, err := fileops.New(t.TempDir(), o); err == nil {
			t.Errorf("an invalid option was accepted")
		}
	}
	if _, err := fileops.New(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("New on a missing dir succeeded")
	}
}

func TestNewAtKeepsRootOpen(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	e, err := fileops.NewAt(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Stat("."); err != nil {
		t.Errorf("Close closed a root the engine does not own: %v", err)
	}
	if _, err := fileops.NewAt(nil); err == nil {
		t.Errorf("NewAt(nil) succeeded")
	}
}

func TestSkipDirs(t *testing.T) {
	e, root := newEngine(t, fileops.WithSkipDirs(fileops.PseudoFilesystems()...))
	put(t, root, map[string]string{"/proc/1/status": "needle", "/sys/x": "needle", "/dev/null.txt": "needle", "/a/proc/y": "needle", "/b.txt": "needle"})
	if err := os.Symlink("proc", filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(g.Matches); got != "/a/proc/y /b.txt" {
		t.Errorf("grep at / = %s, want /a/proc/y /b.txt (skip dirs not entered)", got)
	}
	gl, err := e.Glob(ctx, backend.GlobRequest{Pattern: "**", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(gl.Matches) != 2 || gl.Truncated {
		t.Errorf("glob ** at / = %+v, want 2 files, complete", gl)
	}
	// A walk that starts in a skip dir, directly or through a link, is
	// the caller's choice.
	for _, start := range []string{"/proc", "/alias"} {
		g, err = e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: start})
		if err != nil || len(g.Matches) != 1 {
			t.Errorf("grep at %s = %+v, %v; want 1 match", start, g.Matches, err)
		}
	}
	ls, err := e.Ls(ctx, "/")
	if err != nil || len(ls.Entries) != 6 {
		t.Errorf("ls / = %+v, %v; want 6 entries (skip dirs are listed)", ls.Entries, err)
	}
}

func paths(ms []backend.GrepMatch) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Path)
	}
	return strings.Join(out, " ")
}

func TestBudgets(t *testing.T) {
	e, root := newEngine(t, fileops.WithBudgets(time.Nanosecond, time.Nanosecond))
	put(t, root, map[string]string{"/a.txt": "needle", "/b/c.txt": "needle"})
	ctx := context.Background()
	g, err := e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	if err != nil || !g.Truncated || g.TruncationReason != backend.TruncatedTimeBudget {
		t.Errorf("grep past its budget = %+v, %v; want truncated, time_budget", g, err)
	}
	gl, err := e.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: "/"})
	if err != nil || !gl.Truncated || gl.TruncationReason != backend.TruncatedTimeBudget {
		t.Errorf("glob past its budget = %+v, %v; want truncated, time_budget", gl, err)
	}
}

func TestCallerCancellation(t *testing.T) {
	e, root := newEngine(t)
	put(t, root, map[string]string{"/a.txt": "needle\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Read(ctx, backend.ReadRequest{Path: "/a.txt", Limit: 10})
	wantCode(t, "read with a cancelled context", err, backend.CodeCancelled)
	_, err = e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	wantCode(t, "grep with a cancelled context", err, backend.CodeCancelled)
	_, err = e.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: "/"})
	wantCode(t, "glob with a cancelled context", err, backend.CodeCancelled)
	_, err = e.Write(ctx, "/b.txt", []byte("x"))
	wantCode(t, "write with a cancelled context", err, backend.CodeCancelled)
	if _, err := os.Stat(filepath.Join(root, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled write left /b.txt: %v", err)
	}
	assertNoTemp(t, root)
}

func TestOpTimeout(t *testing.T) {
	e, root := newEngine(t, fileops.WithOpTimeout(time.Nanosecond))
	put(t, root, map[string]string{"/a.txt": "x\n"})
	_, err := e.Read(context.Background(), backend.ReadRequest{Path: "/a.txt", Limit: 10})
	wantCode(t, "read past the op deadline", err, backend.CodeTimeout)
}

func TestMaxFileSize(t *testing.T) {
	e, root := newEngine(t, fileops.WithMaxFileSize(10))
	put(t, root, map[string]string{"/small.txt": "needle\n", "/big.txt": "needle 0123456789\n"})
	ctx := context.Background()
	_, err := e.Read(ctx, backend.ReadRequest{Path: "/big.txt", Limit: 10})
	be := wantCode(t, "read over max file size", err, backend.CodeTooLarge)
	if be.Details["limit"] != "10" || be.Path != "/big.txt" {
		t.Errorf("too_large = %+v", be)
	}
	if _, err := e.Read(ctx, backend.ReadRequest{Path: "/small.txt", Limit: 10}); err != nil {
		t.Errorf("read under max file size: %v", err)
	}
	g, err := e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	if err != nil || paths(g.Matches) != "/small.txt" || g.FilesUnreadable != 1 || g.FilesSearched != 1 {
		t.Errorf("grep = %+v, %v; want /small.txt only, 1 unreadable", g, err)
	}
	res, err := e.Download(ctx, []string{"/big.txt"})
	if err != nil || res[0].Err != nil {
		t.Errorf("download is not capped by max file size: %v %v", err, res[0].Err)
	}
}

func TestCaps(t *testing.T) {
	e, root := newEngine(t, fileops.WithWriteCap(8), fileops.WithItemCap(16), fileops.WithMediaCap(20))
	put(t, root, map[string]string{"/edit.txt": "aaaa", "/img.png": "\x89PNG\r\n\x1a\n0123456789abcdef", "/big.bin": strings.Repeat("z", 17)})
	ctx := context.Background()
	_, err := e.Write(ctx, "/w.txt", []byte("123456789"))
	wantCode(t, "write over the write cap", err, backend.CodeTooLarge)
	_, err = e.Edit(ctx, backend.EditRequest{Path: "/edit.txt", Old: "a", New: "bbb", ReplaceAll: true})
	wantCode(t, "edit result over the write cap", err, backend.CodeTooLarge)
	up, _ := e.Upload(ctx, []backend.UploadItem{{Path: "/u.bin", Content: make([]byte, 17)}, {Path: "/v.bin", Content: make([]byte, 16)}})
	wantCode(t, "upload over the item cap", up[0].Err, backend.CodeTooLarge)
	if up[1].Err != nil || up[1].BytesWritten != 16 {
		t.Errorf("upload at the item cap = %+v", up[1])
	}
	down, _ := e.Download(ctx, []string{"/big.bin"})
	wantCode(t, "download over the item cap", down[0].Err, backend.CodeTooLarge)
	_, err = e.Read(ctx, backend.ReadRequest{Path: "/img.png", Limit: 1})
	wantCode(t, "media over the media cap", err, backend.CodeTooLarge)
}

func TestWritableRootsNamedOnEROFS(t *testing.T) {
	// A read-only file system needs a mount; the mapping is checked on the
	// error path instead (see TestFailEROFS in the internal tests), and
	// here the option is accepted.
	if _, err := fileops.New(t.TempDir(), fileops.WithWritableRoots("/workspace", "/tmp")); err != nil {
		t.Fatal(err)
	}
}

func TestWriteOverFIFO(t *testing.T) {
	e, root := newEngine(t)
	if err := syscall.Mkfifo(filepath.Join(root, "p"), 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	_, err := e.Write(context.Background(), "/p", []byte("x"))
	wantCode(t, "write over a FIFO", err, backend.CodeNotRegularFile)
	fi, err := os.Lstat(filepath.Join(root, "p"))
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
	_, err = e.Grep(context.Background(), backend.GrepRequest{Pattern: "x", Path: "/p"})
	wantCode(t, "grep a FIFO", err, backend.CodeNotRegularFile)
}

func TestLsTruncated(t *testing.T) {
	e, root := newEngine(t)
	files := map[string]string{}
	for i := 0; i <= backend.LsMaxEntries; i++ {
		files[fmt.Sprintf("/f%05d", i)] = ""
	}
	put(t, root, files)
	res, err := e.Ls(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != backend.LsMaxEntries || !res.Truncated {
		t.Fatalf("ls of %d entries: %d entries, truncated %v", backend.LsMaxEntries+1, len(res.Entries), res.Truncated)
	}
	if first, last := res.Entries[0].Path, res.Entries[len(res.Entries)-1].Path; first != "/f00000" || last != "/f09999" {
		t.Errorf("ls kept %s..%s, want the first 10,000 in order", first, last)
	}
}

func TestLsSortsDirsAsPaths(t *testing.T) {
	e, root := newEngine(t)
	put(t, root, map[string]string{"/a.txt": "", "/a/x": "", "/a-b": "", "/a0": ""})
	res, err := e.Ls(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range res.Entries {
		got = append(got, fi.Path)
	}
	if s := strings.Join(got, " "); s != "/a-b /a.txt /a/ /a0" {
		t.Errorf("ls / = %s, want bytewise path order /a-b /a.txt /a/ /a0", s)
	}
}

func TestSymlinkChains(t *testing.T) {
	e, root := newEngine(t)
	put(t, root, map[string]string{"/target.txt": "end\n"})
	// l1 -> l2 -> ... -> l8 -> target.txt is 8 links: followed.
	// m1 -> ... -> m9 -> target.txt is 9: refused.
	chain := func(prefix string, n int) {
		for i := 1; i <= n; i++ {
			next := fmt.Sprintf("%s%d", prefix, i+1)
			if i == n {
				next = "target.txt"
			}
			if err := os.Symlink(next, filepath.Join(root, fmt.Sprintf("%s%d", prefix, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	chain("l", 8)
	chain("m", 9)
	ctx := context.Background()
	r, err := e.Read(ctx, backend.ReadRequest{Path: "/l1", Limit: 10})
	if err != nil || r.Content != "end" {
		t.Errorf("read through 8 links = %q, %v", r.Content, err)
	}
	_, err = e.Read(ctx, backend.ReadRequest{Path: "/m1", Limit: 10})
	be := wantCode(t, "read through 9 links", err, backend.CodeInvalidPath)
	if !strings.Contains(be.Message, "/m9") {
		t.Errorf("message %q does not name the link", be.Message)
	}
	// A link whose target climbs out through a ".." after a symlinked dir
	// resolves physically, like the kernel and os.Root do.
	put(t, root, map[string]string{"/x/y/f.txt": "physical\n", "/x/f.txt": "x-level\n"})
	if err := os.Symlink("x/y", filepath.Join(root, "short")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../f.txt", filepath.Join(root, "x/y/up")); err != nil {
		t.Fatal(err)
	}
	r, err = e.Read(ctx, backend.ReadRequest{Path: "/short/up", Limit: 10})
	if err != nil || r.Content != "x-level" {
		t.Errorf("read /short/up = %q, %v; want x-level (x/y/../f.txt)", r.Content, err)
	}
}

func TestEditLockSharedAcrossAliases(t *testing.T) {
	e, root := newEngine(t)
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "tok%02d\n", i)
	}
	put(t, root, map[string]string{"/real.txt": b.String()})
	if err := os.Symlink("real.txt", filepath.Join(root, "alias.txt")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			p := "/real.txt"
			if i%2 == 1 {
				p = "/alias.txt"
			}
			if _, err := e.Edit(context.Background(), backend.EditRequest{Path: p, Old: fmt.Sprintf("tok%02d", i), New: fmt.Sprintf("new%02d", i)}); err != nil {
				t.Errorf("edit %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got, _ := os.ReadFile(filepath.Join(root, "real.txt"))
	if strings.Contains(string(got), "tok") {
		t.Errorf("lost updates: %q", got)
	}
}

func TestErrorsDoNotLeakHostPaths(t *testing.T) {
	e, root := newEngine(t)
	put(t, root, map[string]string{"/f.txt": "x", "/d/g.txt": "y"})
	if err := os.Symlink("../../../../etc", filepath.Join(root, "esc")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var errs []error
	add := func(_ any, err error) { errs = append(errs, err) }
	add(e.Read(ctx, backend.ReadRequest{Path: "/missing", Limit: 1}))
	add(e.Read(ctx, backend.ReadRequest{Path: "/esc/passwd", Limit: 1}))
	add(e.Write(ctx, "/f.txt/x", []byte("x")))
	add(e.Ls(ctx, "/f.txt/x"))
	add(e.Delete(ctx, "/nope/x"))
	add(e.Edit(ctx, backend.EditRequest{Path: "/d", Old: "a", New: "b"}))
	add(e.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/esc"}))
	for _, err := range errs {
		if err == nil {
			t.Errorf("an error case succeeded")
			continue
		}
		if strings.Contains(err.Error(), root) {
			t.Errorf("error %q contains the host root", err)
		}
	}
}

func TestDeleteStopsAtFirstFailure(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	e, root := newEngine(t)
	put(t, root, map[string]string{"/d/a.txt": "a", "/d/locked/b.txt": "b"})
	locked := filepath.Join(root, "d/locked")
	if err := os.Chmod(locked, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(locked, 0o755) })
	_, err := e.Delete(context.Background(), "/d")
	be := wantCode(t, "delete with a read-only subdir", err, backend.CodePermissionDenied)
	if be.Details["removed"] == "" {
		t.Errorf("no details.removed in %+v", be)
	}
}

func TestUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads everything")
	}
	e, root := newEngine(t)
	put(t, root, map[string]string{"/ok.txt": "needle", "/secret.txt": "needle", "/closed/x.txt": "needle"})
	os.Chmod(filepath.Join(root, "secret.txt"), 0)
	os.Chmod(filepath.Join(root, "closed"), 0)
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "closed"), 0o755) })
	ctx := context.Background()
	g, err := e.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	if err != nil || paths(g.Matches) != "/ok.txt" || g.FilesUnreadable != 2 {
		t.Errorf("grep = %+v, %v; want /ok.txt, 2 unreadable", g, err)
	}
	gl, err := e.Glob(ctx, backend.GlobRequest{Pattern: "*.txt", Path: "/"})
	if err != nil || !gl.Truncated || gl.TruncationReason != backend.TruncatedWalkErrors {
		t.Errorf("glob = %+v, %v; want truncated walk_errors", gl, err)
	}
	_, err = e.Read(ctx, backend.ReadRequest{Path: "/secret.txt", Limit: 1})
	wantCode(t, "read unreadable", err, backend.CodePermissionDenied)
}

// assertNoTemp fails when an atomic-write temp file is left under root.
func assertNoTemp(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".plumb-tmp-") {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}
