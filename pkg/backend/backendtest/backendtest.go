package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Capability names a feature some backends lack. Cases that need one are
// skipped for a harness that does not declare it.
type Capability string

// Capabilities of docs/file-tools.md §1. Special is this suite's addition for non-regular
// files, which §4.2 requires backends on a real file system to reject.
const (
	// Symlink: the backend has symlinks (Harness.Symlink creates them).
	// Cases B48, H02, H03, X01–X03.
	Symlink Capability = "symlink"
	// Mode: the backend keeps Unix permission bits, reports them in
	// FileInfo.Mode, and Harness.Chmod sets them. Cases B44, X04, X14.
	Mode Capability = "mode"
	// Execute: Harness.Executor runs commands. Cases B62–B64, B66–B70,
	// and the execute cwd of H01.
	Execute Capability = "execute"
	// Media: read returns media files as base64 (docs/file-tools.md §4.2 step 3). Cases B26,
	// B27, H08.
	Media Capability = "media"
	// Special: the backend can hold FIFOs (Harness.Mkfifo creates them).
	// Case X05.
	Special Capability = "special"
)

// Harness is one fresh, empty backend under test and the hooks the suite
// needs to create what Upload cannot. Fields other than Backend are
// optional; a hook is required exactly when its capability is declared.
//
// All paths given to hooks are virtual paths of the backend (Prefix
// included), already normalized.
type Harness struct {
	// Backend is the backend under test. The directory the cases run in
	// ("/", or Prefix) must be empty.
	Backend backend.Backend
	// Caps lists the capabilities the backend has.
	Caps []Capability

	// Executor runs the execute cases (required with Execute). It must
	// act on the same file system as Backend.
	Executor backend.Executor
	// Symlink creates a symlink at path whose raw target is target
	// (relative or absolute, not interpreted). Required with Symlink.
	Symlink func(ctx context.Context, path, target string) error
	// Chmod sets the permission bits of the file at path. Required with
	// Mode.
	Chmod func(ctx context.Context, path string, mode fs.FileMode) error
	// Mkfifo creates a FIFO at path. Required with Special.
	Mkfifo func(ctx context.Context, path string) error

	// Prefix, when set (e.g. "/memories"), mirrors every case under that
	// directory: a case's "/a.txt" is Prefix+"/a.txt" and its "/" is
	// Prefix. A Composite runs the suite once without and once with a
	// route prefix. Inputs that must be rejected before any routing
	// (invalid paths) are sent unprefixed.
	Prefix string
	// Ignore reports backend paths that listings and searches may hold
	// beyond what a case created (a Composite's mount points when the
	// suite runs against its default backend); they are dropped before
	// comparing. nil ignores nothing.
	Ignore func(path string) bool
	// Outside describes a directory outside the backend's root, for the
	// symlink escape case H02. The zero value means /etc (docs/file-tools.md §7 H2).
	Outside Outside
	// Workspace is execute's default directory as pwd prints it (case
	// 68); "" means "/workspace".
	Workspace string
	// InProcess marks a backend that runs in the test process: case H07
	// then bounds the bytes its read allocates (the RSS bound of docs/file-tools.md §7 H7,
	// measured as runtime.MemStats.TotalAlloc around the call).
	InProcess bool
}

// Outside is a directory outside the backend's root that H02 points
// symlinks at. Reads through them must fail, and writes must create
// nothing there.
type Outside struct {
	// Abs is the absolute symlink target, e.g. "/etc".
	Abs string
	// Rel is a relative target that climbs out of the root from a link
	// in the case directory, e.g. "../../../etc".
	Rel string
	// File is an existing file in that directory, e.g. "passwd".
	File string
	// Needle is text in File, e.g. "root".
	Needle string
	// Exists, if set, reports whether name exists in that directory; H02
	// uses it to check that nothing was created outside and that deleting
	// the links left File alone.
	Exists func(name string) bool
}

func (o Outside) withDefaults() Outside {
	if o.Abs == "" {
		o.Abs = "/etc"
	}
	if o.Rel == "" {
		o.Rel = "../../../etc"
	}
	if o.File == "" {
		o.File, o.Needle = "passwd", "root"
	}
	return o
}

// Has reports whether h declares c.
func (h *Harness) Has(c Capability) bool { return slices.Contains(h.Caps, c) }

// check fails t when a declared capability lacks its hook.
func (h *Harness) check(t *testing.T) {
	t.Helper()
	if h == nil || h.Backend == nil {
		t.Fatal("backendtest: the harness has no Backend")
	}
	missing := map[Capability]bool{
		Symlink: h.Symlink == nil,
		Mode:    h.Chmod == nil,
		Execute: h.Executor == nil,
		Special: h.Mkfifo == nil,
	}
	for _, c := range h.Caps {
		if missing[c] {
			t.Fatalf("backendtest: capability %q is declared but its hook is nil", c)
		}
	}
	if h.Prefix != "" && (!strings.HasPrefix(h.Prefix, "/") || strings.HasSuffix(h.Prefix, "/")) {
		t.Fatalf("backendtest: Prefix %q must start with / and not end with /", h.Prefix)
	}
}

// caseTimeout bounds a whole case, seeding included. It is a hang guard,
// not a speed check: tests run on loaded 2-core machines (B60 writes
// 10,001 files, which under gVisor at load 45 took over 5 minutes), and
// speed is measured by the benchmarks.
const caseTimeout = 15 * time.Minute

// testCase is one row of the suite.
type testCase struct {
	name string
	caps []Capability
	run  func(e *env)
}

// Run runs every case as a subtest of t. newHarness is called once per
// case (also for a case then skipped for a missing capability) and must
// return a fresh, empty backend; register cleanup with t.Cleanup. Cases
// run one after another, each with its own harness.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	for _, c := range allCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.check(t)
			for _, cp := range c.caps {
				if !h.Has(cp) {
					t.Skipf("the backend lacks capability %q", cp)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
			defer cancel()
			c.run(&env{t: t, ctx: ctx, h: h, b: h.Backend})
		})
	}
}

// CaseNames returns the names of all cases in run order, for harnesses
// that report coverage.
func CaseNames() []string {
	var out []string
	for _, c := range allCases() {
		out = append(out, c.name)
	}
	return out
}

func allCases() []testCase {
	var all []testCase
	for _, group := range [][]testCase{
		lsReadCases(), writeEditDeleteCases(), grepGlobCases(), executeCases(), transferCases(),
		pathCases(), globMatrixCases(), hostileCases(), extraCases(),
	} {
		all = append(all, group...)
	}
	slices.SortStableFunc(all, func(a, b testCase) int { return strings.Compare(a.name, b.name) })
	return all
}

// env is what a case works with.
type env struct {
	t   *testing.T
	ctx context.Context
	h   *Harness
	b   backend.Backend
}

// p maps a case path ("/a.txt", "/") to the backend path (Prefix added).
func (e *env) p(v string) string {
	switch {
	case e.h.Prefix == "":
		return v
	case v == "/":
		return e.h.Prefix
	}
	return e.h.Prefix + v
}

// v maps a backend path back to a case path. A path outside the prefix is
// returned marked, so that comparisons fail loudly.
func (e *env) v(p string) string {
	pre := e.h.Prefix
	switch {
	case pre == "":
		return p
	case p == pre || p == pre+"/":
		return "/"
	case strings.HasPrefix(p, pre+"/"):
		return p[len(pre):]
	}
	return "OUTSIDE-PREFIX:" + p
}

func (e *env) ignored(p string) bool { return e.h.Ignore != nil && e.h.Ignore(p) }

// deadline gives the rest of the case its own deadline (after seeding).
func (e *env) deadline(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	e.ctx = ctx
}

// seed uploads files (case path → content) and requires every item to
// succeed.
func (e *env) seed(files map[string]string) {
	e.t.Helper()
	m := make(map[string][]byte, len(files))
	for k, v := range files {
		m[k] = []byte(v)
	}
	e.seedBytes(m)
}

func (e *env) seedBytes(files map[string][]byte) {
	e.t.Helper()
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	items := make([]backend.UploadItem, 0, len(files))
	for _, k := range keys {
		items = append(items, backend.UploadItem{Path: e.p(k), Content: files[k]})
	}
	e.upload(items)
}

func (e *env) upload(items []backend.UploadItem) {
	e.t.Helper()
	const batch = 1000
	for len(items) > 0 {
		n := min(len(items), batch)
		res, err := e.b.Upload(e.ctx, items[:n])
		if err != nil {
			e.t.Fatalf("seed: upload: %v", err)
		}
		if len(res) != n {
			e.t.Fatalf("seed: upload of %d items returned %d results", n, len(res))
		}
		for i, r := range res {
			if r.Err != nil {
				e.t.Fatalf("seed: upload %s: %v", items[i].Path, r.Err)
			}
		}
		items = items[n:]
	}
}

// symlink creates a symlink at the case path with a raw target.
func (e *env) symlink(path, target string) {
	e.t.Helper()
	if err := e.h.Symlink(e.ctx, e.p(path), target); err != nil {
		e.t.Fatalf("seed: symlink %s -> %s: %v", path, target, err)
	}
}

// wantCode checks that err is a backend error with code want and returns
// it. what names the call in failure messages.
func (e *env) wantCode(what string, err error, want backend.Code) *backend.Error {
	e.t.Helper()
	if err == nil {
		e.t.Errorf("%s: no error, want %s", what, want)
		return nil
	}
	var be *backend.Error
	if !errors.As(err, &be) {
		e.t.Errorf("%s: error %v (%T) is not a *backend.Error, want %s", what, err, err, want)
		return nil
	}
	if be.Code != want {
		e.t.Errorf("%s: error %v, want code %s", what, err, want)
	}
	return be
}

// wantItemCode is wantCode for a per-item error.
func (e *env) wantItemCode(what string, be *backend.Error, want backend.Code) *backend.Error {
	e.t.Helper()
	if be == nil {
		e.t.Errorf("%s: item succeeded, want %s", what, want)
		return nil
	}
	return e.wantCode(what, be, want)
}

// wantDetail checks one detail of a backend error.
func (e *env) wantDetail(what string, be *backend.Error, key, want string) {
	e.t.Helper()
	if be == nil {
		return
	}
	if got, ok := be.Details[key]; !ok || got != want {
		e.t.Errorf("%s: details[%q] = %q (present %v), want %q; error %v", what, key, got, ok, want, be)
	}
}

func (e *env) noErr(what string, err error) bool {
	e.t.Helper()
	if err != nil {
		e.t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// ls lists a case dir and returns its entries with case paths, ignored
// paths dropped.
func (e *env) ls(path string) []backend.FileInfo {
	e.t.Helper()
	res, err := e.b.Ls(e.ctx, e.p(path))
	if err != nil {
		e.t.Fatalf("ls %s: %v", path, err)
	}
	var out []backend.FileInfo
	for _, fi := range res.Entries {
		if e.ignored(fi.Path) {
			continue
		}
		fi.Path = e.v(fi.Path)
		out = append(out, fi)
	}
	return out
}

func (e *env) lsPaths(path string) []string {
	e.t.Helper()
	var out []string
	for _, fi := range e.ls(path) {
		out = append(out, fi.Path)
	}
	return out
}

func (e *env) entry(dir, path string) (backend.FileInfo, bool) {
	e.t.Helper()
	for _, fi := range e.ls(dir) {
		if fi.Path == path {
			return fi, true
		}
	}
	return backend.FileInfo{}, false
}

func (e *env) read(path string, offset, limit int) (backend.ReadResult, error) {
	return e.b.Read(e.ctx, backend.ReadRequest{Path: e.p(path), Offset: offset, Limit: limit})
}

// mustRead reads and fails the case on error.
func (e *env) mustRead(path string, offset, limit int) backend.ReadResult {
	e.t.Helper()
	r, err := e.read(path, offset, limit)
	if err != nil {
		e.t.Fatalf("read %s offset %d limit %d: %v", path, offset, limit, err)
	}
	if r.Path != e.p(path) {
		e.t.Errorf("read %s: result path %q, want %q", path, r.Path, e.p(path))
	}
	return r
}

// window checks a text window.
func (e *env) window(what string, r backend.ReadResult, content string, start, end int, total, next *int) {
	e.t.Helper()
	if r.Encoding != backend.EncodingUTF8 {
		e.t.Errorf("%s: encoding %q, want utf-8", what, r.Encoding)
	}
	if r.Content != content {
		e.t.Errorf("%s: content %q, want %q", what, clip(r.Content), clip(content))
	}
	if r.StartLine != start || r.EndLine != end {
		e.t.Errorf("%s: lines %d–%d, want %d–%d", what, r.StartLine, r.EndLine, start, end)
	}
	if !eqIntPtr(r.TotalLines, total) {
		e.t.Errorf("%s: total_lines %s, want %s", what, fmtIntPtr(r.TotalLines), fmtIntPtr(total))
	}
	if !eqIntPtr(r.NextOffset, next) {
		e.t.Errorf("%s: next_offset %s, want %s", what, fmtIntPtr(r.NextOffset), fmtIntPtr(next))
	}
	if r.EmptyFile || r.NoLinesRequested {
		e.t.Errorf("%s: empty_file %v, no_lines_requested %v on a text window", what, r.EmptyFile, r.NoLinesRequested)
	}
}

// download returns the bytes of a case path.
func (e *env) download(path string) []byte {
	e.t.Helper()
	res, err := e.b.Download(e.ctx, []string{e.p(path)})
	if err != nil {
		e.t.Fatalf("download %s: %v", path, err)
	}
	if len(res) != 1 {
		e.t.Fatalf("download %s: %d results", path, len(res))
	}
	if res[0].Err != nil {
		e.t.Fatalf("download %s: %v", path, res[0].Err)
	}
	return res[0].Content
}

// wantContent checks a file's bytes.
func (e *env) wantContent(path, want string) {
	e.t.Helper()
	if got := e.download(path); !bytes.Equal(got, []byte(want)) {
		e.t.Errorf("content of %s = %q, want %q", path, clip(string(got)), clip(want))
	}
}

func (e *env) grep(req backend.GrepRequest) (backend.GrepResult, error) {
	req.Path = e.p(req.Path)
	res, err := e.b.Grep(e.ctx, req)
	var kept []backend.GrepMatch
	for _, m := range res.Matches {
		if e.ignored(m.Path) {
			continue
		}
		m.Path = e.v(m.Path)
		kept = append(kept, m)
	}
	res.Matches = kept
	return res, err
}

func (e *env) mustGrep(req backend.GrepRequest) backend.GrepResult {
	e.t.Helper()
	res, err := e.grep(req)
	if err != nil {
		e.t.Fatalf("grep %q at %s: %v", req.Pattern, req.Path, err)
	}
	return res
}

func (e *env) glob(pattern, path string) (backend.GlobResult, error) {
	res, err := e.b.Glob(e.ctx, backend.GlobRequest{Pattern: pattern, Path: e.p(path)})
	var kept []backend.FileInfo
	for _, fi := range res.Matches {
		if e.ignored(fi.Path) {
			continue
		}
		fi.Path = e.v(fi.Path)
		kept = append(kept, fi)
	}
	res.Matches = kept
	return res, err
}

func (e *env) globPaths(pattern, path string) []string {
	e.t.Helper()
	res, err := e.glob(pattern, path)
	if err != nil {
		e.t.Fatalf("glob %q at %s: %v", pattern, path, err)
	}
	var out []string
	for _, fi := range res.Matches {
		out = append(out, fi.Path)
	}
	return out
}

// matchKeys renders grep matches as "path:line" for comparisons.
func matchKeys(ms []backend.GrepMatch) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s:%d", m.Path, m.Line))
	}
	return out
}

// wantList compares string lists (nil and empty are equal).
func (e *env) wantList(what string, got, want []string) {
	e.t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func intp(n int) *int { return &n }

func eqIntPtr(a, b *int) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func fmtIntPtr(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// clip shortens long strings in failure messages.
func clip(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%s…(%d bytes)…%s", s[:150], len(s), s[len(s)-100:])
	}
	return s
}
