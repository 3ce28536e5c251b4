package backendtest

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// grepGlobCases are docs/file-tools.md §7 rows 49–61: grep (§4.6) and glob limits (§4.7).
func grepGlobCases() []testCase {
	testPy := "import os\nimport sys\nprint('hello')"
	return []testCase{
		{name: "B49_grep_content", run: func(e *env) {
			e.seed(map[string]string{"/test.py": testPy})
			res := e.mustGrep(backend.GrepRequest{Pattern: "import", Path: "/"})
			e.wantList("grep import", matchKeys(res.Matches), []string{"/test.py:1", "/test.py:2"})
			if len(res.Matches) == 2 && (res.Matches[0].Text != "import os" || res.Matches[1].Text != "import sys") {
				e.t.Errorf("grep import: texts %q, %q", res.Matches[0].Text, res.Matches[1].Text)
			}
			if res.Truncated || res.FilesSearched != 1 {
				e.t.Errorf("grep import: truncated %v, files_searched %d, want false, 1", res.Truncated, res.FilesSearched)
			}
		}},
		{name: "B50_grep_sorted_by_path", run: func(e *env) {
			e.seed(map[string]string{"/test.py": testPy, "/main.py": "import x"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "import", Path: "/"})
			e.wantList("grep import", matchKeys(res.Matches), []string{"/main.py:1", "/test.py:1", "/test.py:2"})
		}},
		{name: "B51_grep_literal", run: func(e *env) {
			e.seed(map[string]string{"/l.txt": "axb\na.b\n"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "a.b", Path: "/"})
			e.wantList("grep a.b", matchKeys(res.Matches), []string{"/l.txt:2"})
		}},
		{name: "B52_grep_regex", run: func(e *env) {
			e.seed(map[string]string{"/test.py": testPy})
			res := e.mustGrep(backend.GrepRequest{Pattern: `^import (os|sys)$`, Path: "/", Regex: true})
			e.wantList("grep regex", matchKeys(res.Matches), []string{"/test.py:1", "/test.py:2"})
			_, err := e.grep(backend.GrepRequest{Pattern: "(", Path: "/", Regex: true})
			e.wantCode("grep regex (", err, backend.CodeInvalidPattern)
		}},
		{name: "B54_grep_max_count", run: func(e *env) {
			e.seed(map[string]string{"/h.txt": "hit 1\nmiss\nhit 2\nhit 3\n"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "hit", Path: "/", MaxCount: 2})
			e.wantList("grep max_count 2", matchKeys(res.Matches), []string{"/h.txt:1", "/h.txt:3"})
			if !res.Truncated || res.TruncationReason != backend.TruncatedMaxCount {
				e.t.Errorf("grep max_count 2: truncated %v reason %q, want true max_count", res.Truncated, res.TruncationReason)
			}
			res = e.mustGrep(backend.GrepRequest{Pattern: "hit", Path: "/", MaxCount: 3})
			e.wantList("grep max_count 3", matchKeys(res.Matches), []string{"/h.txt:1", "/h.txt:3", "/h.txt:4"})
			if res.Truncated {
				e.t.Errorf("grep max_count 3: truncated with exactly 3 hits")
			}
		}},
		{name: "B55_grep_glob_filter", run: func(e *env) {
			e.seed(map[string]string{
				"/x.py": "needle", "/sub/y.py": "needle", "/z.txt": "needle",
				"/repo/src/a.go": "needle", "/repo/src/deep/b.go": "needle", "/repo/c.go": "needle",
			})
			res := e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/", Glob: "*.py"})
			e.wantList("grep glob *.py", matchKeys(res.Matches), []string{"/sub/y.py:1", "/x.py:1"})
			res = e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/repo", Glob: "src/*.go"})
			e.wantList("grep glob src/*.go at /repo", matchKeys(res.Matches), []string{"/repo/src/a.go:1"})
		}},
		{name: "B56_grep_path_is_file", run: func(e *env) {
			e.seed(map[string]string{"/a.txt": "needle here", "/b.txt": "needle there"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/a.txt"})
			e.wantList("grep at /a.txt", matchKeys(res.Matches), []string{"/a.txt:1"})
			_, err := e.grep(backend.GrepRequest{Pattern: "needle", Path: "/missing"})
			e.wantCode("grep at /missing", err, backend.CodeFileNotFound)
		}},
		{name: "B57_grep_skips_binary", run: func(e *env) {
			e.seedBytes(map[string][]byte{"/data.bin": []byte("needle\x00\x01\x02"), "/t.txt": []byte("needle")})
			res := e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/"})
			e.wantList("grep with a binary file", matchKeys(res.Matches), []string{"/t.txt:1"})
			if res.FilesSkippedBinary != 1 {
				e.t.Errorf("files_skipped_binary %d, want 1", res.FilesSkippedBinary)
			}
		}},
		{name: "B58_grep_line_numbers_match_read", run: func(e *env) {
			e.seed(map[string]string{"/crlf.txt": "a\r\nfoo x\r\nb\r\n", "/cr.txt": "a\rfoo y\rb"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "foo", Path: "/"})
			e.wantList("grep foo", matchKeys(res.Matches), []string{"/cr.txt:2", "/crlf.txt:2"})
			for _, m := range res.Matches {
				if strings.ContainsRune(m.Text, '\r') {
					e.t.Errorf("grep %s:%d text %q has CR", m.Path, m.Line, m.Text)
				}
				r := e.mustRead(m.Path, m.Line-1, 1)
				if r.Content != m.Text {
					e.t.Errorf("grep %s:%d text %q, read line %d = %q", m.Path, m.Line, m.Text, m.Line, r.Content)
				}
			}
		}},
		{name: "B59_grep_long_line", run: func(e *env) {
			line := strings.Repeat("x", 199990) + "needle0123"
			e.seed(map[string]string{"/long.txt": line + "\n"})
			res := e.mustGrep(backend.GrepRequest{Pattern: "needle", Path: "/"})
			if len(res.Matches) != 1 {
				e.t.Fatalf("grep long line: %d matches, want 1", len(res.Matches))
			}
			m := res.Matches[0]
			if n := utf8.RuneCountInString(m.Text); n != backend.GrepTextMaxChars || !m.TextTruncated || m.Line != 1 {
				e.t.Errorf("grep long line: line %d, %d chars, text_truncated %v; want line 1, %d chars, truncated",
					m.Line, n, m.TextTruncated, backend.GrepTextMaxChars)
			}
		}},
		{name: "B60_glob_max_matches", run: func(e *env) {
			items := make([]backend.UploadItem, 0, backend.GlobMaxMatches+1)
			for i := 0; i <= backend.GlobMaxMatches; i++ {
				items = append(items, backend.UploadItem{Path: e.p(fmt.Sprintf("/many/d%02d/f%05d.txt", i/500, i)), Content: []byte("x")})
			}
			e.upload(items)
			res, err := e.glob("*.txt", "/")
			if !e.noErr("glob *.txt", err) {
				return
			}
			if len(res.Matches) != backend.GlobMaxMatches || !res.Truncated || res.TruncationReason != backend.TruncatedMaxMatches {
				e.t.Errorf("glob 10,001 files: %d matches, truncated %v reason %q; want 10000, true, max_matches",
					len(res.Matches), res.Truncated, res.TruncationReason)
			}
			if len(res.Matches) == backend.GlobMaxMatches {
				if first, last := res.Matches[0].Path, res.Matches[len(res.Matches)-1].Path; first != "/many/d00/f00000.txt" || last != "/many/d19/f09999.txt" {
					e.t.Errorf("glob 10,001 files: first %s last %s, want the first 10,000 in path order", first, last)
				}
			}
		}},
		{name: "B61_glob_brace_cap", run: func(e *env) {
			e.seed(map[string]string{"/a.txt": "a"})
			_, err := e.glob(strings.Repeat("{a,b}", 10), "/")
			e.wantCode("glob with 1024 expansions", err, backend.CodeInvalidPattern)
		}},
	}
}
