package filesystem

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/model"
	"go.uber.org/zap"
)

// Tools implements agent.Middleware: the file tools in docs/file-tools.md §6
// order; execute only when the backend is an executor.
func (m *Middleware) Tools() []agent.Tool {
	ts := []agent.Tool{
		m.tool("ls", lsDescription, `{"path":{"type":"string","description":"Directory to list (absolute); default: the home directory."}}`, nil, m.ls),
		m.tool("read_file", readDescription(m.cfg.Vision), `{"file_path":{"type":"string","description":"Absolute path of the file."},
"offset":{"type":"integer","description":"0-based index of the first line to read (default 0)."},
"limit":{"type":"integer","minimum":0,"description":"Number of lines to read (default 2000)."}}`, []string{"file_path"}, m.read),
		m.tool("write_file", writeDescription, `{"file_path":{"type":"string","description":"Absolute path of the file."},
"content":{"type":"string","description":"The complete file content."}}`, []string{"file_path", "content"}, m.write),
		m.tool("edit_file", editDescription, `{"file_path":{"type":"string","description":"Absolute path of the file."},
"old_string":{"type":"string","minLength":1,"description":"Exact text to replace, without the read_file line-number gutter."},
"new_string":{"type":"string","description":"Replacement text."},
"replace_all":{"type":"boolean","description":"Replace every occurrence (default false: old_string must be unique)."}}`, []string{"file_path", "old_string", "new_string"}, m.edit),
		m.tool("delete", deleteDescription, `{"file_path":{"type":"string","description":"Absolute path of the file or directory."}}`, []string{"file_path"}, m.delete),
		m.tool("glob", globDescription, `{"pattern":{"type":"string","description":"Glob pattern."},
"path":{"type":"string","description":"Directory to search (absolute); default: the home directory."}}`, []string{"pattern"}, m.glob),
		m.grepTool(),
	}
	if _, ok := m.b.(backend.Executor); ok {
		ts = append(ts, m.tool("execute", fmt.Sprintf(executeDescription, int(m.cfg.ExecuteDefaultTimeout/time.Second), int(m.cfg.ExecuteMaxTimeout/time.Second)),
			fmt.Sprintf(`{"command":{"type":"string","description":"Shell command, run with /bin/sh -c."},
"timeout":{"type":["integer","null"],"minimum":0,"maximum":%d,"description":"Timeout in seconds; null = %d, 0 = the maximum."}}`, int(m.cfg.ExecuteMaxTimeout/time.Second), int(m.cfg.ExecuteDefaultTimeout/time.Second)),
			[]string{"command"}, m.execute))
		ts[len(ts)-1].Timeout = m.cfg.ExecuteMaxTimeout + time.Minute
	}
	return ts
}

// grepTool is grep with its regex option, or without it when the server
// keeps grep literal (tools.grep.regex: false).
func (m *Middleware) grepTool() agent.Tool {
	desc, pattern, regex := grepDescription+grepRegexDescription, "Text to search for (a literal string unless regex is true).",
		`,
"regex":{"type":"boolean","description":"Treat pattern as an RE2 regular expression (default false)."}`
	if m.cfg.GrepLiteralOnly {
		desc, pattern, regex = grepDescription+grepLiteralDescription, "Text to search for (always a literal string).", ""
	}
	return m.tool("grep", desc, fmt.Sprintf(`{"pattern":{"type":"string","minLength":1,"description":%q},
"path":{"type":"string","description":"Directory (searched recursively) or file; default: the home directory."},
"glob":{"type":["string","null"],"description":"Only search files matching this glob pattern."},
"output_mode":{"type":"string","enum":["files_with_matches","content","count"],"description":"files_with_matches (default), content (matching lines), or count (matches per file)."},
"max_count":{"type":"integer","minimum":1,"maximum":%d,"description":"Maximum total matches (default %d)."}%s}`, pattern, backend.GrepMaxMax, m.cfg.GrepMaxCount, regex), []string{"pattern"}, m.grep)
}

func (m *Middleware) tool(name, desc, props string, required []string, f agent.ToolFunc) agent.Tool {
	req := "[]"
	if len(required) > 0 {
		req = `["` + strings.Join(required, `","`) + `"]`
	}
	return agent.Tool{
		Name: name, Description: desc,
		Schema:      []byte(fmt.Sprintf(`{"type":"object","additionalProperties":false,"required":%s,"properties":%s}`, req, props)),
		InvalidArgs: func(text string) string { return "Error [invalid_argument]: " + text },
		Func:        f,
	}
}

// errorResult renders a backend error as "Error [<code>]: <message>" with
// the next-step hints of docs/file-tools.md §6.
func (m *Middleware) errorResult(err error) agent.ToolResult {
	var be *backend.Error
	if !errors.As(err, &be) {
		code := backend.CodeOf(err)
		be = &backend.Error{Code: code, Message: err.Error()}
	}
	msg := strings.TrimSpace(be.Message)
	hint := ""
	switch be.Code {
	case backend.CodeFileNotFound:
		hint = "Check the path with ls or glob."
	case backend.CodeIsDirectory:
		hint = "Use ls to list a directory."
	case backend.CodeOffsetOutOfRange:
		if n, err := strconv.Atoi(be.Details["total_lines"]); err == nil && n > 0 {
			hint = fmt.Sprintf("Valid offsets are 0..%d.", n-1)
		}
	case backend.CodeNotText:
		if _, ok := m.b.(backend.Executor); ok {
			hint = "Inspect it with execute (for example file, xxd or pdftotext)."
		}
	}
	if hint != "" && !strings.Contains(msg, hint) {
		if !strings.HasSuffix(msg, ".") {
			msg += "."
		}
		msg += " " + hint
	}
	return agent.ToolResult{Content: fmt.Sprintf("Error [%s]: %s", be.Code, msg), IsError: true}
}

func invalid(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{Content: "Error [invalid_argument]: " + fmt.Sprintf(format, args...), IsError: true}
}

// path validates a path argument; "" takes def when def is non-empty.
func (m *Middleware) path(raw, def string) (string, *agent.ToolResult) {
	if raw == "" && def != "" {
		return def, nil
	}
	p, err := vpath.Normalize(raw)
	if err != nil {
		r := m.errorResult(err)
		return "", &r
	}
	return p, nil
}

func (m *Middleware) permitted(tool string) *agent.ToolResult {
	if m.cfg.Preset.Allows(tool) {
		return nil
	}
	return &agent.ToolResult{
		Content: fmt.Sprintf("Error [permission_denied]: %s is not permitted for this agent (permission preset %s). Work with the tools you have, or report what needs to be done.", tool, m.cfg.Preset),
		IsError: true,
	}
}

// capLines keeps whole lines of text within ResultCap, adding a notice
// with the number of omitted lines and how to narrow.
func capLines(text, narrow string) string {
	if len(text) <= ResultCap {
		return text
	}
	lines := strings.Split(text, "\n")
	budget := ResultCap - 300
	n, size := 0, 0
	for n < len(lines) && size+len(lines[n])+1 <= budget {
		size += len(lines[n]) + 1
		n++
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n\n[Output cut at %d characters: %d more lines omitted. %s]", ResultCap, len(lines)-n, narrow)
}

func (m *Middleware) ls(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.Path, backend.Home(m.b))
	if bad != nil {
		return *bad, nil
	}
	res, err := m.b.Ls(ctx, p)
	if err != nil {
		return m.errorResult(err), nil
	}
	if len(res.Entries) == 0 {
		return agent.ToolResult{Content: fmt.Sprintf("No files found in %s.", p)}, nil
	}
	lines := make([]string, len(res.Entries))
	for i, e := range res.Entries {
		lines[i] = e.Path
	}
	text := strings.Join(lines, "\n")
	if res.Truncated {
		text += fmt.Sprintf("\n\n[Listing truncated: only the first %d entries are shown. List a subdirectory or use glob to narrow it.]", len(res.Entries))
	}
	return agent.ToolResult{Content: capLines(text, "List a subdirectory or use glob with a narrower pattern.")}, nil
}

func (m *Middleware) read(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var a struct {
		FilePath string `json:"file_path"`
		Offset   *int   `json:"offset"`
		Limit    *int   `json:"limit"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.FilePath, "")
	if bad != nil {
		return *bad, nil
	}
	offset, limit := 0, backend.DefaultReadLimit
	if a.Offset != nil {
		offset = *a.Offset
	}
	if a.Limit != nil {
		limit = *a.Limit
	}
	res, err := m.b.Read(ctx, backend.ReadRequest{Path: p, Offset: offset, Limit: limit})
	if err != nil {
		return m.errorResult(err), nil
	}
	m.noteRead(ctx, req.State, p, false)
	if m.cfg.Vision && res.Encoding == backend.EncodingBase64 && strings.HasPrefix(res.MimeType, "image/") {
		data, err := base64.StdEncoding.DecodeString(res.Content)
		if err != nil {
			return agent.ToolResult{}, fmt.Errorf("decode %s: %w", p, err)
		}
		return agent.ToolResult{
			Content: fmt.Sprintf("%s: %s, %d bytes. The image is attached.", p, res.MimeType, res.Size),
			Images:  []model.Image{{MIMEType: res.MimeType, Data: data}},
		}, nil
	}
	return agent.ToolResult{Content: renderRead(p, offset, limit, res)}, nil
}

// renderRead is the read_file result of docs/file-tools.md §4.2 "Formatting".
func renderRead(p string, offset, limit int, res backend.ReadResult) string {
	switch {
	case res.EmptyFile:
		return fmt.Sprintf("%s exists and is empty (0 bytes).", p)
	case res.NoLinesRequested:
		return fmt.Sprintf("limit was %d, so nothing was read from %s; the file may have content. Call read_file again with limit ≥ 1.", limit, p)
	case res.Encoding == backend.EncodingBase64:
		return fmt.Sprintf("%s: %s, %d bytes. This file is binary media; its content cannot be shown in this conversation.", p, res.MimeType, res.Size)
	}
	lines := strings.Split(res.Content, "\n")
	start := res.StartLine
	end := res.EndLine
	next := res.NextOffset
	var rowsByLine [][]textops.Row
	for i, l := range lines {
		rowsByLine = append(rowsByLine, textops.LineRows(start+i, l))
	}
	capNotice := ""
	body := textops.FormatRows(flatten(rowsByLine))
	if len(body) > ResultCap-2000 {
		budget := ResultCap - 2000
		width := len(rowsByLine[len(rowsByLine)-1][0].Marker) + 1 // markers never get wider than the full window's
		keep, size := 0, 0
		for keep < len(rowsByLine) {
			n := 0
			for _, r := range rowsByLine[keep] {
				n += width + 2 + len(r.Text) + 1
			}
			if size+n > budget {
				break
			}
			size += n
			keep++
		}
		if keep == 0 {
			// The first line alone exceeds the cap: show the rows that fit
			// and continue at the next line.
			var rows []textops.Row
			size = 0
			for _, r := range rowsByLine[0] {
				n := width + 2 + len(r.Text) + 1
				if size+n > budget && len(rows) > 0 {
					break
				}
				size += n
				rows = append(rows, r)
			}
			body = textops.FormatRows(rows)
			keep = 1
			capNotice = fmt.Sprintf("[Line %d is longer than the %d-character result cap; only its first %d rows are shown.]", start, ResultCap, len(rows))
		} else {
			body = textops.FormatRows(flatten(rowsByLine[:keep]))
			capNotice = fmt.Sprintf("[Output capped at %d characters: showing whole lines %d-%d only. Use a smaller limit.]", ResultCap, start, start+keep-1)
		}
		if keep < len(rowsByLine) || next != nil || capNotice != "" {
			end = start + keep - 1
			n := end
			next = &n
		}
	}
	var notes []string
	if next != nil {
		read := end - start + 1
		total := "total unknown"
		remaining := ""
		if res.TotalLines != nil {
			total = fmt.Sprintf("of %d", *res.TotalLines)
			remaining = fmt.Sprintf("; %d lines remain", *res.TotalLines-end)
		}
		notes = append(notes, fmt.Sprintf("[Read %d lines (%d-%d %s)%s. Continue with offset=%d.]", read, start, end, total, remaining, *next))
	}
	if capNotice != "" {
		notes = append(notes, capNotice)
	}
	if res.OffsetClamped {
		notes = append(notes, fmt.Sprintf("[offset %d is negative; reading started at line 1.]", offset))
	}
	if res.PartialLine {
		notes = append(notes, fmt.Sprintf("[Line %d exceeded 512 KiB and was cut; the next read starts at the following line. To see the rest, use execute (for example cut -c) if it is available.]", start))
	}
	if res.InvalidUTF8 {
		notes = append(notes, "[Some bytes are not valid UTF-8 and are shown as U+FFFD; an old_string containing U+FFFD will not match them.]")
	}
	if len(notes) == 0 {
		return body
	}
	return body + "\n\n" + strings.Join(notes, "\n")
}

func flatten(rs [][]textops.Row) []textops.Row {
	var out []textops.Row
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

func (m *Middleware) write(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	if bad := m.permitted("write_file"); bad != nil {
		return *bad, nil
	}
	var a struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.FilePath, "")
	if bad != nil {
		return *bad, nil
	}
	res, err := m.b.Write(ctx, p, []byte(a.Content))
	if err != nil {
		return m.errorResult(err), nil
	}
	m.noteRead(ctx, req.State, p, true)
	how := "created it"
	if !res.Created {
		how = "replaced the existing file"
	}
	return agent.ToolResult{Content: fmt.Sprintf("Wrote %d bytes to %s (%s).", res.BytesWritten, res.Path, how)}, nil
}

func (m *Middleware) edit(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	if bad := m.permitted("edit_file"); bad != nil {
		return *bad, nil
	}
	var a struct {
		FilePath   string `json:"file_path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.FilePath, "")
	if bad != nil {
		return *bad, nil
	}
	res, err := m.b.Edit(ctx, backend.EditRequest{Path: p, Old: a.OldString, New: a.NewString, ReplaceAll: a.ReplaceAll})
	if err != nil {
		return m.errorResult(err), nil
	}
	m.noteRead(ctx, req.State, p, true)
	word := "occurrences"
	if res.Occurrences == 1 {
		word = "occurrence"
	}
	text := fmt.Sprintf("Edited %s: replaced %d %s.", res.Path, res.Occurrences, word)
	if res.LineEndingAdapted {
		text += " (Line endings were converted to the file's style.)"
	}
	return agent.ToolResult{Content: text}, nil
}

func (m *Middleware) delete(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	if bad := m.permitted("delete"); bad != nil {
		return *bad, nil
	}
	var a struct {
		FilePath string `json:"file_path"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.FilePath, "")
	if bad != nil {
		return *bad, nil
	}
	res, err := m.b.Delete(ctx, p)
	if err != nil {
		return m.errorResult(err), nil
	}
	word := "entries"
	if res.Removed == 1 {
		word = "entry"
	}
	return agent.ToolResult{Content: fmt.Sprintf("Deleted %s (%d %s removed).", res.Path, res.Removed, word)}, nil
}

func (m *Middleware) glob(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var a struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.Path, backend.Home(m.b))
	if bad != nil {
		return *bad, nil
	}
	res, err := m.b.Glob(ctx, backend.GlobRequest{Pattern: a.Pattern, Path: p})
	if err != nil {
		return m.errorResult(err), nil
	}
	if len(res.Matches) == 0 && !res.Truncated {
		text := fmt.Sprintf("No files match %s under %s.", backend.Quote(a.Pattern), p)
		if strings.Contains(a.Pattern, "**") {
			text += " Note: ** does not descend into dot-directories (names starting with .); name them explicitly, e.g. .github/**/*.yml."
		}
		return agent.ToolResult{Content: text}, nil
	}
	lines := make([]string, len(res.Matches))
	for i, f := range res.Matches {
		lines[i] = f.Path
	}
	text := strings.Join(lines, "\n")
	if res.Truncated {
		why := map[backend.TruncationReason]string{
			backend.TruncatedMaxMatches: fmt.Sprintf("it reached the %d-match limit", backend.GlobMaxMatches),
			backend.TruncatedTimeBudget: "the search ran out of its time budget",
			backend.TruncatedWalkErrors: "some directories could not be read",
		}[res.TruncationReason]
		if why == "" {
			why = "part of the search failed"
		}
		if res.Error != nil {
			why += " (" + res.Error.Message + ")"
		}
		text += fmt.Sprintf("\n\n[The list is incomplete because %s. The paths shown are valid; narrow the pattern or the path to see the rest.]", why)
	}
	return agent.ToolResult{Content: capLines(text, "Narrow the pattern or the path.")}, nil
}

func (m *Middleware) grep(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var a struct {
		Pattern    string  `json:"pattern"`
		Path       string  `json:"path"`
		Glob       *string `json:"glob"`
		OutputMode string  `json:"output_mode"`
		MaxCount   *int    `json:"max_count"`
		Regex      bool    `json:"regex"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	p, bad := m.path(a.Path, backend.Home(m.b))
	if bad != nil {
		return *bad, nil
	}
	maxCount := m.cfg.GrepMaxCount
	if a.MaxCount != nil {
		maxCount = *a.MaxCount
	}
	gr := backend.GrepRequest{Pattern: a.Pattern, Path: p, Regex: a.Regex, MaxCount: maxCount}
	if a.Glob != nil {
		gr.Glob = *a.Glob
	}
	res, err := m.b.Grep(ctx, gr)
	if err != nil {
		return m.errorResult(err), nil
	}
	var notes []string
	if len(res.Matches) == 0 {
		text := fmt.Sprintf("No matches for %s under %s.", backend.Quote(a.Pattern), p)
		switch {
		case a.Regex || !textops.LooksLikeRegex(a.Pattern):
		case m.cfg.GrepLiteralOnly:
			text += " The pattern was searched as literal text (regular expressions are not available here); search for each alternative separately."
		default:
			text += " The pattern was searched as literal text; set regex=true to use regular-expression syntax (RE2), or search for each alternative separately."
		}
		if !res.Truncated && res.FilesSkippedBinary+res.FilesUnreadable == 0 {
			return agent.ToolResult{Content: text}, nil
		}
		notes = append(notes, text)
	}
	var b strings.Builder
	switch a.OutputMode {
	case "content":
		last := ""
		for _, mt := range res.Matches {
			if mt.Path != last {
				if last != "" {
					b.WriteByte('\n')
				}
				b.WriteString(mt.Path + ":\n")
				last = mt.Path
			}
			fmt.Fprintf(&b, "  %d: %s", mt.Line, mt.Text)
			if mt.TextTruncated {
				b.WriteString(" […]")
			}
			b.WriteByte('\n')
		}
	case "count":
		var order []string
		counts := make(map[string]int)
		for _, mt := range res.Matches {
			if counts[mt.Path] == 0 {
				order = append(order, mt.Path)
			}
			counts[mt.Path]++
		}
		for _, f := range order {
			fmt.Fprintf(&b, "%s: %d\n", f, counts[f])
		}
	default:
		last := ""
		for _, mt := range res.Matches {
			if mt.Path != last {
				b.WriteString(mt.Path + "\n")
				last = mt.Path
			}
		}
	}
	text := strings.TrimRight(b.String(), "\n")
	if res.Truncated {
		switch res.TruncationReason {
		case backend.TruncatedTimeBudget:
			notes = append(notes, "[The search stopped at its time limit; results are incomplete. Narrow path or glob.]")
		case backend.TruncatedMaxCount:
			notes = append(notes, fmt.Sprintf("[Results stop at max_count=%d matches; more exist. Narrow path or glob, or raise max_count (up to %d).]", maxCount, backend.GrepMaxMax))
		default:
			msg := "[Results are incomplete"
			if res.Error != nil {
				msg += ": " + res.Error.Message
			}
			notes = append(notes, msg+".]")
		}
		if a.OutputMode == "count" {
			notes = append(notes, "[Counts are lower bounds because the results were truncated.]")
		}
	}
	if n := res.FilesSkippedBinary + res.FilesUnreadable; n > 0 {
		notes = append(notes, fmt.Sprintf("[Skipped %d binary and %d unreadable files.]", res.FilesSkippedBinary, res.FilesUnreadable))
	}
	if len(notes) > 0 {
		if text != "" {
			text += "\n\n"
		}
		text += strings.Join(notes, "\n")
	}
	return agent.ToolResult{Content: capLines(text, "Narrow path or glob, lower max_count, or use output_mode=files_with_matches.")}, nil
}

// outputStreamer is a backend that passes a command's output on while
// it runs (the sandbox backend, and the composite and lazy backends over
// it).
type outputStreamer interface {
	ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (backend.ExecuteResult, error)
}

func (m *Middleware) execute(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	if bad := m.permitted("execute"); bad != nil {
		return *bad, nil
	}
	ex := m.b.(backend.Executor)
	var a struct {
		Command string `json:"command"`
		Timeout *int   `json:"timeout"`
	}
	if err := req.DecodeArgs(&a); err != nil {
		return invalid("%v", err), nil
	}
	secs := int(m.cfg.ExecuteDefaultTimeout / time.Second)
	if a.Timeout != nil {
		secs = *a.Timeout
		if secs == 0 {
			secs = int(m.cfg.ExecuteMaxTimeout / time.Second)
		}
	}
	// The full output of a long command goes where evicted results go
	// (docs/agent-core.md §3.4), so the middle that the inline output leaves out can
	// still be read.
	er := backend.ExecuteRequest{Command: a.Command, TimeoutSeconds: &secs, OffloadPath: m.resultPath(req.Call.ID)}
	run := ex.Execute
	st, ok := m.b.(outputStreamer)
	if out := req.OutputStream(); ok && out != nil {
		// The output goes to clients as tool_output events while the
		// command runs; Close (deferred) flushes it before the result.
		defer out.Close()
		run = func(ctx context.Context, er backend.ExecuteRequest) (backend.ExecuteResult, error) {
			return st.ExecuteStream(ctx, er, func(b []byte) error {
				_, err := out.Write(b)
				return err
			})
		}
	}
	res, err := run(ctx, er)
	if backend.IsOffloadError(err, er.OffloadPath) {
		req.Run.Logger.Warn("execute cannot write its offload file; running without it", zap.String("offload-path", er.OffloadPath), zap.Error(err))
		er.OffloadPath = ""
		res, err = run(ctx, er)
	}
	if err != nil {
		return m.errorResult(err), nil
	}
	out := agent.ToolResult{Content: renderOutput(res), ExitCode: res.ExitCode}
	if res.Truncated && res.OffloadedPath != "" {
		out.OffloadedPath = res.OffloadedPath
		// Above the eviction threshold, show a preview of the saved file
		// instead of the inline output (eviction would save a second,
		// partial copy). A capped file lacks the output's end, so the
		// inline output's own tail is kept then, and eviction previews it.
		if !res.CaptureTruncated && !slices.Contains(m.cfg.EvictExempt, req.Call.Name) &&
			utf8.RuneCountInString(out.Content) > m.cfg.EvictToolResultChars {
			if p, lines, err := m.filePreview(ctx, res.OffloadedPath); err == nil {
				size := fmt.Sprintf("%d bytes", res.OutputBytes)
				if lines > 0 {
					size += fmt.Sprintf(", %d lines", lines)
				}
				out.Content = fmt.Sprintf("[The output of %s (call %s) was too large to show: %s. The full output was saved to %s; page through it with read_file (file_path=%q, offset, limit) or search it with grep instead of running the command again.]\n\n%s",
					req.Call.Name, req.Call.ID, size, res.OffloadedPath, res.OffloadedPath, p)
			}
		}
	}
	out.Content += m.status(res, secs)
	return out, nil
}

// renderOutput is the output part of an execute result: the inline output,
// and a line on what was cut and where the rest is.
func renderOutput(res backend.ExecuteResult) string {
	text := "(no output)"
	if res.Output != "" {
		text = strings.TrimRight(res.Output, "\n")
	}
	if !res.Truncated {
		return text
	}
	text += fmt.Sprintf("\n\n[Output truncated: kept %d of %d bytes (head and tail).", len(res.Output), res.OutputBytes)
	if res.OffloadedPath != "" {
		text += fmt.Sprintf(" The full output is in %s; read it with read_file (offset, limit).", res.OffloadedPath)
		if res.CaptureTruncated {
			text += fmt.Sprintf(" That file holds only the first %d bytes.", backend.ExecuteCaptureMax)
		}
	} else {
		text += " The middle part was not saved."
	}
	return text + "]"
}

// status is the tail of an execute result: exit code and timeout.
func (m *Middleware) status(res backend.ExecuteResult, secs int) string {
	var b strings.Builder
	b.WriteString("\n\n")
	switch {
	case res.ExitCode == nil:
		b.WriteString("[Command finished; exit code unknown.]")
	case *res.ExitCode == 0:
		b.WriteString("[Exit code 0: success.]")
	default:
		fmt.Fprintf(&b, "[Exit code %d: failure.]", *res.ExitCode)
	}
	if res.TimedOut {
		fmt.Fprintf(&b, "\n[The command timed out after %d s and was stopped. Raise timeout (up to %d s), or run the job in the background with its output redirected to a file and check on it later.]",
			secs, int(m.cfg.ExecuteMaxTimeout/time.Second))
	}
	return b.String()
}
