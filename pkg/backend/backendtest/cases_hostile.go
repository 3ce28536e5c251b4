package backendtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// hostileTimeout bounds the operations of a hostile case after seeding. docs/file-tools.md §7
// asks that every case end within 10 s; in a test that bound is a hang
// guard (a FIFO read that blocks, a loop that never ends), so it is set
// far above 10 s to tell a hang from a loaded machine. The benchmarks own
// speed.
const hostileTimeout = 2 * time.Minute

// hostileCases are H01–H10 (docs/file-tools.md §7 hostile inputs).
func hostileCases() []testCase {
	return []testCase{
		{name: "H01_traversal", run: h01},
		{name: "H02_symlink_escape", caps: []Capability{Symlink}, run: h02},
		{name: "H03_symlink_loop", caps: []Capability{Symlink}, run: h03},
		{name: "H04_nul_bytes", run: h04},
		{name: "H05_huge_paths", run: h05},
		{name: "H06_invalid_utf8", run: h06},
		{name: "H07_big_file_read", run: h07},
		{name: "H08_big_binary", run: h08},
		{name: "H09_concurrency", run: h09},
		{name: "H10_directory_as_file", run: h10},
	}
}

func h01(e *env) {
	e.seed(map[string]string{"/a/b/f.txt": "f"})
	e.deadline(hostileTimeout)
	for _, raw := range []string{"../etc/passwd", "/a/../../etc/passwd", `..\..\etc`, "/a/./../b", "a/b/../../.."} {
		q := fmt.Sprintf("%q", raw)
		_, err := e.b.Read(e.ctx, backend.ReadRequest{Path: raw, Limit: 10})
		e.wantCode("read "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Write(e.ctx, raw, []byte("x"))
		e.wantCode("write "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Edit(e.ctx, backend.EditRequest{Path: raw, Old: "a", New: "b"})
		e.wantCode("edit "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Delete(e.ctx, raw)
		e.wantCode("delete "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Ls(e.ctx, raw)
		e.wantCode("ls "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Glob(e.ctx, backend.GlobRequest{Pattern: "*", Path: raw})
		e.wantCode("glob path "+q, err, backend.CodeInvalidPath)
		_, err = e.b.Grep(e.ctx, backend.GrepRequest{Pattern: "x", Path: raw})
		e.wantCode("grep path "+q, err, backend.CodeInvalidPath)
		up, err := e.b.Upload(e.ctx, []backend.UploadItem{{Path: raw, Content: []byte("x")}})
		if e.noErr("upload "+q, err) && len(up) == 1 {
			e.wantItemCode("upload "+q, up[0].Err, backend.CodeInvalidPath)
		}
		down, err := e.b.Download(e.ctx, []string{raw})
		if e.noErr("download "+q, err) && len(down) == 1 {
			e.wantItemCode("download "+q, down[0].Err, backend.CodeInvalidPath)
		}
		if e.h.Has(Execute) {
			_, err = e.h.Executor.Execute(e.ctx, backend.ExecuteRequest{Command: "true", Cwd: raw})
			e.wantCode("execute cwd "+q, err, backend.CodeInvalidPath)
		}
	}
	e.wantList("ls /", e.lsPaths("/"), []string{"/a/"})
	e.wantContent("/a/b/f.txt", "f")
}

func h02(e *env) {
	o := e.h.Outside.withDefaults()
	e.seed(map[string]string{"/f.txt": "local " + o.Needle + " text\n"})
	e.symlink("/out", o.Abs)
	e.symlink("/out2", o.Rel)
	e.deadline(hostileTimeout)
	for _, l := range []struct{ link, target string }{{"/out", o.Abs}, {"/out2", o.Rel}} {
		_, err := e.read(l.link+"/"+o.File, 0, 10)
		if be := e.wantCode("read "+l.link+"/"+o.File, err, backend.CodeInvalidPath); be != nil && !strings.Contains(be.Message, l.target) {
			e.t.Errorf("read %s/%s: message %q does not name the link target %q", l.link, o.File, be.Message, l.target)
		}
		res, err := e.b.Download(e.ctx, []string{e.p(l.link + "/" + o.File)})
		if e.noErr("download", err) && len(res) == 1 {
			e.wantItemCode("download "+l.link+"/"+o.File, res[0].Err, backend.CodeInvalidPath)
		}
		_, err = e.b.Write(e.ctx, e.p(l.link+"/plumb-h2-probe"), []byte("x"))
		e.wantCode("write "+l.link+"/plumb-h2-probe", err, backend.CodeInvalidPath)
		_, err = e.b.Edit(e.ctx, backend.EditRequest{Path: e.p(l.link + "/" + o.File), Old: o.Needle, New: "pwned"})
		e.wantCode("edit "+l.link+"/"+o.File, err, backend.CodeInvalidPath)
	}
	if o.Exists != nil && o.Exists("plumb-h2-probe") {
		e.t.Errorf("a write through an escaping symlink created a file outside the root")
	}
	entries := e.ls("/")
	e.wantList("ls /", pathsOf(entries), []string{"/f.txt", "/out", "/out2"})
	for _, fi := range entries {
		if fi.Path != "/f.txt" && (fi.Kind != backend.KindSymlink || fi.IsDir) {
			e.t.Errorf("ls /: %s = %+v, want kind symlink", fi.Path, fi)
		}
	}
	e.wantList(`glob "*"`, e.globPaths("*", "/"), []string{"/f.txt"})
	e.wantList(`glob "**/`+o.File+`"`, e.globPaths("**/"+o.File, "/"), nil)
	res := e.mustGrep(backend.GrepRequest{Pattern: o.Needle, Path: "/"})
	e.wantList("grep "+o.Needle, matchKeys(res.Matches), []string{"/f.txt:1"})
	for _, link := range []string{"/out", "/out2"} {
		r, err := e.b.Delete(e.ctx, e.p(link))
		if e.noErr("delete "+link, err) && r.Removed != 1 {
			e.t.Errorf("delete %s removed %d, want 1 (the link)", link, r.Removed)
		}
	}
	e.wantList("ls / after deletes", e.lsPaths("/"), []string{"/f.txt"})
	if o.Exists != nil && !o.Exists(o.File) {
		e.t.Errorf("deleting the links removed %s outside the root", o.File)
	}
}

func h03(e *env) {
	e.seed(map[string]string{"/d/ok.txt": "loop test\n"})
	e.symlink("/d/l1", "l2")
	e.symlink("/d/l2", "l1")
	e.deadline(hostileTimeout)
	_, err := e.read("/d/l1", 0, 10)
	e.wantCode("read /d/l1", err, backend.CodeInvalidPath)
	_, err = e.b.Write(e.ctx, e.p("/d/l1"), []byte("x"))
	e.wantCode("write /d/l1", err, backend.CodeInvalidPath)
	_, err = e.read("/d/l1/x", 0, 10)
	e.wantCode("read /d/l1/x", err, backend.CodeInvalidPath)
	entries := e.ls("/d")
	e.wantList("ls /d", pathsOf(entries), []string{"/d/l1", "/d/l2", "/d/ok.txt"})
	for _, fi := range entries {
		if fi.Path != "/d/ok.txt" && fi.Kind != backend.KindSymlink {
			e.t.Errorf("ls /d: %s has kind %q, want symlink", fi.Path, fi.Kind)
		}
	}
	e.wantList(`glob "*"`, e.globPaths("*", "/"), []string{"/d/ok.txt"})
	res := e.mustGrep(backend.GrepRequest{Pattern: "loop", Path: "/"})
	e.wantList("grep loop", matchKeys(res.Matches), []string{"/d/ok.txt:1"})
	r, err := e.b.Delete(e.ctx, e.p("/d"))
	if e.noErr("delete /d", err) && r.Removed != 3 {
		e.t.Errorf("delete /d removed %d, want 3 (two links and a file)", r.Removed)
	}
	e.wantList("ls / after delete", e.lsPaths("/"), nil)
}

func h04(e *env) {
	e.seed(map[string]string{"/a.txt": "a"})
	e.deadline(hostileTimeout)
	_, err := e.b.Read(e.ctx, backend.ReadRequest{Path: "/a\x00.txt", Limit: 10})
	e.wantCode("read /a\\x00.txt", err, backend.CodeInvalidPath)
	_, err = e.b.Write(e.ctx, "/a\x00.txt", []byte("x"))
	e.wantCode("write /a\\x00.txt", err, backend.CodeInvalidPath)
	_, err = e.glob("*\x00.txt", "/")
	e.wantCode("glob pattern with NUL", err, backend.CodeInvalidPattern)
	_, err = e.b.Grep(e.ctx, backend.GrepRequest{Pattern: "a", Path: "/a\x00"})
	e.wantCode("grep path with NUL", err, backend.CodeInvalidPath)
}

func h05(e *env) {
	e.deadline(hostileTimeout)
	huge := strings.Repeat("/aaaaaaa", 10<<20/8)
	best := time.Hour
	for range 5 {
		start := time.Now()
		_, err := e.b.Read(e.ctx, backend.ReadRequest{Path: huge, Limit: 10})
		best = min(best, time.Since(start))
		e.wantCode("read 10 MB path", err, backend.CodeInvalidPath)
	}
	if best > time.Millisecond {
		e.t.Errorf("a 10 MB path took %v to reject (best of 5), want < 1 ms", best)
	}
	for _, raw := range []string{"/" + strings.Repeat("b", 4096), "/" + strings.Repeat("c", 256) + "/x"} {
		_, err := e.b.Write(e.ctx, raw, []byte("x"))
		e.wantCode(fmt.Sprintf("write %d-byte path", len(raw)), err, backend.CodeInvalidPath)
	}
	e.wantList("ls /", e.lsPaths("/"), nil)
}

func h06(e *env) {
	e.seedBytes(map[string][]byte{"/u.txt": []byte("ok\n\xff bad\nok2\n")})
	e.deadline(hostileTimeout)
	r := e.mustRead("/u.txt", 0, 10)
	e.window("read", r, "ok\n\uFFFD bad\nok2", 1, 3, intp(3), nil)
	if !r.InvalidUTF8 {
		e.t.Errorf("read: invalid_utf8 not set")
	}
	_, err := e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/u.txt"), Old: "ok2", New: "fine"})
	e.noErr("edit ok2→fine", err)
	e.wantContent("/u.txt", "ok\n\xff bad\nfine\n")
	_, err = e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/u.txt"), Old: "\uFFFD bad", New: "good"})
	e.wantCode("edit old with U+FFFD", err, backend.CodeStringNotFound)
	e.wantContent("/u.txt", "ok\n\xff bad\nfine\n")
}

// h07 reads windows of 50 MiB files. For an in-process backend the bytes
// the read allocates stand in for the RSS growth bound of docs/file-tools.md §7 H7.
func h07(e *env) {
	const lines = 1_000_000
	var b bytes.Buffer
	b.Grow(lines * 52)
	pad := strings.Repeat("x", 38)
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "line %07d %s\n", i, pad)
	}
	long := bytes.Repeat([]byte("a"), 50<<20)
	e.seedBytes(map[string][]byte{"/lines.txt": b.Bytes(), "/one.txt": long})
	b = bytes.Buffer{}
	e.deadline(hostileTimeout)

	var want strings.Builder
	for i := 500001; i <= 500010; i++ {
		if i > 500001 {
			want.WriteByte('\n')
		}
		fmt.Fprintf(&want, "line %07d %s", i, pad)
	}
	var r backend.ReadResult
	alloc := e.measure(func() { r = e.mustRead("/lines.txt", 500000, 10) })
	e.window("read offset 500000 limit 10", r, want.String(), 500001, 500010, intp(lines), intp(500010))
	e.boundAlloc("read of the 1,000,000-line file", alloc)

	alloc = e.measure(func() { r = e.mustRead("/one.txt", 0, backend.DefaultReadLimit) })
	if !r.PartialLine || len(r.Content) != backend.ReadByteBudget || r.NextOffset != nil || r.StartLine != 1 || r.EndLine != 1 {
		e.t.Errorf("read of a 50 MiB line: partial_line %v, %d bytes, lines %d–%d, next_offset %s; want partial, %d bytes, 1–1, null",
			r.PartialLine, len(r.Content), r.StartLine, r.EndLine, fmtIntPtr(r.NextOffset), backend.ReadByteBudget)
	}
	e.boundAlloc("read of the 50 MiB line", alloc)
}

// measure returns the bytes allocated while f runs, or -1 when the
// backend is not in-process.
func (e *env) measure(f func()) int64 {
	if !e.h.InProcess {
		f()
		return -1
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

func (e *env) boundAlloc(what string, alloc int64) {
	e.t.Helper()
	const bound = 8 << 20
	if alloc > bound {
		e.t.Errorf("%s allocated %d bytes, want < %d (memory must be O(window))", what, alloc, bound)
	}
	if alloc >= 0 {
		e.t.Logf("%s allocated %d bytes", what, alloc)
	}
}

func h08(e *env) {
	rnd := make([]byte, 50<<20)
	r := rand.New(rand.NewChaCha8([32]byte{8}))
	for i := 0; i < len(rnd); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < len(rnd); j++ {
			rnd[i+j] = byte(v >> (8 * j))
		}
	}
	files := map[string][]byte{"/x.bin": rnd}
	media := e.h.Has(Media)
	if media {
		files["/x.png"] = append([]byte("\x89PNG\r\n\x1a\n"), rnd[8:]...)
	}
	e.seedBytes(files)
	e.deadline(hostileTimeout)
	if media {
		res, err := e.read("/x.png", 0, 10)
		e.wantCode("read 50 MiB /x.png", err, backend.CodeTooLarge)
		if res.Encoding == backend.EncodingBase64 || res.Content != "" {
			e.t.Errorf("read /x.png returned content (%s)", res.Encoding)
		}
	}
	res, err := e.read("/x.bin", 0, 10)
	be := e.wantCode("read 50 MiB /x.bin", err, backend.CodeNotText)
	e.wantDetail("read /x.bin", be, "size", fmt.Sprint(50<<20))
	if res.Encoding == backend.EncodingBase64 || res.Content != "" {
		e.t.Errorf("read /x.bin returned content (%s)", res.Encoding)
	}
}

func h09(e *env) {
	const n = 32
	var tokens strings.Builder
	for i := range n {
		fmt.Fprintf(&tokens, "token-%02d\n", i)
	}
	e.seed(map[string]string{"/e.txt": tokens.String()})
	payloads := make([][]byte, n)
	for i := range payloads {
		unit := []byte(fmt.Sprintf("payload %02d|", i))
		payloads[i] = bytes.Repeat(unit, (1<<20)/len(unit)+1)[:1<<20]
	}
	e.deadline(hostileTimeout)

	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := e.b.Write(e.ctx, e.p("/c.txt"), payloads[i]); err != nil {
				errs <- fmt.Errorf("write %d: %w", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			req := backend.EditRequest{Path: e.p("/e.txt"), Old: fmt.Sprintf("token-%02d", i), New: fmt.Sprintf("done-%02d", i)}
			if _, err := e.b.Edit(e.ctx, req); err != nil {
				errs <- fmt.Errorf("edit %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}
	got := e.download("/c.txt")
	whole := false
	for _, p := range payloads {
		if bytes.Equal(got, p) {
			whole = true
		}
	}
	if !whole {
		e.t.Errorf("/c.txt (%d bytes, starts %q) is not exactly one of the payloads", len(got), clip(string(got[:min(len(got), 40)])))
	}
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "done-%02d\n", i)
	}
	e.wantContent("/e.txt", want.String())
	e.wantList("ls / (no temp files)", e.lsPaths("/"), []string{"/c.txt", "/e.txt"})
}

func h10(e *env) {
	e.seed(map[string]string{"/d/x.txt": "x", "/f.txt": "hello\n"})
	e.deadline(hostileTimeout)
	_, err := e.read("/d", 0, 10)
	e.wantCode("read /d", err, backend.CodeIsDirectory)
	_, err = e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/d"), Old: "a", New: "b"})
	e.wantCode("edit /d", err, backend.CodeIsDirectory)
	_, err = e.b.Write(e.ctx, e.p("/d"), []byte("x"))
	e.wantCode("write /d", err, backend.CodeIsDirectory)
	res, err := e.b.Download(e.ctx, []string{e.p("/d")})
	if e.noErr("download /d", err) && len(res) == 1 {
		e.wantItemCode("download /d", res[0].Err, backend.CodeIsDirectory)
	}
	_, err = e.b.Ls(e.ctx, e.p("/f.txt"))
	e.wantCode("ls /f.txt", err, backend.CodeNotADirectory)
	g := e.mustGrep(backend.GrepRequest{Pattern: "hello", Path: "/f.txt"})
	e.wantList("grep at /f.txt", matchKeys(g.Matches), []string{"/f.txt:1"})
	e.wantContent("/d/x.txt", "x")
}
