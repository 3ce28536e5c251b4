package backendtest

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/plumbhq/plumb/pkg/backend"
)

// extraCases (X01…) check rules of docs/file-tools.md §2–§4 that the §7 table does not
// number.
func extraCases() []testCase {
	return []testCase{
		{name: "X01_symlink_inside_root_followed", caps: []Capability{Symlink}, run: func(e *env) {
			// docs/file-tools.md §2 Resolution and §4.3: relative in-root links are followed by
			// read, write, edit and download; the link itself stays; walks
			// do not follow links but a starting path does.
			e.seed(map[string]string{"/real.txt": "one\n", "/dir/inner.txt": "inner\n"})
			e.symlink("/lnk.txt", "real.txt")
			e.symlink("/dlink", "dir")
			e.symlink("/dir/up.txt", "../real.txt")
			if r := e.mustRead("/lnk.txt", 0, 10); r.Content != "one" {
				e.t.Errorf("read /lnk.txt = %q, want %q", r.Content, "one")
			}
			if r := e.mustRead("/dlink/inner.txt", 0, 10); r.Content != "inner" {
				e.t.Errorf("read /dlink/inner.txt = %q", r.Content)
			}
			if r := e.mustRead("/dir/up.txt", 0, 10); r.Content != "one" {
				e.t.Errorf("read /dir/up.txt = %q", r.Content)
			}
			_, err := e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/lnk.txt"), Old: "one", New: "two"})
			e.noErr("edit /lnk.txt", err)
			e.wantContent("/real.txt", "two\n")
			w, err := e.b.Write(e.ctx, e.p("/lnk.txt"), []byte("three\n"))
			if e.noErr("write /lnk.txt", err) && w.Created {
				e.t.Errorf("write through a link to an existing file reported created")
			}
			e.wantContent("/real.txt", "three\n")
			e.wantContent("/lnk.txt", "three\n")
			for _, fi := range e.ls("/") {
				if (fi.Path == "/lnk.txt" || fi.Path == "/dlink") && fi.Kind != backend.KindSymlink {
					e.t.Errorf("ls /: %s has kind %q after writes, want symlink", fi.Path, fi.Kind)
				}
			}
			e.wantList("ls /dlink", e.lsPaths("/dlink"), []string{"/dlink/inner.txt", "/dlink/up.txt"})
			e.wantList(`glob "*.txt"`, e.globPaths("*.txt", "/"), []string{"/dir/inner.txt", "/real.txt"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "e", Path: "/"})
			e.wantList("grep e", matchKeys(res.Matches), []string{"/dir/inner.txt:1", "/real.txt:1"})
		}},
		{name: "X02_symlink_absolute_target", caps: []Capability{Symlink}, run: func(e *env) {
			e.seed(map[string]string{"/real.txt": "one\n"})
			e.symlink("/abs.txt", e.p("/real.txt"))
			_, err := e.read("/abs.txt", 0, 10)
			if be := e.wantCode("read /abs.txt", err, backend.CodeInvalidPath); be != nil && !strings.Contains(be.Message, e.p("/real.txt")) {
				e.t.Errorf("read /abs.txt: message %q does not name the target", be.Message)
			}
			_, err = e.b.Write(e.ctx, e.p("/abs.txt"), []byte("x"))
			e.wantCode("write /abs.txt", err, backend.CodeInvalidPath)
			e.wantContent("/real.txt", "one\n")
		}},
		{name: "X03_symlink_dangling", caps: []Capability{Symlink}, run: func(e *env) {
			e.symlink("/dangle", "nowhere")
			e.wantList("ls /", e.lsPaths("/"), []string{"/dangle"})
			_, err := e.read("/dangle", 0, 10)
			e.wantCode("read /dangle", err, backend.CodeFileNotFound)
			r, err := e.b.Delete(e.ctx, e.p("/dangle"))
			if e.noErr("delete /dangle", err) && r.Removed != 1 {
				e.t.Errorf("delete /dangle removed %d, want 1", r.Removed)
			}
			e.wantList("ls / after delete", e.lsPaths("/"), nil)
		}},
		{name: "X04_write_modes", caps: []Capability{Mode}, run: func(e *env) {
			// docs/file-tools.md §4.3: a new file gets 0644, an existing one keeps its mode
			// through write, upload and edit (docs/file-tools.md §4.4 step 8), also when that
			// mode is narrower or wider than 0644.
			_, err := e.b.Write(e.ctx, e.p("/new.txt"), []byte("n"))
			e.noErr("write /new.txt", err)
			e.wantMode("/", "/new.txt", 0o644)
			for _, op := range replacingOps(e) {
				for _, mode := range []fs.FileMode{0o755, 0o600, 0o664} {
					p := fmt.Sprintf("/%s-%o.txt", op.name, mode)
					e.seed(map[string]string{p: "old"})
					if err := e.h.Chmod(e.ctx, e.p(p), mode); err != nil {
						e.t.Fatalf("chmod: %v", err)
					}
					if e.noErr(op.name+" "+p, op.do(p)) {
						e.wantContent(p, "new")
						e.wantMode("/", p, mode)
					}
				}
			}
		}},
		{name: "X14_read_only_file_refused", caps: []Capability{Mode}, run: func(e *env) {
			// Decision (docs/file-tools.md silent; fileops package doc): write, upload and
			// edit of a file without write permission are permission_denied
			// and leave it alone, although the atomic rename could replace
			// it. Delete follows POSIX unlink (the directory decides).
			e.seed(map[string]string{"/ro.txt": "old"})
			if err := e.h.Chmod(e.ctx, e.p("/ro.txt"), 0o444); err != nil {
				e.t.Fatalf("chmod: %v", err)
			}
			for _, op := range replacingOps(e) {
				e.wantCode(op.name+" a 0444 file", op.do("/ro.txt"), backend.CodePermissionDenied)
				e.wantContent("/ro.txt", "old")
			}
			e.wantMode("/", "/ro.txt", 0o444)
			e.wantList("ls / (no temp file left)", e.lsPaths("/"), []string{"/ro.txt"})
			r, err := e.b.Delete(e.ctx, e.p("/ro.txt"))
			if e.noErr("delete a 0444 file", err) && r.Removed != 1 {
				e.t.Errorf("delete /ro.txt removed %d, want 1", r.Removed)
			}
		}},
		{name: "X05_special_file_never_opened", caps: []Capability{Special}, run: func(e *env) {
			// docs/file-tools.md §4.2 step 1: a FIFO is not_regular_file, decided without
			// opening it (opening a FIFO with no writer would block).
			e.seed(map[string]string{"/t.txt": "x\n"})
			if err := e.h.Mkfifo(e.ctx, e.p("/pipe")); err != nil {
				e.t.Fatalf("mkfifo: %v", err)
			}
			e.deadline(hostileTimeout)
			_, err := e.read("/pipe", 0, 10)
			e.wantCode("read /pipe", err, backend.CodeNotRegularFile)
			_, err = e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/pipe"), Old: "a", New: "b"})
			e.wantCode("edit /pipe", err, backend.CodeNotRegularFile)
			res, err := e.b.Download(e.ctx, []string{e.p("/pipe")})
			if e.noErr("download /pipe", err) && len(res) == 1 {
				e.wantItemCode("download /pipe", res[0].Err, backend.CodeNotRegularFile)
			}
			if fi, ok := e.entry("/", "/pipe"); !ok || fi.Kind != backend.KindOther {
				e.t.Errorf("ls /: /pipe = %+v (listed %v), want kind other", fi, ok)
			}
			e.wantList(`glob "*"`, e.globPaths("*", "/"), []string{"/t.txt"})
			g := e.mustGrep(backend.GrepRequest{Pattern: "x", Path: "/"})
			e.wantList("grep x", matchKeys(g.Matches), []string{"/t.txt:1"})
			r, err := e.b.Delete(e.ctx, e.p("/pipe"))
			if e.noErr("delete /pipe", err) && r.Removed != 1 {
				e.t.Errorf("delete /pipe removed %d, want 1", r.Removed)
			}
		}},
		{name: "X06_upload_duplicates_in_order", run: func(e *env) {
			res, err := e.b.Upload(e.ctx, []backend.UploadItem{
				{Path: e.p("/dup.txt"), Content: []byte("first")},
				{Path: e.p("/dup.txt"), Content: []byte("second")},
			})
			if !e.noErr("upload", err) || len(res) != 2 {
				return
			}
			for i, r := range res {
				if r.Err != nil {
					e.t.Errorf("upload item %d: %v", i, r.Err)
				}
			}
			e.wantContent("/dup.txt", "second")
		}},
		{name: "X07_grep_argument_errors", run: func(e *env) {
			e.seed(map[string]string{"/a.txt": "a\n"})
			for _, tt := range []struct {
				req  backend.GrepRequest
				code backend.Code
			}{
				{backend.GrepRequest{Pattern: "a", MaxCount: -1}, backend.CodeInvalidArgument},
				{backend.GrepRequest{Pattern: "a", MaxCount: backend.GrepMaxMax + 1}, backend.CodeInvalidArgument},
				{backend.GrepRequest{Pattern: ""}, backend.CodeInvalidArgument},
				{backend.GrepRequest{Pattern: "a\nb"}, backend.CodeInvalidArgument},
				{backend.GrepRequest{Pattern: "a", Glob: "[ab"}, backend.CodeInvalidPattern},
			} {
				tt.req.Path = "/"
				_, err := e.grep(tt.req)
				e.wantCode("grep "+strings.ReplaceAll(tt.req.Pattern, "\n", `\n`), err, tt.code)
			}
			res := e.mustGrep(backend.GrepRequest{Pattern: "a", Path: "/", MaxCount: backend.GrepMaxMax})
			e.wantList("grep max_count 10000", matchKeys(res.Matches), []string{"/a.txt:1"})
		}},
		{name: "X08_bom_hidden_but_kept", run: func(e *env) {
			e.seed(map[string]string{"/bom.txt": "\uFEFFhello\nworld\n"})
			r := e.mustRead("/bom.txt", 0, 10)
			e.window("read", r, "hello\nworld", 1, 2, intp(2), nil)
			g := e.mustGrep(backend.GrepRequest{Pattern: "hello", Path: "/"})
			if len(g.Matches) != 1 || g.Matches[0].Text != "hello" || g.Matches[0].Line != 1 {
				e.t.Errorf("grep hello = %+v, want line 1 text \"hello\"", g.Matches)
			}
			_, err := e.b.Edit(e.ctx, backend.EditRequest{Path: e.p("/bom.txt"), Old: "world", New: "there"})
			e.noErr("edit", err)
			e.wantContent("/bom.txt", "\uFEFFhello\nthere\n")
		}},
		{name: "X09_walks_include_dotfiles", run: func(e *env) {
			e.seed(map[string]string{"/.env": "needle\n", "/.git/config": "needle\n", "/a.txt": "needle\n"})
			g := e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/"})
			e.wantList("grep needle", matchKeys(g.Matches), []string{"/.env:1", "/.git/config:1", "/a.txt:1"})
			if g.FilesSearched != 3 {
				e.t.Errorf("files_searched %d, want 3", g.FilesSearched)
			}
			res, err := e.glob("*", "/")
			if e.noErr("glob *", err) {
				e.wantList(`glob "*"`, pathsOf(res.Matches), []string{"/.git/config", "/a.txt"})
				for _, fi := range res.Matches {
					if fi.Size != 7 {
						e.t.Errorf("glob: %s size %d, want 7", fi.Path, fi.Size)
					}
				}
			}
		}},
		{name: "X10_whitespace_file_is_text", run: func(e *env) {
			e.seed(map[string]string{"/ws.txt": "  \n"})
			r := e.mustRead("/ws.txt", 0, 10)
			e.window("read", r, "  ", 1, 1, intp(1), nil)
		}},
		{name: "X11_delete_counts", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "f", "/d/x": "x"})
			r, err := e.b.Delete(e.ctx, e.p("/f.txt"))
			if e.noErr("delete /f.txt", err) && r.Removed != 1 {
				e.t.Errorf("delete a file removed %d, want 1", r.Removed)
			}
			_, err = e.b.Delete(e.ctx, e.p("/d/x"))
			e.noErr("delete /d/x", err)
			// A directory outlives its last file only on backends with real
			// directories; in State and Store it exists iff a key lies under
			// it (docs/file-tools.md §4), so there it is gone now.
			if _, ok := e.entry("/", "/d/"); ok {
				r, err = e.b.Delete(e.ctx, e.p("/d"))
				if e.noErr("delete /d", err) && r.Removed != 0 {
					e.t.Errorf("delete an empty dir removed %d, want 0", r.Removed)
				}
			}
			e.wantList("ls /", e.lsPaths("/"), nil)
		}},
		{name: "X12_root_is_a_directory", run: func(e *env) {
			e.seed(map[string]string{"/a.txt": "a"})
			_, err := e.read("/", 0, 10)
			e.wantCode("read /", err, backend.CodeIsDirectory)
			_, err = e.b.Write(e.ctx, e.p("/"), []byte("x"))
			e.wantCode("write /", err, backend.CodeIsDirectory)
			_, err = e.glob("*", "/a.txt")
			e.wantCode("glob at a file", err, backend.CodeNotADirectory)
		}},
		{name: "X13_grep_regex_flags", run: func(e *env) {
			e.seed(map[string]string{"/r.txt": "Hello\nhello\nHELLO\n"})
			g := e.mustGrep(backend.GrepRequest{Pattern: "(?i)^hello$", Path: "/", Regex: true})
			e.wantList("grep (?i)", matchKeys(g.Matches), []string{"/r.txt:1", "/r.txt:2", "/r.txt:3"})
			g = e.mustGrep(backend.GrepRequest{Pattern: "hello", Path: "/"})
			e.wantList("grep hello (case-sensitive)", matchKeys(g.Matches), []string{"/r.txt:2"})
		}},
	}
}

// replacingOp replaces the content "old" of an existing file (case path)
// with "new".
type replacingOp struct {
	name string
	do   func(path string) error
}

// replacingOps are the operations that replace an existing file: write,
// upload and edit.
func replacingOps(e *env) []replacingOp {
	return []replacingOp{
		{"write", func(p string) error {
			_, err := e.b.Write(e.ctx, e.p(p), []byte("new"))
			return err
		}},
		{"upload", func(p string) error {
			res, err := e.b.Upload(e.ctx, []backend.UploadItem{{Path: e.p(p), Content: []byte("new")}})
			switch {
			case err != nil:
				return err
			case len(res) != 1:
				return fmt.Errorf("upload of one item returned %d results", len(res))
			case res[0].Err != nil:
				return res[0].Err
			}
			return nil
		}},
		{"edit", func(p string) error {
			_, err := e.b.Edit(e.ctx, backend.EditRequest{Path: e.p(p), Old: "old", New: "new"})
			return err
		}},
	}
}
