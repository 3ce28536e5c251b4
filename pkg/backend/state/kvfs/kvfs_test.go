package kvfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/backend/state/kvfs"
	"github.com/plumbhq/plumb/pkg/backend/storefs"
)

// The focused cases below run against both KVs: the State backend (in
// memory) and the Store backend (a real SQLite file). The shared
// conformance suite (backendtest) runs in the state and store packages.

// backendsWith returns the two backends, with lim (zero fields take the
// defaults).
func backendsWith(lim kvfs.Limits) map[string]func(t *testing.T) backend.Backend {
	return map[string]func(t *testing.T) backend.Backend{
		"state": func(t *testing.T) backend.Backend { return state.New(state.WithLimits(lim)) },
		"store": func(t *testing.T) backend.Backend {
			db, err := storefs.Open(filepath.Join(t.TempDir(), "store.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			b, err := storefs.NewBackend(db, []string{"test", "ns"}, storefs.WithLimits(lim))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
}

func each(t *testing.T, fn func(t *testing.T, b backend.Backend)) {
	eachWith(t, kvfs.Limits{}, fn)
}

// eachWith is each with limits other than the defaults.
func eachWith(t *testing.T, lim kvfs.Limits, fn func(t *testing.T, b backend.Backend)) {
	for name, mk := range backendsWith(lim) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, mk(t))
		})
	}
}

var ctx = context.Background()

func seed(t *testing.T, b backend.Backend, files map[string]string) {
	t.Helper()
	var items []backend.UploadItem
	for p, c := range files {
		items = append(items, backend.UploadItem{Path: p, Content: []byte(c)})
	}
	res, err := b.Upload(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("seed %s: %v", r.Path, r.Err)
		}
	}
}

func wantCode(t *testing.T, err error, code backend.Code) {
	t.Helper()
	if got := backend.CodeOf(err); got != code {
		t.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
}

func lsPaths(t *testing.T, b backend.Backend, p string) []string {
	t.Helper()
	res, err := b.Ls(ctx, p)
	if err != nil {
		t.Fatalf("ls %s: %v", p, err)
	}
	var out []string
	for _, e := range res.Entries {
		out = append(out, e.Path)
	}
	return out
}

func download(t *testing.T, b backend.Backend, p string) []byte {
	t.Helper()
	res, err := b.Download(ctx, []string{p})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Fatalf("download %s: %v", p, res[0].Err)
	}
	return res[0].Content
}

func TestLs(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		if got := lsPaths(t, b, "/"); len(got) != 0 {
			t.Fatalf("empty root = %q", got)
		}
		seed(t, b, map[string]string{"/a.txt": "x", "/d/b.txt": "é", "/d/e/c.txt": "", "/d-x": "", "/d/e-f/g": "", "/.env": ""})
		if got, want := lsPaths(t, b, "/"), []string{"/.env", "/a.txt", "/d-x", "/d/"}; !slices.Equal(got, want) {
			t.Errorf("ls / = %q, want %q", got, want)
		}
		res, err := b.Ls(ctx, "/d/")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(res.Entries), 3; got != want {
			t.Fatalf("ls /d = %+v", res.Entries)
		}
		if e := res.Entries[0]; e.Path != "/d/b.txt" || e.Size != 2 || e.Kind != backend.KindFile || e.ModifiedAt == "" {
			t.Errorf("file entry %+v", e)
		}
		if e := res.Entries[1]; e.Path != "/d/e-f/" || !e.IsDir || e.Kind != backend.KindDir || e.Size != 0 || e.ModifiedAt != "" {
			t.Errorf("dir entry %+v", e)
		}
		if res.Entries[2].Path != "/d/e/" {
			t.Errorf("entry 2 = %+v", res.Entries[2])
		}
		_, err = b.Ls(ctx, "/missing")
		wantCode(t, err, backend.CodeFileNotFound)
		_, err = b.Ls(ctx, "/a.txt")
		wantCode(t, err, backend.CodeNotADirectory)
		_, err = b.Ls(ctx, "/a.txt/x")
		wantCode(t, err, backend.CodeNotADirectory)
		_, err = b.Ls(ctx, "/../x")
		wantCode(t, err, backend.CodeInvalidPath)
	})
}

func TestLsTruncated(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		var items []backend.UploadItem
		for i := range backend.LsMaxEntries + 1 {
			items = append(items, backend.UploadItem{Path: fmt.Sprintf("/d/f%05d", i)})
		}
		items = append(items, backend.UploadItem{Path: "/d/zz/sub"})
		if _, err := b.Upload(ctx, items); err != nil {
			t.Fatal(err)
		}
		res, err := b.Ls(ctx, "/d")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Truncated || len(res.Entries) != backend.LsMaxEntries || res.Entries[len(res.Entries)-1].Path != "/d/f09999" {
			t.Fatalf("truncated=%v n=%d last=%v", res.Truncated, len(res.Entries), res.Entries[len(res.Entries)-1])
		}
	})
}

func TestRead(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		seed(t, b, map[string]string{"/n.txt": "one\ntwo\nthree\nfour\nfive", "/e": "", "/d/x": "1", "/x.bin": "a\x00b"})
		r, err := b.Read(ctx, backend.ReadRequest{Path: "n.txt", Offset: 2, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if r.Path != "/n.txt" || r.Content != "three\nfour" || *r.NextOffset != 4 || *r.TotalLines != 5 || r.StartLine != 3 {
			t.Errorf("read = %+v", r)
		}
		r, err = b.Read(ctx, backend.ReadRequest{Path: "/e", Limit: 5})
		if err != nil || !r.EmptyFile {
			t.Errorf("empty: %+v %v", r, err)
		}
		_, err = b.Read(ctx, backend.ReadRequest{Path: "/n.txt", Offset: 5, Limit: 1})
		wantCode(t, err, backend.CodeOffsetOutOfRange)
		for _, p := range []string{"/d", "/"} {
			_, err = b.Read(ctx, backend.ReadRequest{Path: p, Limit: 1})
			wantCode(t, err, backend.CodeIsDirectory)
		}
		_, err = b.Read(ctx, backend.ReadRequest{Path: "/nope", Limit: 1})
		wantCode(t, err, backend.CodeFileNotFound)
		_, err = b.Read(ctx, backend.ReadRequest{Path: "/n.txt/x", Limit: 1})
		wantCode(t, err, backend.CodeNotADirectory)
		_, err = b.Read(ctx, backend.ReadRequest{Path: "/x.bin", Limit: 1})
		wantCode(t, err, backend.CodeNotText)
	})
}

func TestWrite(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		w, err := b.Write(ctx, "/a.txt", []byte("x"))
		if err != nil || !w.Created || w.BytesWritten != 1 || w.Path != "/a.txt" {
			t.Fatalf("write 1 = %+v %v", w, err)
		}
		ls1, _ := b.Glob(ctx, backend.GlobRequest{Pattern: "a.txt", Path: "/"})
		time.Sleep(2 * time.Millisecond) // distinct modified_at
		w, err = b.Write(ctx, "/a.txt", []byte("y"))
		if err != nil || w.Created {
			t.Fatalf("write 2 = %+v %v", w, err)
		}
		ls2, _ := b.Glob(ctx, backend.GlobRequest{Pattern: "a.txt", Path: "/"})
		if ls1.Matches[0].ModifiedAt == ls2.Matches[0].ModifiedAt {
			t.Errorf("modified_at not bumped: %s", ls1.Matches[0].ModifiedAt)
		}
		if got := string(download(t, b, "/a.txt")); got != "y" {
			t.Errorf("content %q", got)
		}
		if _, err := b.Write(ctx, "/new/deep/f.txt", []byte("a\r\nb")); err != nil {
			t.Fatal(err)
		}
		if got := lsPaths(t, b, "/new"); !slices.Equal(got, []string{"/new/deep/"}) {
			t.Errorf("ls /new = %q", got)
		}
		if got := download(t, b, "/new/deep/f.txt"); string(got) != "a\r\nb" {
			t.Errorf("crlf content %q", got)
		}
		_, err = b.Write(ctx, "/new", []byte("x"))
		wantCode(t, err, backend.CodeIsDirectory)
		_, err = b.Write(ctx, "/", []byte("x"))
		wantCode(t, err, backend.CodeIsDirectory)
		_, err = b.Write(ctx, "/a.txt/b", []byte("x"))
		wantCode(t, err, backend.CodeNotADirectory)
		_, err = b.Write(ctx, "/a.txt/b/c", []byte("x"))
		wantCode(t, err, backend.CodeNotADirectory)
		_, err = b.Write(ctx, "/big", make([]byte, backend.WriteCap+1))
		wantCode(t, err, backend.CodeTooLarge)
		_, err = b.Write(ctx, "/a/../b", nil)
		wantCode(t, err, backend.CodeInvalidPath)
	})
}

func TestEdit(t *testing.T) {
	tests := []struct {
		name, content, old, new string
		all                     bool
		want                    string
		code                    backend.Code
		n                       int
		adapted                 bool
	}{
		{"one", "def hello():\n    print('hello world')", "world", "universe", false, "def hello():\n    print('hello universe')", "", 1, false},
		{"all", "foo bar foo baz foo", "foo", "qux", true, "qux bar qux baz qux", "", 3, false},
		{"multiple", "foo bar foo baz foo", "foo", "qux", false, "", backend.CodeMultipleOccurrences, 0, false},
		{"absent", "abc", "zzz", "y", false, "", backend.CodeStringNotFound, 0, false},
		{"empty old", "abc", "", "y", false, "", backend.CodeInvalidArgument, 0, false},
		{"empty old on empty", "", "", "y", false, "", backend.CodeInvalidArgument, 0, false},
		{"same", "abc", "a", "a", false, "", backend.CodeInvalidArgument, 0, false},
		{"eof newline", "a\nx", "x\n", "y", false, "", backend.CodeStringNotFound, 0, false},
		{"crlf", "one\r\ntwo\r\nthree\r\n", "one\ntwo", "1\n2", false, "1\r\n2\r\nthree\r\n", "", 1, true},
		{"lf file crlf old", "a\nb", "a\r\nb", "c\r\nd", false, "c\nd", "", 1, true},
		{"overlap", "aaa", "aa", "X", true, "Xa", "", 1, false},
		{"invalid utf8 kept", "ok\n\xff bad\nok2\n", "ok2", "fine", false, "ok\n\xff bad\nfine\n", "", 1, false},
		{"binary", "a\x00b", "a", "b", false, "", backend.CodeNotText, 0, false},
	}
	each(t, func(t *testing.T, b backend.Backend) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				p := "/" + strings.ReplaceAll(tt.name, " ", "_")
				seed(t, b, map[string]string{p: tt.content})
				r, err := b.Edit(ctx, backend.EditRequest{Path: p, Old: tt.old, New: tt.new, ReplaceAll: tt.all})
				if tt.code != "" {
					wantCode(t, err, tt.code)
					if got := string(download(t, b, p)); got != tt.content {
						t.Errorf("file changed to %q", got)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.Occurrences != tt.n || r.LineEndingAdapted != tt.adapted || r.Path != p {
					t.Errorf("result %+v", r)
				}
				if got := string(download(t, b, p)); got != tt.want {
					t.Errorf("content %q, want %q", got, tt.want)
				}
			})
		}
		_, err := b.Edit(ctx, backend.EditRequest{Path: "/missing", Old: "a", New: "b"})
		wantCode(t, err, backend.CodeFileNotFound)
		seed(t, b, map[string]string{"/dir/f": "x"})
		_, err = b.Edit(ctx, backend.EditRequest{Path: "/dir", Old: "a", New: "b"})
		wantCode(t, err, backend.CodeIsDirectory)
		seed(t, b, map[string]string{"/m.png": "\x89PNG\r\n\x1a\n...."})
		_, err = b.Edit(ctx, backend.EditRequest{Path: "/m.png", Old: "PNG", New: "b"})
		wantCode(t, err, backend.CodeNotText)
	})
}

func TestDelete(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		seed(t, b, map[string]string{"/dir/a": "", "/dir/b/c": "", "/dir-x": "keep", "/dirz": "keep", "/di": "keep"})
		r, err := b.Delete(ctx, "/dir")
		if err != nil || r.Removed != 2 || r.Path != "/dir" {
			t.Fatalf("delete = %+v %v", r, err)
		}
		if got, want := lsPaths(t, b, "/"), []string{"/di", "/dir-x", "/dirz"}; !slices.Equal(got, want) {
			t.Errorf("ls / = %q", got)
		}
		r, err = b.Delete(ctx, "/dirz")
		if err != nil || r.Removed != 1 {
			t.Fatalf("delete file = %+v %v", r, err)
		}
		_, err = b.Delete(ctx, "/missing")
		wantCode(t, err, backend.CodeFileNotFound)
		_, err = b.Delete(ctx, "/")
		wantCode(t, err, backend.CodeInvalidPath)
		_, err = b.Delete(ctx, "/di/x")
		wantCode(t, err, backend.CodeNotADirectory)
	})
}

func TestGrep(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		seed(t, b, map[string]string{
			"/test.py":       "import os\nimport sys\nprint('hello')",
			"/main.py":       "import x",
			"/lit.txt":       "axb\na.b",
			"/crlf.txt":      "a\r\nimport\rb\nimport",
			"/bin.dat":       "import\x00",
			"/repo/src/a.go": "import",
			"/repo/b.go":     "import",
			"/.hidden/h.py":  "import",
			"/long.txt":      "import" + strings.Repeat("x", 200000),
		})
		g := func(req backend.GrepRequest) backend.GrepResult {
			t.Helper()
			r, err := b.Grep(ctx, req)
			if err != nil {
				t.Fatalf("grep %+v: %v", req, err)
			}
			return r
		}
		r := g(backend.GrepRequest{Pattern: "import", Path: "/", Glob: "*.py"})
		var got []string
		for _, m := range r.Matches {
			got = append(got, fmt.Sprintf("%s:%d", m.Path, m.Line))
		}
		if want := []string{"/.hidden/h.py:1", "/main.py:1", "/test.py:1", "/test.py:2"}; !slices.Equal(got, want) {
			t.Errorf("grep *.py = %q", got)
		}
		r = g(backend.GrepRequest{Pattern: "a.b", Path: "/lit.txt"})
		if len(r.Matches) != 1 || r.Matches[0].Line != 2 {
			t.Errorf("literal: %+v", r.Matches)
		}
		r = g(backend.GrepRequest{Pattern: "^import (os|sys)$", Regex: true, Path: "/"})
		if len(r.Matches) != 2 {
			t.Errorf("regex: %+v", r.Matches)
		}
		_, err := b.Grep(ctx, backend.GrepRequest{Pattern: "(", Regex: true, Path: "/"})
		wantCode(t, err, backend.CodeInvalidPattern)
		r = g(backend.GrepRequest{Pattern: "import", Path: "/test.py", MaxCount: 1})
		if len(r.Matches) != 1 || !r.Truncated || r.TruncationReason != backend.TruncatedMaxCount {
			t.Errorf("max 1: %+v", r)
		}
		r = g(backend.GrepRequest{Pattern: "import", Path: "/test.py", MaxCount: 2})
		if len(r.Matches) != 2 || r.Truncated {
			t.Errorf("max 2: %+v", r)
		}
		r = g(backend.GrepRequest{Pattern: "import", Path: "/repo", Glob: "src/*.go"})
		if len(r.Matches) != 1 || r.Matches[0].Path != "/repo/src/a.go" {
			t.Errorf("glob src/*.go: %+v", r.Matches)
		}
		r = g(backend.GrepRequest{Pattern: "import", Path: "/crlf.txt"})
		if len(r.Matches) != 2 || r.Matches[0].Line != 2 || r.Matches[1].Line != 4 || r.Matches[0].Text != "import" {
			t.Errorf("crlf: %+v", r.Matches)
		}
		r = g(backend.GrepRequest{Pattern: "import", Path: "/bin.dat"})
		if len(r.Matches) != 0 || r.FilesSkippedBinary != 1 {
			t.Errorf("binary: %+v", r)
		}
		r = g(backend.GrepRequest{Pattern: "import", Path: "/long.txt"})
		if len(r.Matches) != 1 || !r.Matches[0].TextTruncated || len([]rune(r.Matches[0].Text)) != backend.GrepTextMaxChars {
			t.Errorf("long line: truncated=%v", r.Matches[0].TextTruncated)
		}
		_, err = b.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/missing"})
		wantCode(t, err, backend.CodeFileNotFound)
		_, err = b.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/", MaxCount: backend.GrepMaxMax + 1})
		wantCode(t, err, backend.CodeInvalidArgument)
		_, err = b.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/a\x00"})
		wantCode(t, err, backend.CodeInvalidPath)
	})
}

// TestGlobMatrix is the docs/file-tools.md §4.7 conformance matrix G1–G27.
func TestGlobMatrix(t *testing.T) {
	tree := map[string]string{"/a.py": "", "/sub/b.py": "", "/sub/nested/c.py": "", "/readme.md": "",
		"/.hidden.py": "", "/.hidden/x.py": "", "/.github/workflows/ci.yml": ""}
	g1 := []string{"/.hidden/x.py", "/a.py", "/sub/b.py", "/sub/nested/c.py"}
	all := []string{"/.github/workflows/ci.yml", "/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}
	tests := []struct {
		id, pattern, path string
		want              []string
		code              backend.Code
	}{
		{"G1", "*.py", "/", g1, ""},
		{"G2", "**/*.py", "/", []string{"/a.py", "/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G3", "sub/*.py", "/", []string{"/sub/b.py"}, ""},
		{"G4", "sub/**/*.py", "/", []string{"/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G5", "/*.py", "/", []string{"/a.py"}, ""},
		{"G6", "a.py/**", "/", nil, ""},
		{"G7", "*.py", "/sub", []string{"/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G8", "*.yml", "/", []string{"/.github/workflows/ci.yml"}, ""},
		{"G9", "**/*.yml", "/", nil, ""},
		{"G10", ".github/**/*.yml", "/", []string{"/.github/workflows/ci.yml"}, ""},
		{"G11a", ".hidden.py", "/", []string{"/.hidden.py"}, ""},
		{"G11b", ".*.py", "/", []string{"/.hidden.py"}, ""},
		{"G12", "*", "/", all, ""},
		{"G13a", "[!a].py", "/", []string{"/.hidden/x.py", "/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G13b", "[^a].py", "/", []string{"/.hidden/x.py", "/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G14", "*.{py,md}", "/", []string{"/.hidden/x.py", "/a.py", "/readme.md", "/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G15", "**", "/", all, ""},
		{"G16", "sub/**", "/", []string{"/sub/b.py", "/sub/nested/c.py"}, ""},
		{"G17", "nested/c.py", "/", nil, ""},
		{"G18", "nested/*.py", "/sub", []string{"/sub/nested/c.py"}, ""},
		{"G19", "?.py", "/", g1, ""},
		{"G20", "*.PY", "/", nil, ""},
		{"G21", "{sub,.hidden}/*.py", "/", []string{"/.hidden/x.py", "/sub/b.py"}, ""},
		{"G22", "*/x.py", "/", nil, ""},
		{"G23", "!*.py", "/", nil, ""},
		{"G24", "sub", "/", nil, ""},
		{"G25a", "../*.py", "/", nil, backend.CodeInvalidPattern},
		{"G25b", "[ab", "/", nil, backend.CodeInvalidPattern},
		{"G26", "{a.py", "/", nil, ""},
		{"G27a", "*.py", "/missing", nil, backend.CodeFileNotFound},
		{"G27b", "*.py", "/a.py", nil, backend.CodeNotADirectory},
	}
	each(t, func(t *testing.T, b backend.Backend) {
		seed(t, b, tree)
		for _, tt := range tests {
			t.Run(tt.id, func(t *testing.T) {
				r, err := b.Glob(ctx, backend.GlobRequest{Pattern: tt.pattern, Path: tt.path})
				if tt.code != "" {
					wantCode(t, err, tt.code)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, m := range r.Matches {
					got = append(got, m.Path)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("glob %q at %s = %q, want %q", tt.pattern, tt.path, got, tt.want)
				}
			})
		}
	})
}

// manyFiles uploads backend.GlobMaxMatches+1 empty files /m/<i>/f.txt.
func manyFiles(t *testing.T, b backend.Backend) {
	t.Helper()
	var items []backend.UploadItem
	for i := range backend.GlobMaxMatches + 1 {
		items = append(items, backend.UploadItem{Path: fmt.Sprintf("/m/%d/f.txt", i)})
	}
	if _, err := b.Upload(ctx, items); err != nil {
		t.Fatal(err)
	}
}

// TestGlobCap checks the match cap with time budgets that cannot run out on
// any machine, so that what it counts does not depend on the machine's speed.
func TestGlobCap(t *testing.T) {
	eachWith(t, kvfs.Limits{GrepBudget: 24 * time.Hour, GlobBudget: 24 * time.Hour}, func(t *testing.T, b backend.Backend) {
		manyFiles(t, b)
		r, err := b.Glob(ctx, backend.GlobRequest{Pattern: "*.txt", Path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Matches) != backend.GlobMaxMatches || !r.Truncated || r.TruncationReason != backend.TruncatedMaxMatches {
			t.Fatalf("n=%d truncated=%v reason=%s", len(r.Matches), r.Truncated, r.TruncationReason)
		}
		r2, err := b.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/", MaxCount: 5})
		if err != nil || len(r2.Matches) != 0 || r2.Truncated || r2.FilesSearched != backend.GlobMaxMatches+1 {
			t.Fatalf("grep over empty files: searched=%d truncated=%v %v", r2.FilesSearched, r2.Truncated, err)
		}
	})
}

// TestSearchTimeBudget checks what a spent time budget yields: a truncated
// result marked as such, whose counts agree with each other, and no error.
// The budgets are so short that they run out on any machine.
func TestSearchTimeBudget(t *testing.T) {
	eachWith(t, kvfs.Limits{GrepBudget: time.Nanosecond, GlobBudget: time.Nanosecond}, func(t *testing.T, b backend.Backend) {
		manyFiles(t, b)
		r, err := b.Glob(ctx, backend.GlobRequest{Pattern: "*.txt", Path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Truncated || r.TruncationReason != backend.TruncatedTimeBudget || len(r.Matches) > backend.GlobMaxMatches {
			t.Fatalf("glob: n=%d truncated=%v reason=%s", len(r.Matches), r.Truncated, r.TruncationReason)
		}
		r2, err := b.Grep(ctx, backend.GrepRequest{Pattern: "x", Path: "/", MaxCount: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !r2.Truncated || r2.TruncationReason != backend.TruncatedTimeBudget || len(r2.Matches) != 0 ||
			r2.FilesSearched > backend.GlobMaxMatches+1 {
			t.Fatalf("grep: searched=%d truncated=%v reason=%s", r2.FilesSearched, r2.Truncated, r2.TruncationReason)
		}
	})
}

func TestUploadDownload(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		seed(t, b, map[string]string{"/d/x": "1"})
		res, err := b.Upload(ctx, []backend.UploadItem{{Path: "/a.bin", Content: all}, {Path: "/../x"}, {Path: "/d"}, {Path: "/x.dat", Content: []byte("\xff\xfe")}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err != nil || res[0].BytesWritten != 256 || res[0].Path != "/a.bin" {
			t.Errorf("item 0: %+v", res[0])
		}
		if res[1].Path != "/../x" || backend.CodeOf(res[1].Err) != backend.CodeInvalidPath {
			t.Errorf("item 1: %+v", res[1])
		}
		if backend.CodeOf(res[2].Err) != backend.CodeIsDirectory {
			t.Errorf("item 2: %+v", res[2])
		}
		dl, err := b.Download(ctx, []string{"/missing", "/a.bin", "/d", "x.dat"})
		if err != nil {
			t.Fatal(err)
		}
		if backend.CodeOf(dl[0].Err) != backend.CodeFileNotFound || !bytes.Equal(dl[1].Content, all) || dl[1].Size != 256 ||
			backend.CodeOf(dl[2].Err) != backend.CodeIsDirectory || string(dl[3].Content) != "\xff\xfe" || dl[3].Path != "x.dat" {
			t.Errorf("download = %+v", dl)
		}
		_, err = b.Read(ctx, backend.ReadRequest{Path: "/x.dat", Limit: 10})
		wantCode(t, err, backend.CodeNotText)
		// The caller's buffer is not retained.
		buf := []byte("abc")
		if _, err := b.Write(ctx, "/buf", buf); err != nil {
			t.Fatal(err)
		}
		buf[0] = 'X'
		if got := string(download(t, b, "/buf")); got != "abc" {
			t.Errorf("stored content aliases the caller's buffer: %q", got)
		}
	})
}

// TestConcurrent is H9: parallel writes never tear, parallel edits of one
// file never lose an update.
func TestConcurrent(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		const n = 32
		var tokens []string
		for i := range n {
			tokens = append(tokens, fmt.Sprintf("<tok%02d>", i))
		}
		seed(t, b, map[string]string{"/e.txt": strings.Join(tokens, "\n")})
		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 1<<20)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range n {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := b.Write(ctx, "/c.txt", payloads[i])
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := b.Edit(ctx, backend.EditRequest{Path: "/e.txt", Old: tokens[i], New: fmt.Sprintf("[done%02d]", i)})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		c := download(t, b, "/c.txt")
		if !slices.ContainsFunc(payloads, func(p []byte) bool { return bytes.Equal(p, c) }) {
			t.Errorf("/c.txt is not one of the payloads")
		}
		e := string(download(t, b, "/e.txt"))
		for i := range n {
			if !strings.Contains(e, fmt.Sprintf("[done%02d]", i)) {
				t.Errorf("edit %d lost: %q", i, e)
			}
		}
	})
}

// TestEditRacesDelete checks that an edit never resurrects a file that a
// delete of its directory removed: the edit either happened before the
// delete or fails with file_not_found.
func TestEditRacesDelete(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		for i := range 20 {
			seed(t, b, map[string]string{"/d/f": "aaaa"})
			done := make(chan error, 1)
			go func() {
				_, err := b.Edit(ctx, backend.EditRequest{Path: "/d/f", Old: "a", New: "b", ReplaceAll: true})
				done <- err
			}()
			if _, err := b.Delete(ctx, "/d"); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if err != nil && backend.CodeOf(err) != backend.CodeFileNotFound {
				t.Fatalf("round %d: %v", i, err)
			}
			if _, err := b.Ls(ctx, "/d"); backend.CodeOf(err) != backend.CodeFileNotFound && err == nil {
				// The edit committed after the delete: only allowed if
				// it had read before, which a Rev check forbids.
				t.Fatalf("round %d: the edit resurrected /d/f", i)
			}
		}
	})
}

func TestCancelled(t *testing.T) {
	each(t, func(t *testing.T, b backend.Backend) {
		c, cancel := context.WithCancel(ctx)
		cancel()
		_, err := b.Write(c, "/x", []byte("x"))
		if code := backend.CodeOf(err); code != backend.CodeCancelled {
			t.Fatalf("write with a cancelled context: %v", err)
		}
		var be *backend.Error
		if !errors.As(err, &be) || be.Path != "/x" {
			t.Errorf("error %#v", err)
		}
	})
}
