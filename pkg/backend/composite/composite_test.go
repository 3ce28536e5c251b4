package composite

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

var ctx = context.Background()

// spy records the searches a backend is asked for and can fail them.
type spy struct {
	backend.Backend
	mu    sync.Mutex
	globs []backend.GlobRequest
	greps []backend.GrepRequest
	fail  error
}

func newSpy() *spy { return &spy{Backend: state.New()} }

func (s *spy) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	s.mu.Lock()
	s.globs = append(s.globs, req)
	s.mu.Unlock()
	if s.fail != nil {
		return backend.GlobResult{}, s.fail
	}
	return s.Backend.Glob(ctx, req)
}

func (s *spy) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	s.mu.Lock()
	s.greps = append(s.greps, req)
	s.mu.Unlock()
	if s.fail != nil {
		return backend.GrepResult{}, s.fail
	}
	return s.Backend.Grep(ctx, req)
}

// executor is a State backend with a recording Execute, standing in for
// a sandbox default.
type executor struct {
	*state.Backend
	got []backend.ExecuteRequest
}

func (e *executor) Execute(_ context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	e.got = append(e.got, req)
	return backend.ExecuteResult{Output: "/workspace\n", ExitCode: new(0)}, nil
}

func (e *executor) Home() string { return "/workspace" }

// fixture is the docs/file-tools.md §5 example: routes /memories/ → M, /memories/private/ →
// P, /cache/ → C, default D.
type fixture struct {
	c          Composite
	d, m, p, k *spy // k is C
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{d: newSpy(), m: newSpy(), p: newSpy(), k: newSpy()}
	c, err := New(f.d, map[string]backend.Backend{"/memories/": f.m, "/memories/private/": f.p, "/cache/": f.k}, "")
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) name(b backend.Backend) string {
	switch b {
	case f.d:
		return "D"
	case f.m:
		return "M"
	case f.p:
		return "P"
	case f.k:
		return "C"
	}
	return "?"
}

func write(t *testing.T, b backend.Backend, files ...string) {
	t.Helper()
	for _, p := range files {
		if _, err := b.Write(ctx, p, []byte("hit\n")); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
}

func paths(entries []backend.FileInfo) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Path)
	}
	return out
}

func wantCode(t *testing.T, err error, code backend.Code) *backend.Error {
	t.Helper()
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	return be
}

// TestRoutingTable is case 74: every row of the docs/file-tools.md §5 examples table.
func TestRoutingTable(t *testing.T) {
	t.Run("route choice", func(t *testing.T) {
		f := newFixture(t)
		for _, tt := range []struct{ in, backend, path string }{
			{"/memories", "M", "/"},
			{"/memories/", "M", "/"},
			{"/memories/notes.txt", "M", "/notes.txt"},
			{"/memories/private/secret.txt", "P", "/secret.txt"},
			{"/memories/private", "P", "/"},
			{"/memories2/file.txt", "D", "/memories2/file.txt"},
			{"/memoriesx", "D", "/memoriesx"},
			{"/cache/a/b.txt", "C", "/a/b.txt"},
			{"cache//a/./b.txt", "C", "/a/b.txt"},
		} {
			b, bp, err := f.c.Resolve(tt.in)
			if err != nil || f.name(b) != tt.backend || bp != tt.path {
				t.Errorf("Resolve(%q) = %s %q %v, want %s %q", tt.in, f.name(b), bp, err, tt.backend, tt.path)
			}
		}
		// Writes land there, and results carry the full path.
		for _, tt := range []struct {
			in string
			b  *spy
			bp string
		}{
			{"/memories/notes.txt", f.m, "/notes.txt"},
			{"/memories/private/secret.txt", f.p, "/secret.txt"},
			{"/memories2/file.txt", f.d, "/memories2/file.txt"},
			{"/cache/a/b.txt", f.k, "/a/b.txt"},
		} {
			w, err := f.c.Write(ctx, tt.in, []byte("x"))
			if err != nil || w.Path != tt.in {
				t.Fatalf("write %s: %+v %v", tt.in, w, err)
			}
			if r, err := tt.b.Read(ctx, backend.ReadRequest{Path: tt.bp, Limit: 1}); err != nil || r.Content != "x" {
				t.Errorf("%s not at %s of %s: %v", tt.in, tt.bp, f.name(tt.b), err)
			}
		}
	})

	t.Run("ls /", func(t *testing.T) {
		f := newFixture(t)
		write(t, f.d, "/file.txt")
		res, err := f.c.Ls(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := paths(res.Entries), []string{"/cache/", "/file.txt", "/memories/"}; !slices.Equal(got, want) {
			t.Errorf("ls / = %q, want %q", got, want)
		}
		for _, e := range res.Entries {
			if e.IsDir && (e.Kind != backend.KindDir || e.Size != 0 || e.ModifiedAt != "") {
				t.Errorf("synthesized entry %+v", e)
			}
		}
	})

	t.Run("ls /memories", func(t *testing.T) {
		f := newFixture(t)
		write(t, f.m, "/notes.txt")
		res, err := f.c.Ls(ctx, "/memories")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := paths(res.Entries), []string{"/memories/notes.txt", "/memories/private/"}; !slices.Equal(got, want) {
			t.Errorf("ls /memories = %q, want %q", got, want)
		}
	})

	for _, tt := range []struct {
		pattern string
		want    map[string]string // backend → pattern it gets; absent = not queried
	}{
		{"memories/*.md", map[string]string{"D": "memories/*.md", "M": "/*.md"}},
		{"*/notes.txt", map[string]string{"D": "*/notes.txt", "M": "/notes.txt", "C": "/notes.txt"}},
		{"**/*.md", map[string]string{"D": "**/*.md", "M": "/**/*.md", "P": "/**/*.md", "C": "/**/*.md"}},
	} {
		t.Run("glob "+tt.pattern, func(t *testing.T) {
			f := newFixture(t)
			if _, err := f.c.Glob(ctx, backend.GlobRequest{Pattern: tt.pattern, Path: "/"}); err != nil {
				t.Fatal(err)
			}
			for _, s := range []*spy{f.d, f.m, f.p, f.k} {
				want, queried := tt.want[f.name(s)]
				switch {
				case !queried && len(s.globs) > 0:
					t.Errorf("%s queried with %+v", f.name(s), s.globs)
				case queried && (len(s.globs) != 1 || s.globs[0].Pattern != want):
					t.Errorf("%s got %+v, want pattern %q", f.name(s), s.globs, want)
				case queried && f.name(s) != "D" && s.globs[0].Path != "/":
					t.Errorf("%s searched at %q, want /", f.name(s), s.globs[0].Path)
				}
			}
		})
	}

	t.Run("grep max_count 1", func(t *testing.T) {
		f := newFixture(t)
		write(t, f.d, "/z.txt")
		write(t, f.m, "/a.md")
		res, err := f.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/", MaxCount: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Matches) != 1 || res.Matches[0].Path != "/memories/a.md" || res.Matches[0].Line != 1 ||
			!res.Truncated || res.TruncationReason != backend.TruncatedMaxCount {
			t.Errorf("grep = %+v", res)
		}
	})

	t.Run("execute pwd", func(t *testing.T) {
		d := &executor{Backend: state.New()}
		c, err := New(d, map[string]backend.Backend{"/memories/": state.New()}, "")
		if err != nil {
			t.Fatal(err)
		}
		ex, ok := c.(backend.Executor)
		if !ok {
			t.Fatal("a Composite over an executor does not implement backend.Executor")
		}
		res, err := ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd"})
		if err != nil || len(d.got) != 1 || res.Output != "/workspace\n" {
			t.Errorf("execute: %+v %v, calls %+v", res, err, d.got)
		}
		if c.Home() != "/workspace" {
			t.Errorf("home %q", c.Home())
		}
	})
}

// TestGrepCap is case 75.
func TestGrepCap(t *testing.T) {
	f := newFixture(t)
	write(t, f.d, "/b.txt")
	write(t, f.m, "/z.txt")
	res, err := f.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/", MaxCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 1 || res.Matches[0].Path != "/b.txt" || !res.Truncated {
		t.Errorf("grep = %+v", res)
	}
	res, err = f.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/", MaxCount: 2})
	if err != nil || len(res.Matches) != 2 || res.Truncated || res.FilesSearched != 2 {
		t.Errorf("grep max 2 = %+v %v", res, err)
	}
}

// TestFanOutErrors is case 76, plus the fixed error order and the ignored
// default file_not_found.
func TestFanOutErrors(t *testing.T) {
	f := newFixture(t)
	write(t, f.d, "/a.txt", "/b.txt")
	f.m.fail = backend.Errorf(backend.CodeUnavailable, "/", "sandbox unreachable")
	g, err := f.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Matches) != 2 || g.Error == nil || g.Error.Code != backend.CodeUnavailable || !g.Truncated {
		t.Errorf("grep = %+v", g)
	}
	// With C and M failing, C (/cache/) sorts first, so its error is the
	// one.
	f.k.fail, f.m.fail = f.m.fail, backend.Errorf(backend.CodeInternal, "", "boom")
	gl, err := f.c.Glob(ctx, backend.GlobRequest{Pattern: "*.txt", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(gl.Matches) != 2 || gl.Error == nil || gl.Error.Code != backend.CodeUnavailable || !gl.Truncated {
		t.Errorf("glob = %+v, error %+v", gl, gl.Error)
	}
	if gl.Error.Path != "/cache" {
		t.Errorf("route error path %q, want /cache", gl.Error.Path)
	}
	// Every backend was queried although M and C failed.
	if len(f.p.globs) != 1 {
		t.Errorf("P not queried: %+v", f.p.globs)
	}

	// The default has no /memories: its file_not_found is ignored there,
	// and a route that fails alone is reported.
	f2 := newFixture(t)
	write(t, f2.m, "/n.txt")
	f2.p.fail = backend.Errorf(backend.CodeUnavailable, "", "down")
	g2, err := f2.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/memories"})
	if err != nil || len(g2.Matches) != 1 || g2.Error == nil || g2.Error.Code != backend.CodeUnavailable {
		t.Errorf("grep /memories = %+v %v", g2, err)
	}
	f2.p.fail = nil
	g2, err = f2.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/memories"})
	if err != nil || len(g2.Matches) != 1 || g2.Error != nil || g2.Truncated {
		t.Errorf("grep /memories = %+v %v", g2, err)
	}

	// Argument errors are one hard error, before any backend is asked.
	f3 := newFixture(t)
	_, err = f3.c.Grep(ctx, backend.GrepRequest{Pattern: "(", Regex: true, Path: "/"})
	wantCode(t, err, backend.CodeInvalidPattern)
	_, err = f3.c.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/", MaxCount: -1})
	wantCode(t, err, backend.CodeInvalidArgument)
	_, err = f3.c.Glob(ctx, backend.GlobRequest{Pattern: "[ab", Path: "/"})
	wantCode(t, err, backend.CodeInvalidPattern)
	_, err = f3.c.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: "/../x"})
	wantCode(t, err, backend.CodeInvalidPath)
	for _, s := range []*spy{f3.d, f3.m, f3.p, f3.k} {
		if len(s.globs)+len(s.greps) > 0 {
			t.Errorf("%s was asked", f3.name(s))
		}
	}
	// Without a mount below, the owner's error is the answer.
	_, err = f3.c.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: "/missing"})
	wantCode(t, err, backend.CodeFileNotFound)
	_, err = f3.c.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/cache/missing"})
	if be := wantCode(t, err, backend.CodeFileNotFound); be.Path != "/cache/missing" || !strings.Contains(be.Message, "/cache/missing") {
		t.Errorf("error not mapped to the composite path: %+v", be)
	}
}

// TestDeleteAndExecute is case 77, with the rest of the delete and
// execute rules.
func TestDeleteAndExecute(t *testing.T) {
	d := &executor{Backend: state.New()}
	m := state.New()
	c, err := New(d, map[string]backend.Backend{"/memories/": m, "/memories/private/": state.New()}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/memories", "/memories/", "/memories/private"} {
		_, err := c.Delete(ctx, p)
		wantCode(t, err, backend.CodeInvalidPath)
	}
	write(t, c, "/memories/a/x", "/keep.txt")
	write(t, d, "/memories/shadowed.txt") // in the default, under the mount
	r, err := c.Delete(ctx, "/memories/a")
	if err != nil || r.Path != "/memories/a" || r.Removed != 1 {
		t.Errorf("delete in a route: %+v %v", r, err)
	}
	_, err = c.Delete(ctx, "/memories/a")
	if be := wantCode(t, err, backend.CodeFileNotFound); be.Path != "/memories/a" {
		t.Errorf("path %q", be.Path)
	}
	// Deleting a default directory never touches routes under it.
	write(t, c, "/memories/kept")
	if r, err := c.Delete(ctx, "/"); backend.CodeOf(err) != backend.CodeInvalidPath {
		t.Errorf("delete /: %+v %v", r, err)
	}

	ex := c.(backend.Executor)
	_, err = ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd", Cwd: "/memories"})
	wantCode(t, err, backend.CodeInvalidArgument)
	_, err = ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd", Cwd: "/memories/private/x"})
	wantCode(t, err, backend.CodeInvalidArgument)
	_, err = ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd", Cwd: "/../x"})
	wantCode(t, err, backend.CodeInvalidPath)
	if len(d.got) != 0 {
		t.Fatalf("rejected executes reached the executor: %+v", d.got)
	}
	if _, err := ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd", Cwd: "/memories2", OffloadPath: "/memories/out.log"}); err != nil {
		t.Fatal(err)
	}
	if got := d.got[0]; got.Cwd != "/memories2" || got.OffloadPath != OffloadScratch+"/memories/out.log" {
		t.Errorf("executed %+v: want the cwd kept and the offload inside a route sent to the scratch dir", got)
	}
	if _, err := ex.Execute(ctx, backend.ExecuteRequest{Command: "pwd", OffloadPath: "/tmp/out.log"}); err != nil || d.got[1].OffloadPath != "/tmp/out.log" {
		t.Errorf("offload outside routes: %+v %v", d.got[1], err)
	}

	// Without an executor in the default there is no Execute at all.
	plain, err := New(state.New(), map[string]backend.Backend{"/m/": d}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.(backend.Executor); ok {
		t.Error("a Composite over State implements backend.Executor")
	}
	if plain.Home() != "/" {
		t.Errorf("home %q", plain.Home())
	}
}

// TestBatches is case 78: grouped per backend, results in input order
// with the original paths.
func TestBatches(t *testing.T) {
	f := newFixture(t)
	items := []backend.UploadItem{
		{Path: "/memories/a", Content: []byte("a")},
		{Path: "b", Content: []byte("b")},
		{Path: "/memories/c", Content: []byte("c")},
		{Path: "/../x"},
		{Path: "/memories/private/p", Content: []byte("p")},
		{Path: "/memories/a", Content: []byte("a2")},
		{Path: "/memories"},
	}
	res, err := f.c.Upload(ctx, items)
	if err != nil || len(res) != len(items) {
		t.Fatalf("upload: %v %v", res, err)
	}
	for i, r := range res {
		if r.Path != items[i].Path {
			t.Errorf("result %d path %q, want %q", i, r.Path, items[i].Path)
		}
	}
	for _, i := range []int{0, 1, 2, 4, 5} {
		if res[i].Err != nil || res[i].BytesWritten != int64(len(items[i].Content)) {
			t.Errorf("item %d: %+v", i, res[i])
		}
	}
	wantCode(t, res[3].Err, backend.CodeInvalidPath)
	if be := wantCode(t, res[6].Err, backend.CodeIsDirectory); be.Path != "/memories" {
		t.Errorf("route error not mapped: %+v", be)
	}

	dl, err := f.c.Download(ctx, []string{"/memories/c", "/b", "/memories/a", "/memories/private/p", "/memories/zz", "/memories", "/nope"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"c", "b", "a2", "p"} {
		if dl[i].Err != nil || string(dl[i].Content) != want {
			t.Errorf("download %d: %+v", i, dl[i])
		}
	}
	if be := wantCode(t, dl[4].Err, backend.CodeFileNotFound); be.Path != "/memories/zz" || !strings.Contains(be.Message, "/memories/zz") {
		t.Errorf("download error not mapped: %+v", be)
	}
	wantCode(t, dl[5].Err, backend.CodeIsDirectory)
	wantCode(t, dl[6].Err, backend.CodeFileNotFound)
	if dl[2].Path != "/memories/a" {
		t.Errorf("download path %q", dl[2].Path)
	}
	// The items landed in the owners, at their backend paths.
	if r, _ := f.m.Download(ctx, []string{"/a", "/c"}); string(r[0].Content) != "a2" || string(r[1].Content) != "c" {
		t.Errorf("M holds %+v", r)
	}
}

// TestShadowing: default content under a mount is invisible; a route's
// content under a nested mount is invisible; a path with a mount below is
// a directory.
func TestShadowing(t *testing.T) {
	f := newFixture(t)
	write(t, f.d, "/memories/hidden.txt", "/cache", "/top.txt")
	write(t, f.m, "/private/hidden.txt", "/n.txt")
	write(t, f.p, "/s.txt")

	res, err := f.c.Ls(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res.Entries), []string{"/cache/", "/memories/", "/top.txt"}; !slices.Equal(got, want) {
		t.Errorf("ls / = %q, want %q", got, want)
	}
	g, err := f.c.Grep(ctx, backend.GrepRequest{Pattern: "hit", Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range g.Matches {
		got = append(got, m.Path)
	}
	if want := []string{"/memories/n.txt", "/memories/private/s.txt", "/top.txt"}; !slices.Equal(got, want) {
		t.Errorf("grep / = %q, want %q", got, want)
	}
	gl, err := f.c.Glob(ctx, backend.GlobRequest{Pattern: "**", Path: "/memories"})
	if err != nil || !slices.Equal(paths(gl.Matches), []string{"/memories/n.txt", "/memories/private/s.txt"}) {
		t.Errorf("glob ** at /memories = %q %v", paths(gl.Matches), err)
	}

	// A mount deeper down makes its ancestors directories.
	deep, err := New(state.New(), map[string]backend.Backend{"/a/b/c/": state.New()}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ dir, want string }{{"/", "/a/"}, {"/a", "/a/b/"}, {"/a/b", "/a/b/c/"}} {
		res, err := deep.Ls(ctx, tt.dir)
		if err != nil || !slices.Equal(paths(res.Entries), []string{tt.want}) {
			t.Errorf("ls %s = %q %v, want [%s]", tt.dir, paths(res.Entries), err, tt.want)
		}
	}
	_, err = deep.Read(ctx, backend.ReadRequest{Path: "/a", Limit: 1})
	wantCode(t, err, backend.CodeIsDirectory)
	_, err = deep.Write(ctx, "/a/b", []byte("x"))
	wantCode(t, err, backend.CodeIsDirectory)
	_, err = deep.Ls(ctx, "/x")
	wantCode(t, err, backend.CodeFileNotFound)
	if gl, err := deep.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: "/a"}); err != nil || len(gl.Matches) != 0 || gl.Error != nil {
		t.Errorf("glob at a synthesized dir: %+v %v", gl, err)
	}
}

func TestNew(t *testing.T) {
	s := state.New()
	for _, tt := range []struct {
		name   string
		routes map[string]backend.Backend
		root   string
	}{
		{"root prefix", map[string]backend.Backend{"/": s}, ""},
		{"no trailing slash", map[string]backend.Backend{"/memories": s}, ""},
		{"relative", map[string]backend.Backend{"memories/": s}, ""},
		{"double slash", map[string]backend.Backend{"/a//b/": s}, ""},
		{"dot", map[string]backend.Backend{"/a/./b/": s}, ""},
		{"dotdot", map[string]backend.Backend{"/a/../b/": s}, ""},
		{"backslash", map[string]backend.Backend{`/a\b/`: s}, ""},
		{"empty", map[string]backend.Backend{"": s}, ""},
		{"nil backend", map[string]backend.Backend{"/m/": nil}, ""},
		{"bad artifacts root", nil, "/../x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(s, tt.routes, tt.root); err == nil {
				t.Fatal("New succeeded")
			} else if tt.routes != nil && !errors.Is(err, ErrInvalidRoute) {
				t.Errorf("error %v does not wrap ErrInvalidRoute", err)
			}
		})
	}
	if _, err := New(nil, nil, ""); err == nil {
		t.Error("New with a nil default succeeded")
	}
	c, err := New(s, map[string]backend.Backend{"/m/": s}, "tmp/plumb/")
	if err != nil || c.ArtifactsRoot() != "/tmp/plumb" || c.Default() != s || len(c.Routes()) != 1 {
		t.Errorf("New: %v %v", c, err)
	}
}

func TestRewritePath(t *testing.T) {
	for _, tt := range []struct{ msg, from, to, want string }{
		{"read /a.txt: no such file", "/a.txt", "/m/a.txt", "read /m/a.txt: no such file"},
		{"ls /: is a directory", "/", "/m", "ls /m: is a directory"},
		{`old_string "x" in /a.txt2 and /a.txt`, "/a.txt", "/m/a.txt", `old_string "x" in /a.txt2 and /m/a.txt`},
		{`path "/a" and /a/b`, "/a", "/m/a", `path "/m/a" and /m/a/b`},
		{"a/b/c", "/b", "/m/b", "a/b/c"},
	} {
		if got := rewritePath(tt.msg, tt.from, tt.to); got != tt.want {
			t.Errorf("rewritePath(%q, %q, %q) = %q, want %q", tt.msg, tt.from, tt.to, got, tt.want)
		}
	}
}

// FuzzRoute checks route mapping: any normalized path has exactly one
// owner, the one with the longest matching prefix, and its backend path
// maps back to the path itself.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{"/", "/memories", "/memories/", "/memories/private/x", "/memoriesx", "/cache/a/b", "/m", "/a/b/c/d"} {
		f.Add(s)
	}
	prefixes := []string{"/memories/", "/memories/private/", "/cache/", "/a/b/", "/a/b/c/", "/m/"}
	routes := map[string]backend.Backend{}
	for _, p := range prefixes {
		routes[p] = state.New()
	}
	c, err := New(state.New(), routes, "")
	if err != nil {
		f.Fatal(err)
	}
	rt := c.(*router)
	f.Fuzz(func(t *testing.T, raw string) {
		n, err := vpath.Normalize(raw)
		if err != nil {
			return
		}
		r, bp := rt.resolve(n)
		if got := full(r, bp); got != n {
			t.Fatalf("%q → %v %q → %q", n, r, bp, got)
		}
		if nb, err := vpath.Normalize(bp); err != nil || nb != bp {
			t.Fatalf("backend path %q of %q is not normalized", bp, n)
		}
		longest := ""
		for _, pre := range prefixes {
			if strings.HasPrefix(n+"/", pre) && len(pre) > len(longest) {
				longest = pre
			}
		}
		if (r == nil) != (longest == "") || r != nil && r.prefix != longest {
			t.Fatalf("%q routed to %v, want prefix %q", n, r, longest)
		}
		b, rbp, err := c.Resolve(raw)
		if err != nil || b != rt.backendOf(r) || rbp != bp {
			t.Fatalf("Resolve(%q) disagrees with resolve", raw)
		}
	})
}

// A routed error about a long path names the composite path, cut at 200
// characters like every message (docs/file-tools.md §6), and keeps the whole path in Path.
func TestRoutedErrorLongPath(t *testing.T) {
	f := newFixture(t)
	long := "/memories/" + strings.Repeat("d/", 150) + "missing.txt"
	_, err := f.c.Read(ctx, backend.ReadRequest{Path: long, Limit: 1})
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.CodeFileNotFound {
		t.Fatalf("read = %v, want file_not_found", err)
	}
	if be.Path != long {
		t.Errorf("Path = %q, want the whole composite path", be.Path)
	}
	if !strings.Contains(be.Message, backend.Clip(long)) {
		t.Errorf("message %q does not name %q", be.Message, backend.Clip(long))
	}
}

// offloader is a State backend whose Execute behaves like the sandbox
// agent's: it prints out, keeps the first 10 bytes inline when out is
// longer, and writes the whole output to OffloadPath, which it creates
// before "running" (a path under readOnly cannot be created).
type offloader struct {
	*state.Backend
	out      string
	readOnly string
	got      []backend.ExecuteRequest
}

func (e *offloader) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	if e.readOnly != "" && strings.HasPrefix(req.OffloadPath, e.readOnly+"/") {
		return backend.ExecuteResult{}, backend.Errorf(backend.CodePermissionDenied, req.OffloadPath, "execute offload %s: read-only file system", req.OffloadPath)
	}
	e.got = append(e.got, req)
	res := backend.ExecuteResult{Output: e.out, ExitCode: new(0), OutputBytes: int64(len(e.out))}
	if len(e.out) > 10 {
		res.Output, res.Truncated = e.out[:10], true
		if req.OffloadPath != "" {
			if _, err := e.Write(ctx, req.OffloadPath, []byte(e.out)); err != nil {
				return backend.ExecuteResult{}, err
			}
			res.OffloadedPath = req.OffloadPath
		}
	}
	return res, nil
}

// TestExecuteOffloadIntoRoute: the full output of a command reaches the
// requested offload path wherever it is mounted; the shell only ever
// writes to the default backend.
func TestExecuteOffloadIntoRoute(t *testing.T) {
	const full = "0123456789 and the rest of a long output"
	for _, tc := range []struct {
		name, offload string
		routes        []string
		readOnly      string
		wantErr       bool
		wantExec      string // the offload path the executor was given
		wantPath      string // OffloadedPath of the result
		wantIn        string // "route" or "default": where the file is
	}{
		{name: "default", offload: "/tmp/out.log", routes: []string{"/large_tool_results/"},
			wantExec: "/tmp/out.log", wantPath: "/tmp/out.log", wantIn: "default"},
		{name: "route", offload: "/large_tool_results/call_1", routes: []string{"/large_tool_results/"},
			wantExec: OffloadScratch + "/large_tool_results/call_1", wantPath: "/large_tool_results/call_1", wantIn: "route"},
		{name: "scratch is routed", offload: "/large_tool_results/call_1", routes: []string{"/large_tool_results/", "/tmp/"},
			wantExec: "", wantPath: ""},
		{name: "scratch cannot be created", offload: "/large_tool_results/call_1", routes: []string{"/large_tool_results/"}, readOnly: OffloadScratch,
			wantExec: "", wantPath: ""},
		// Outside routes the executor's error is the caller's to handle.
		{name: "offload cannot be created", offload: "/ro/out.log", routes: []string{"/large_tool_results/"}, readOnly: "/ro",
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &offloader{Backend: state.New(), out: full, readOnly: tc.readOnly}
			routes := map[string]backend.Backend{}
			for _, p := range tc.routes {
				routes[p] = state.New()
			}
			c, err := New(d, routes, "/")
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.(backend.Executor).Execute(ctx, backend.ExecuteRequest{Command: "long", OffloadPath: tc.offload})
			if tc.wantErr {
				if !backend.IsOffloadError(err, tc.offload) || len(d.got) != 0 {
					t.Fatalf("error %v after %d runs, want the offload error and no run", err, len(d.got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.got) != 1 || d.got[0].OffloadPath != tc.wantExec {
				t.Fatalf("executor calls %+v, want one with offload %q", d.got, tc.wantExec)
			}
			if !res.Truncated || res.OffloadedPath != tc.wantPath {
				t.Fatalf("result %+v, want truncated with offloaded_path %q", res, tc.wantPath)
			}
			if tc.wantPath == "" {
				return
			}
			got, err := c.Download(ctx, []string{tc.wantPath})
			if err != nil || got[0].Err != nil || string(got[0].Content) != full {
				t.Fatalf("download %s through the composite: %q %v %v", tc.wantPath, got[0].Content, err, got[0].Err)
			}
			if tc.wantIn == "route" {
				if _, err := d.Read(ctx, backend.ReadRequest{Path: tc.wantExec, Limit: 1}); backend.CodeOf(err) != backend.CodeFileNotFound {
					t.Errorf("the scratch file %s is left in the default backend: %v", tc.wantExec, err)
				}
			}
		})
	}
}
