package backendtest

import (
	"bytes"
	"io/fs"

	"github.com/plumbhq/plumb/pkg/backend"
)

// writeEditDeleteCases are docs/file-tools.md §7 rows 29–48: write (§4.3), edit (§4.4) and
// delete (§4.5).
func writeEditDeleteCases() []testCase {
	edit := func(e *env, path, old, new string, all bool) (backend.EditResult, error) {
		return e.b.Edit(e.ctx, backend.EditRequest{Path: e.p(path), Old: old, New: new, ReplaceAll: all})
	}
	mustEdit := func(e *env, path, old, new string, all bool) backend.EditResult {
		e.t.Helper()
		r, err := edit(e, path, old, new, all)
		if err != nil {
			e.t.Fatalf("edit %s %q→%q: %v", path, old, new, err)
		}
		if r.Path != e.p(path) {
			e.t.Errorf("edit %s: result path %q", path, r.Path)
		}
		return r
	}
	return []testCase{
		{name: "B29_write_create_then_replace", run: func(e *env) {
			r, err := e.b.Write(e.ctx, e.p("/a.txt"), []byte("x"))
			if e.noErr("write x", err) && (!r.Created || r.BytesWritten != 1 || r.Path != e.p("/a.txt")) {
				e.t.Errorf("first write = %+v, want created, 1 byte", r)
			}
			r, err = e.b.Write(e.ctx, e.p("/a.txt"), []byte("y"))
			if e.noErr("write y", err) && (r.Created || r.BytesWritten != 1) {
				e.t.Errorf("second write = %+v, want created=false, 1 byte", r)
			}
			e.wantContent("/a.txt", "y")
		}},
		{name: "B30_write_creates_parents", run: func(e *env) {
			_, err := e.b.Write(e.ctx, e.p("/new/deep/f.txt"), []byte("f"))
			e.noErr("write /new/deep/f.txt", err)
			e.wantList("ls /new", e.lsPaths("/new"), []string{"/new/deep/"})
			e.wantContent("/new/deep/f.txt", "f")
		}},
		{name: "B31_write_dir_and_file_parent", run: func(e *env) {
			e.seed(map[string]string{"/d/x.txt": "x", "/a.txt": "a"})
			_, err := e.b.Write(e.ctx, e.p("/d"), []byte("z"))
			e.wantCode("write /d", err, backend.CodeIsDirectory)
			_, err = e.b.Write(e.ctx, e.p("/a.txt/b"), []byte("z"))
			e.wantCode("write /a.txt/b", err, backend.CodeNotADirectory)
			e.wantContent("/a.txt", "a")
		}},
		{name: "B32_write_verbatim", run: func(e *env) {
			_, err := e.b.Write(e.ctx, e.p("/crlf.txt"), []byte("a\r\nb"))
			e.noErr("write", err)
			e.wantContent("/crlf.txt", "a\r\nb")
		}},
		{name: "B33_write_too_large", run: func(e *env) {
			_, err := e.b.Write(e.ctx, e.p("/big.txt"), bytes.Repeat([]byte("a"), backend.WriteCap+1))
			e.wantCode("write 10 MiB + 1", err, backend.CodeTooLarge)
			if _, err := e.read("/big.txt", 0, 1); backend.CodeOf(err) != backend.CodeFileNotFound {
				e.t.Errorf("after a too_large write, read gives %v, want file_not_found", err)
			}
		}},
		{name: "B34_edit_single", run: func(e *env) {
			e.seed(map[string]string{"/h.py": "def hello():\n    print('hello world')"})
			r := mustEdit(e, "/h.py", "world", "universe", false)
			if r.Occurrences != 1 || r.LineEndingAdapted {
				e.t.Errorf("edit = %+v, want 1 occurrence, not adapted", r)
			}
			e.wantContent("/h.py", "def hello():\n    print('hello universe')")
		}},
		{name: "B35_edit_replace_all", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "foo bar foo baz foo"})
			if r := mustEdit(e, "/f.txt", "foo", "qux", true); r.Occurrences != 3 {
				e.t.Errorf("occurrences %d, want 3", r.Occurrences)
			}
			e.wantContent("/f.txt", "qux bar qux baz qux")
		}},
		{name: "B36_edit_multiple_occurrences", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "foo bar foo baz foo"})
			_, err := edit(e, "/f.txt", "foo", "qux", false)
			be := e.wantCode("edit without replace_all", err, backend.CodeMultipleOccurrences)
			e.wantDetail("edit without replace_all", be, "count", "3")
			e.wantDetail("edit without replace_all", be, "lines", "1")
			e.wantContent("/f.txt", "foo bar foo baz foo")
		}},
		{name: "B37_edit_string_not_found", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "foo bar"})
			_, err := edit(e, "/f.txt", "nothere", "x", false)
			e.wantCode("edit absent", err, backend.CodeStringNotFound)
			e.wantContent("/f.txt", "foo bar")
		}},
		{name: "B38_edit_invalid_arguments", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "foo", "/empty.txt": ""})
			_, err := edit(e, "/f.txt", "", "x", false)
			e.wantCode(`edit old ""`, err, backend.CodeInvalidArgument)
			_, err = edit(e, "/empty.txt", "", "x", false)
			e.wantCode(`edit old "" on an empty file`, err, backend.CodeInvalidArgument)
			_, err = edit(e, "/f.txt", "foo", "foo", false)
			e.wantCode("edit old == new", err, backend.CodeInvalidArgument)
			e.wantContent("/f.txt", "foo")
			e.wantContent("/empty.txt", "")
		}},
		{name: "B39_edit_eof_newline_hint", run: func(e *env) {
			e.seed(map[string]string{"/f.txt": "a\nx"})
			_, err := edit(e, "/f.txt", "x\n", "y\n", false)
			be := e.wantCode("edit old x\\n", err, backend.CodeStringNotFound)
			e.wantDetail("edit old x\\n", be, "stripped_count", "1")
			e.wantContent("/f.txt", "a\nx")
		}},
		{name: "B40_edit_adapts_to_crlf", run: func(e *env) {
			e.seed(map[string]string{"/w.txt": "one\r\ntwo\r\nthree\r\n"})
			r := mustEdit(e, "/w.txt", "one\ntwo", "1\n2", false)
			if r.Occurrences != 1 || !r.LineEndingAdapted {
				e.t.Errorf("edit = %+v, want 1 occurrence, line_ending_adapted", r)
			}
			e.wantContent("/w.txt", "1\r\n2\r\nthree\r\n")
		}},
		{name: "B41_edit_crlf_old_on_lf_file", run: func(e *env) {
			e.seed(map[string]string{"/u.txt": "a\nb"})
			mustEdit(e, "/u.txt", "a\r\nb", "c\r\nd", false)
			e.wantContent("/u.txt", "c\nd")
		}},
		{name: "B42_edit_non_overlapping", run: func(e *env) {
			e.seed(map[string]string{"/a.txt": "aaa"})
			if r := mustEdit(e, "/a.txt", "aa", "X", true); r.Occurrences != 1 {
				e.t.Errorf("occurrences %d, want 1", r.Occurrences)
			}
			e.wantContent("/a.txt", "Xa")
		}},
		{name: "B44_edit_keeps_mode", caps: []Capability{Mode}, run: func(e *env) {
			e.seed(map[string]string{"/run.sh": "#!/bin/sh\necho old\n"})
			if err := e.h.Chmod(e.ctx, e.p("/run.sh"), 0o755); err != nil {
				e.t.Fatalf("chmod: %v", err)
			}
			mustEdit(e, "/run.sh", "old", "new", false)
			e.wantContent("/run.sh", "#!/bin/sh\necho new\n")
			e.wantMode("/", "/run.sh", 0o755)
		}},
		{name: "B45_edit_missing_and_binary", run: func(e *env) {
			e.seedBytes(map[string][]byte{"/x.bin": []byte("a\x00b\x00c")})
			_, err := edit(e, "/missing.txt", "a", "b", false)
			e.wantCode("edit missing", err, backend.CodeFileNotFound)
			_, err = edit(e, "/x.bin", "a", "b", false)
			e.wantCode("edit binary", err, backend.CodeNotText)
			e.wantContent("/x.bin", "a\x00b\x00c")
		}},
		{name: "B46_delete_tree", run: func(e *env) {
			e.seed(map[string]string{"/dir/a": "a", "/dir/b/c": "c", "/keep.txt": "k"})
			r, err := e.b.Delete(e.ctx, e.p("/dir"))
			if e.noErr("delete /dir", err) && (r.Removed != 2 || r.Path != e.p("/dir")) {
				e.t.Errorf("delete /dir = %+v, want removed 2", r)
			}
			e.wantList("ls / after delete", e.lsPaths("/"), []string{"/keep.txt"})
		}},
		{name: "B47_delete_missing_and_root", run: func(e *env) {
			e.seed(map[string]string{"/keep.txt": "k"})
			_, err := e.b.Delete(e.ctx, e.p("/missing"))
			e.wantCode("delete /missing", err, backend.CodeFileNotFound)
			// Under a Prefix, deleting the prefix itself is a Composite
			// mount point (row 77, Composite's own tests); the root is
			// refused by every backend.
			root := e.p("/")
			if e.h.Prefix != "" {
				root = "/"
			}
			_, err = e.b.Delete(e.ctx, root)
			e.wantCode("delete "+root, err, backend.CodeInvalidPath)
			e.wantContent("/keep.txt", "k")
		}},
		{name: "B48_delete_symlink_not_followed", caps: []Capability{Symlink}, run: func(e *env) {
			e.seed(map[string]string{"/d/f.txt": "f", "/d/sub/g.txt": "g"})
			e.symlink("/lnk", "d")
			r, err := e.b.Delete(e.ctx, e.p("/lnk"))
			if e.noErr("delete /lnk", err) && r.Removed != 1 {
				e.t.Errorf("delete /lnk removed %d, want 1", r.Removed)
			}
			e.wantList("ls /", e.lsPaths("/"), []string{"/d/"})
			e.wantContent("/d/f.txt", "f")
			e.wantContent("/d/sub/g.txt", "g")
		}},
	}
}

// wantMode checks the permission bits ls reports for path in dir.
func (e *env) wantMode(dir, path string, want fs.FileMode) {
	e.t.Helper()
	fi, ok := e.entry(dir, path)
	switch {
	case !ok:
		e.t.Errorf("ls %s: %s not listed", dir, path)
	case fi.Mode == nil:
		e.t.Errorf("ls %s: %s has no mode, but the backend declares the mode capability", dir, path)
	case fs.FileMode(*fi.Mode)&fs.ModePerm != want:
		e.t.Errorf("mode of %s = %#o, want %#o", path, *fi.Mode, want)
	}
}
