package filesystem_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/jsonschema"
	"github.com/plumbhq/plumb/pkg/agent/middleware/filesystem"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/model"
	"go.uber.org/zap/zaptest"
)

// counting wraps a backend and counts calls, to prove that invalid paths
// never reach it.
type counting struct {
	backend.Backend
	calls atomic.Int64
}

func (c *counting) Ls(ctx context.Context, p string) (backend.LsResult, error) {
	c.calls.Add(1)
	return c.Backend.Ls(ctx, p)
}

func (c *counting) Read(ctx context.Context, r backend.ReadRequest) (backend.ReadResult, error) {
	c.calls.Add(1)
	return c.Backend.Read(ctx, r)
}

func (c *counting) Write(ctx context.Context, p string, b []byte) (backend.WriteResult, error) {
	c.calls.Add(1)
	return c.Backend.Write(ctx, p, b)
}

func (c *counting) Edit(ctx context.Context, r backend.EditRequest) (backend.EditResult, error) {
	c.calls.Add(1)
	return c.Backend.Edit(ctx, r)
}

func (c *counting) Delete(ctx context.Context, p string) (backend.DeleteResult, error) {
	c.calls.Add(1)
	return c.Backend.Delete(ctx, p)
}

func (c *counting) Grep(ctx context.Context, r backend.GrepRequest) (backend.GrepResult, error) {
	c.calls.Add(1)
	return c.Backend.Grep(ctx, r)
}

func (c *counting) Glob(ctx context.Context, r backend.GlobRequest) (backend.GlobResult, error) {
	c.calls.Add(1)
	return c.Backend.Glob(ctx, r)
}

type fixture struct {
	t  *testing.T
	b  *counting
	mw *filesystem.Middleware
	ts map[string]agent.Tool
	st *agent.State
}

func newFixture(t *testing.T, preset tools.Preset) *fixture {
	t.Helper()
	return newFixtureWith(t, filesystem.Config{Preset: preset})
}

func newFixtureWith(t *testing.T, cfg filesystem.Config) *fixture {
	t.Helper()
	eng, err := fileops.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	f := &fixture{t: t, b: &counting{Backend: eng}, st: agent.NewState(), ts: make(map[string]agent.Tool)}
	f.mw = filesystem.New(f.b, cfg)
	for _, tl := range f.mw.Tools() {
		f.ts[tl.Name] = tl
	}
	return f
}

func (f *fixture) put(p, content string) {
	f.t.Helper()
	if _, err := f.b.Backend.Write(context.Background(), p, []byte(content)); err != nil {
		f.t.Fatal(err)
	}
}

// call validates args as the executor does, then runs the tool.
func (f *fixture) call(name, args string) agent.ToolResult {
	f.t.Helper()
	tl, ok := f.ts[name]
	if !ok {
		f.t.Fatalf("no tool %s", name)
	}
	s, err := jsonschema.Compile(tl.Schema)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := s.ValidateJSON([]byte(args))
	if err != nil {
		return agent.ToolResult{Content: tl.InvalidArgs(fmt.Sprintf("Invalid arguments for %s: %v.", name, err)), IsError: true}
	}
	req := &agent.ToolRequest{Call: model.ToolCall{ID: "c1", Name: name, Args: string(out)}, Tool: &tl, State: f.st}
	res, err := tl.Func(context.Background(), req)
	if err != nil {
		f.t.Fatalf("%s returned an error: %v", name, err)
	}
	return res
}

func lines(n int, f func(i int) string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(f(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestToolLayer covers the docs/file-tools.md §7 cases marked T (tool layer).
func TestToolLayer(t *testing.T) {
	twelve := lines(12, func(i int) string { return fmt.Sprintf("l%d", i) })
	cases := []struct {
		name  string
		setup func(f *fixture)
		tool  string
		args  string
		check func(t *testing.T, r agent.ToolResult)
	}{
		{"T18_gutter", func(f *fixture) { f.put("/a", twelve) }, "read_file", `{"file_path":"/a"}`, func(t *testing.T, r agent.ToolResult) {
			rows := strings.Split(r.Content, "\n")
			if rows[0] != " 1  l1" || rows[11] != "12  l12" || len(rows) != 12 {
				t.Errorf("rows %q", rows)
			}
		}},
		{"T19_window", func(f *fixture) { f.put("/a", twelve) }, "read_file", `{"file_path":"/a","offset":7,"limit":5}`, func(t *testing.T, r agent.ToolResult) {
			rows := strings.Split(r.Content, "\n")
			if rows[0] != " 8  l8" || rows[4] != "12  l12" {
				t.Errorf("rows %q", rows)
			}
		}},
		{"T20_continuation_rows", func(f *fixture) { f.put("/a", "x\n"+strings.Repeat("a", 12000)+"\nz\n") }, "read_file", `{"file_path":"/a"}`, func(t *testing.T, r agent.ToolResult) {
			var markers []string
			for _, row := range strings.Split(r.Content, "\n") {
				markers = append(markers, row[:3])
			}
			if !slices.Equal(markers, []string{"  1", "  2", "2.1", "2.2", "  3"}) {
				t.Errorf("markers %q", markers)
			}
			if row := strings.Split(r.Content, "\n")[3]; len(row) != 5+2000 {
				t.Errorf("row 2.2 has %d chars", len(row)-5)
			}
		}},
		{"T21_tab", func(f *fixture) { f.put("/a", "\tif x:\n") }, "read_file", `{"file_path":"/a"}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "1  \tif x:" {
				t.Errorf("%q", r.Content)
			}
		}},
		{"T22_blank_line", func(f *fixture) { f.put("/a", "a\n\nc\n") }, "read_file", `{"file_path":"/a"}`, func(t *testing.T, r agent.ToolResult) {
			if rows := strings.Split(r.Content, "\n"); rows[1] != "2  " {
				t.Errorf("row 2 %q", rows[1])
			}
		}},
		{"T23_pagination_notice", func(f *fixture) { f.put("/a", "1\n2\n3\n4\n5\n") }, "read_file", `{"file_path":"/a","offset":0,"limit":2}`, func(t *testing.T, r agent.ToolResult) {
			if want := "1  1\n2  2\n\n[Read 2 lines (1-2 of 5); 3 lines remain. Continue with offset=2.]"; r.Content != want {
				t.Errorf("%q\nwant %q", r.Content, want)
			}
		}},
		{"T24_result_cap", func(f *fixture) { f.put("/a", lines(3000, func(int) string { return strings.Repeat("b", 100) })) }, "read_file", `{"file_path":"/a"}`, func(t *testing.T, r agent.ToolResult) {
			if len(r.Content) > filesystem.ResultCap {
				t.Errorf("%d chars", len(r.Content))
			}
			body, notes, _ := strings.Cut(r.Content, "\n\n")
			rows := strings.Split(body, "\n")
			last := strings.Fields(rows[len(rows)-1])
			if len(last) != 2 || len(last[1]) != 100 {
				t.Errorf("last row is not a whole line: %q", rows[len(rows)-1])
			}
			if want := fmt.Sprintf("Continue with offset=%d.", len(rows)); !strings.Contains(notes, want) {
				t.Errorf("notes %q lack %q", notes, want)
			}
		}},
		{"T25_empty_file", func(f *fixture) { f.put("/a", "") }, "read_file", `{"file_path":"/a","limit":0}`, func(t *testing.T, r agent.ToolResult) {
			if r.IsError || r.Content != "/a exists and is empty (0 bytes)." {
				t.Errorf("%+v", r)
			}
		}},
		{"T25_no_lines_requested", func(f *fixture) { f.put("/a", "x\n") }, "read_file", `{"file_path":"/a","limit":0}`, func(t *testing.T, r agent.ToolResult) {
			if r.IsError || !strings.HasPrefix(r.Content, "limit was 0, so nothing was read from /a; the file may have content.") {
				t.Errorf("%+v", r)
			}
		}},
		{"T43_gutter_hint", func(f *fixture) { f.put("/a", "foo\n") }, "edit_file", `{"file_path":"/a","old_string":"12  foo","new_string":"bar"}`, func(t *testing.T, r agent.ToolResult) {
			if !r.IsError || !strings.HasPrefix(r.Content, "Error [string_not_found]: ") || !strings.Contains(strings.ToLower(r.Content), "line-number") {
				t.Errorf("%+v", r)
			}
		}},
		{"T53_regex_hint", func(f *fixture) { f.put("/a", "foo\n") }, "grep", `{"pattern":"foo|bar"}`, func(t *testing.T, r agent.ToolResult) {
			if r.IsError || !strings.HasPrefix(r.Content, `No matches for "foo|bar" under /.`) || !strings.Contains(r.Content, "regex=true") {
				t.Errorf("%+v", r)
			}
		}},
		{"T79_error_shape", nil, "read_file", `{"file_path":"/nope"}`, func(t *testing.T, r agent.ToolResult) {
			if !r.IsError || !strings.HasPrefix(r.Content, "Error [file_not_found]: ") || !strings.Contains(r.Content, "ls or glob") {
				t.Errorf("%+v", r)
			}
		}},
		{"T81_grep_cap", func(f *fixture) {
			f.put("/a", lines(2000, func(i int) string { return fmt.Sprintf("hit %04d %s", i, strings.Repeat("z", 60)) }))
		}, "grep", `{"pattern":"hit","output_mode":"content","max_count":2000}`, func(t *testing.T, r agent.ToolResult) {
			if len(r.Content) > filesystem.ResultCap || r.OffloadedPath != "" || !strings.Contains(r.Content, "more lines omitted") {
				t.Errorf("%d chars, offloaded %q, tail %q", len(r.Content), r.OffloadedPath, r.Content[len(r.Content)-200:])
			}
		}},
		{"T83_max_count_zero", nil, "grep", `{"pattern":"x","max_count":0}`, func(t *testing.T, r agent.ToolResult) {
			if !r.IsError || !strings.HasPrefix(r.Content, "Error [invalid_argument]: ") || !strings.Contains(r.Content, "max_count") {
				t.Errorf("%+v", r)
			}
		}},
		{"T83_max_count_string", func(f *fixture) { f.put("/a", "x\nx\nx\nx\nx\nx\nx\n") }, "grep", `{"pattern":"x","max_count":"5","output_mode":"count"}`, func(t *testing.T, r agent.ToolResult) {
			if r.IsError || !strings.HasPrefix(r.Content, "/a: 5") {
				t.Errorf("%+v", r)
			}
		}},
		{"ls_empty", nil, "ls", `{}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "No files found in /." {
				t.Errorf("%q", r.Content)
			}
		}},
		{"ls", func(f *fixture) { f.put("/d/x", "1"); f.put("/b", "2") }, "ls", `{"path":"/"}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "/b\n/d/" {
				t.Errorf("%q", r.Content)
			}
		}},
		{"write_created_then_replaced", func(f *fixture) { f.put("/a", "old") }, "write_file", `{"file_path":"/a","content":"new!"}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "Wrote 4 bytes to /a (replaced the existing file)." {
				t.Errorf("%q", r.Content)
			}
		}},
		{"edit", func(f *fixture) { f.put("/a", "x y x") }, "edit_file", `{"file_path":"/a","old_string":"x","new_string":"z","replace_all":"true"}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "Edited /a: replaced 2 occurrences." {
				t.Errorf("%q", r.Content)
			}
		}},
		{"delete", func(f *fixture) { f.put("/d/a", "1"); f.put("/d/b", "2") }, "delete", `{"file_path":"/d"}`, func(t *testing.T, r agent.ToolResult) {
			if r.Content != "Deleted /d (2 entries removed)." {
				t.Errorf("%q", r.Content)
			}
		}},
		{"glob_empty_double_star", nil, "glob", `{"pattern":"**/*.yml"}`, func(t *testing.T, r agent.ToolResult) {
			if !strings.HasPrefix(r.Content, `No files match "**/*.yml" under /.`) || !strings.Contains(r.Content, "dot-directories") {
				t.Errorf("%q", r.Content)
			}
		}},
		{"grep_content", func(f *fixture) { f.put("/a", "one\nfoo two\n"); f.put("/b", "foo\n") }, "grep", `{"pattern":"foo","output_mode":"content"}`, func(t *testing.T, r agent.ToolResult) {
			if want := "/a:\n  2: foo two\n\n/b:\n  1: foo"; r.Content != want {
				t.Errorf("%q\nwant %q", r.Content, want)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, tools.PresetFull)
			if c.setup != nil {
				c.setup(f)
			}
			c.check(t, f.call(c.tool, c.args))
		})
	}
}

// TestH1Traversal: a traversal is invalid_path for every path argument,
// and the backend is never called.
func TestH1Traversal(t *testing.T) {
	f := newFixture(t, tools.PresetFull)
	calls := []struct{ tool, args string }{
		{"read_file", `{"file_path":"../etc/passwd"}`},
		{"write_file", `{"file_path":"/a/../../etc/passwd","content":"x"}`},
		{"edit_file", `{"file_path":"..\\..\\etc","old_string":"a","new_string":"b"}`},
		{"delete", `{"file_path":"/a/./../b/../.."}`},
		{"ls", `{"path":"a/b/../../.."}`},
		{"glob", `{"pattern":"*","path":"/../x"}`},
		{"grep", `{"pattern":"x","path":"/../x"}`},
	}
	for _, c := range calls {
		r := f.call(c.tool, c.args)
		if !r.IsError || !strings.HasPrefix(r.Content, "Error [invalid_path]: ") {
			t.Errorf("%s %s: %+v", c.tool, c.args, r)
		}
	}
	if n := f.b.calls.Load(); n != 0 {
		t.Errorf("%d backend calls", n)
	}
}

// TestT82ToolsWithoutExecutor: a backend without an executor gets no
// execute tool.
func TestT82ToolsWithoutExecutor(t *testing.T) {
	f := newFixture(t, tools.PresetFull)
	var names []string
	for _, tl := range f.mw.Tools() {
		names = append(names, tl.Name)
	}
	if want := []string{"ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep"}; !slices.Equal(names, want) {
		t.Errorf("tools %v", names)
	}
}

func TestPresetEnforcedAtToolLayer(t *testing.T) {
	f := newFixture(t, tools.PresetReadOnly)
	for _, c := range []struct{ tool, args string }{
		{"write_file", `{"file_path":"/a","content":"x"}`},
		{"edit_file", `{"file_path":"/a","old_string":"a","new_string":"b"}`},
		{"delete", `{"file_path":"/a"}`},
	} {
		if r := f.call(c.tool, c.args); !r.IsError || !strings.HasPrefix(r.Content, "Error [permission_denied]: ") {
			t.Errorf("%s: %+v", c.tool, r)
		}
	}
	if n := f.b.calls.Load(); n != 0 {
		t.Errorf("%d backend calls", n)
	}
}

// TestT80Eviction: a custom tool's 90,000-char result is saved and
// previewed.
func TestT80Eviction(t *testing.T) {
	f := newFixture(t, tools.PresetFull)
	text := lines(900, func(i int) string { return fmt.Sprintf("%03d %s", i, strings.Repeat("q", 95)) })
	res := filesystem.Evict(context.Background(), f.b, model.ToolCall{ID: "call.1/x", Name: "custom"}, agent.ToolResult{Content: text, IsError: true}, filesystem.EvictOptions{Threshold: 80000})
	if res.OffloadedPath != "/large_tool_results/call_1_x" || !res.IsError {
		t.Fatalf("%+v", res)
	}
	for _, want := range []string{"call.1/x", "/large_tool_results/call_1_x", "read_file", "\n  1  001 ", "\n  5  005 ", "… [890 lines omitted] …", "\n900  900 "} {
		if !strings.Contains(res.Content, want) {
			t.Errorf("eviction text lacks %q:\n%.600s", want, res.Content)
		}
	}
	dl, _ := f.b.Download(context.Background(), []string{"/large_tool_results/call_1_x"})
	if dl[0].Err != nil || string(dl[0].Content) != text {
		t.Error("offloaded file differs")
	}
	if short := filesystem.Evict(context.Background(), f.b, model.ToolCall{ID: "c"}, agent.ToolResult{Content: "small"}, filesystem.EvictOptions{}); short.Content != "small" {
		t.Error("small result changed")
	}
}

// TestGrepRegexOption: grep offers and honors regex=true unless the server
// keeps it literal (tools.grep.regex: false); then the option is gone from
// the schema and the description, and the no-match hint does not suggest
// it.
func TestGrepRegexOption(t *testing.T) {
	const py = "import os\nimport sys\nimport json\nprint('a.b')\n"
	for _, c := range []struct {
		name, args  string
		literalOnly bool
		want        string // exact result, or a prefix ending in "…"
		isError     bool
	}{
		{name: "regex", args: `{"pattern":"^import (os|sys)$","regex":true,"output_mode":"count"}`, want: "/test.py: 2"},
		{name: "literal by default", args: `{"pattern":"a.b","output_mode":"content"}`, want: "/test.py:\n  4: print('a.b')"},
		{name: "hint names regex", args: `{"pattern":"os|sys"}`,
			want: `No matches for "os|sys" under /. The pattern was searched as literal text; set regex=true to use regular-expression syntax (RE2), or search for each alternative separately.`},
		{name: "literal only: regex refused", literalOnly: true, args: `{"pattern":"^import (os|sys)$","regex":true}`,
			want: "Error [invalid_argument]: Invalid arguments for grep: …", isError: true},
		{name: "literal only: literal search", literalOnly: true, args: `{"pattern":"import os","output_mode":"count"}`, want: "/test.py: 1"},
		{name: "literal only: hint", literalOnly: true, args: `{"pattern":"os|sys"}`,
			want: `No matches for "os|sys" under /. The pattern was searched as literal text (regular expressions are not available here); search for each alternative separately.`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixtureWith(t, filesystem.Config{GrepLiteralOnly: c.literalOnly})
			f.put("/test.py", py)
			grep := f.ts["grep"]
			if offered := strings.Contains(string(grep.Schema), `"regex"`); offered == c.literalOnly {
				t.Errorf("regex in the schema = %v, want %v: %s", offered, !c.literalOnly, grep.Schema)
			}
			if mentions := strings.Contains(grep.Description, "regex=true"); mentions == c.literalOnly {
				t.Errorf("description mentions regex=true = %v: %s", mentions, grep.Description)
			}
			r := f.call("grep", c.args)
			prefix, isPrefix := strings.CutSuffix(c.want, "…")
			if r.IsError != c.isError || (isPrefix && !strings.HasPrefix(r.Content, prefix)) || (!isPrefix && r.Content != c.want) {
				t.Errorf("result %+v\nwant %q (error %v)", r, c.want, c.isError)
			}
		})
	}
}

// executor is a fileops engine that runs a "command" printing lines 1..n,
// as the sandbox agent does: the inline output keeps 300 bytes of head and
// tail when longer than 1000 bytes, and the whole output goes to
// OffloadPath, which is created before the command runs. ignore makes
// it an executor without offload support; readOnly makes the offload
// impossible to create.
type executor struct {
	*fileops.Engine
	ignore, readOnly bool
	runs             int
}

func (e *executor) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	if req.OffloadPath != "" && e.readOnly && !e.ignore {
		return backend.ExecuteResult{}, backend.Errorf(backend.CodePermissionDenied, req.OffloadPath, "execute offload %s: read-only file system", req.OffloadPath)
	}
	e.runs++
	var n int
	if _, err := fmt.Sscanf(req.Command, "seq 1 %d", &n); err != nil {
		return backend.ExecuteResult{}, backend.Errorf(backend.CodeInvalidArgument, "", "unknown command %q", req.Command)
	}
	out := lines(n, func(i int) string { return fmt.Sprint(i) })
	res := backend.ExecuteResult{Output: out, ExitCode: new(0), OutputBytes: int64(len(out))}
	if len(out) > 1000 {
		res.Output, res.Truncated = out[:300]+"\n[... omitted ...]\n"+out[len(out)-300:], true
		if req.OffloadPath != "" && !e.ignore {
			if _, err := e.Write(ctx, req.OffloadPath, []byte(out)); err != nil {
				return backend.ExecuteResult{}, err
			}
			res.OffloadedPath = req.OffloadPath
		}
	}
	return res, nil
}

// TestExecuteOutputOffload: a long output is saved whole under
// /large_tool_results/<call id> and previewed from that file; an executor
// that cannot save it still runs the command once and says that the
// middle is lost.
func TestExecuteOutputOffload(t *testing.T) {
	for _, c := range []struct {
		name             string
		ignore, readOnly bool
		has              []string
		hasNot           []string
		offloaded        string
	}{
		{name: "saved", offloaded: "/large_tool_results/c1",
			has: []string{"[The output of execute (call c1) was too large to show: 3893 bytes, 1000 lines. The full output was saved to /large_tool_results/c1; page through it with read_file",
				"]\n\n   1  1\n   2  2\n", "… [990 lines omitted] …\n 996  996\n", "1000  1000\n\n[Exit code 0: success.]"},
			hasNot: []string{"[... omitted ...]"}},
		{name: "executor without offload", ignore: true,
			has: []string{"1\n2\n", "[... omitted ...]", "[Output truncated: kept 619 of 3893 bytes (head and tail). The middle part was not saved.]", "[Exit code 0: success.]"}},
		{name: "offload file cannot be created", readOnly: true,
			has: []string{"[... omitted ...]", "The middle part was not saved.]", "[Exit code 0: success.]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng, err := fileops.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			ex := &executor{Engine: eng, ignore: c.ignore, readOnly: c.readOnly}
			mw := filesystem.New(ex, filesystem.Config{EvictToolResultChars: 500})
			var tl agent.Tool
			for _, x := range mw.Tools() {
				if x.Name == "execute" {
					tl = x
				}
			}
			req := &agent.ToolRequest{Call: model.ToolCall{ID: "c1", Name: "execute", Args: `{"command":"seq 1 1000"}`}, Tool: &tl,
				State: agent.NewState(), Run: &agent.RunContext{Logger: zaptest.NewLogger(t)}}
			r, err := tl.Func(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if ex.runs != 1 {
				t.Errorf("the command ran %d times", ex.runs)
			}
			for _, h := range c.has {
				if !strings.Contains(r.Content, h) {
					t.Errorf("result lacks %q:\n%s", h, r.Content)
				}
			}
			for _, h := range c.hasNot {
				if strings.Contains(r.Content, h) {
					t.Errorf("result has %q:\n%s", h, r.Content)
				}
			}
			if r.OffloadedPath != c.offloaded || r.ExitCode == nil || *r.ExitCode != 0 {
				t.Errorf("offloaded_path %q exit %v, want %q and 0", r.OffloadedPath, r.ExitCode, c.offloaded)
			}
			if c.offloaded != "" {
				got, err := eng.Download(context.Background(), []string{c.offloaded})
				if err != nil || got[0].Err != nil || len(got[0].Content) != 3893 {
					t.Errorf("saved output: %d bytes, %v %v", len(got[0].Content), err, got[0].Err)
				}
			}
		})
	}
}
