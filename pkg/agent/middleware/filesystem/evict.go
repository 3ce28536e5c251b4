package filesystem

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/model"
)

// EvictOptions shape an eviction.
type EvictOptions struct {
	// Threshold is the size in chars above which a result is evicted.
	Threshold int
	// ArtifactsRoot is where large_tool_results/ lives ("" = "/").
	ArtifactsRoot string
	// PreviewLines and PreviewLineChars shape the head/tail preview
	// (0 = 5 lines of at most 1000 chars).
	PreviewLines, PreviewLineChars int
}

// sanitizeID maps a tool call id to a file name: every char outside
// [A-Za-z0-9_-] becomes "_", cut to 128 bytes, "_" when empty.
func sanitizeID(id string) string {
	var b strings.Builder
	for i := 0; i < len(id) && b.Len() < 128; i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// SanitizeID is the file name of a tool call id under large_tool_results/.
func SanitizeID(id string) string { return sanitizeID(id) }

// EvictPath is where Evict saves the result of call id under root ("" =
// "/").
func EvictPath(root, id string) string {
	if root == "" {
		root = "/"
	}
	return vpath.Join(root, "large_tool_results/"+sanitizeID(id))
}

// Evict applies docs/agent-core.md §3.4 to res: above the threshold, the full text
// is written to <root>/large_tool_results/<id> and the model gets a notice
// with a head and tail preview. If the write fails, the text is cut to the
// threshold with a note. IsError and ExitCode are kept.
func Evict(ctx context.Context, b backend.Backend, call model.ToolCall, res agent.ToolResult, o EvictOptions) agent.ToolResult {
	if o.Threshold <= 0 {
		o.Threshold = DefaultEvictChars
	}
	if len(res.Content) <= o.Threshold {
		return res
	}
	chars := utf8.RuneCountInString(res.Content)
	if chars <= o.Threshold {
		return res
	}
	if o.PreviewLines <= 0 {
		o.PreviewLines = DefaultPreviewLines
	}
	if o.PreviewLineChars <= 0 {
		o.PreviewLineChars = DefaultPreviewLineChars
	}
	p := res.OffloadedPath
	if p == "" {
		p = EvictPath(o.ArtifactsRoot, call.ID)
		if b == nil {
			return truncated(res, o.Threshold, "no file backend is configured")
		}
		if _, err := b.Write(ctx, p, []byte(res.Content)); err != nil {
			return truncated(res, o.Threshold, "saving it failed: "+string(backend.CodeOf(err)))
		}
	}
	// The line model of docs/file-tools.md §4: a final terminator does not start
	// another line.
	lines := strings.Split(strings.TrimSuffix(res.Content, "\n"), "\n")
	var notice strings.Builder
	fmt.Fprintf(&notice, "[The result of %s (call %s) was too large to show: %d characters, %d lines. The full output was saved to %s. Page through it with read_file (file_path=%q, offset, limit) instead of repeating the call.]\n\n",
		call.Name, call.ID, chars, len(lines), p, p)
	notice.WriteString(preview(lines, o.PreviewLines, o.PreviewLineChars))
	res.Content = notice.String()
	res.OffloadedPath = p
	return res
}

// preview renders the first and last n lines in the read gutter format
// with an omitted-lines marker between them.
func preview(lines []string, n, width int) string {
	if len(lines) <= 2*n {
		return renderPreview(lines, nil, 0, width)
	}
	return renderPreview(lines[:n], lines[len(lines)-n:], len(lines)-n+1, width)
}

// renderPreview numbers head from line 1 and tail from line tailStart,
// each line cut to width chars, with a marker for the lines between.
func renderPreview(head, tail []string, tailStart, width int) string {
	var rows []textops.Row
	for i, l := range head {
		rows = append(rows, textops.Row{Marker: fmt.Sprint(i + 1), Text: cutChars(l, width)})
	}
	for i, l := range tail {
		rows = append(rows, textops.Row{Marker: fmt.Sprint(tailStart + i), Text: cutChars(l, width)})
	}
	// One width for both blocks, as if they were one output.
	all := textops.FormatRows(rows)
	if len(tail) == 0 {
		return all
	}
	parts := strings.Split(all, "\n")
	return strings.Join(parts[:len(head)], "\n") + fmt.Sprintf("\n… [%d lines omitted] …\n", tailStart-1-len(head)) + strings.Join(parts[len(head):], "\n")
}

// resultPath is where the full result of call id is saved:
// <artifacts_root>/large_tool_results/<sanitized id>.
func (m *Middleware) resultPath(id string) string {
	return vpath.Join(m.cfg.ArtifactsRoot, "large_tool_results/"+sanitizeID(id))
}

// filePreview renders the first and last preview lines of the saved file
// p, numbered as read_file numbers them, and returns its line count
// (0 when unknown).
func (m *Middleware) filePreview(ctx context.Context, p string) (string, int, error) {
	n := m.cfg.PreviewLines
	head, err := m.b.Read(ctx, backend.ReadRequest{Path: p, Limit: n})
	if err != nil {
		return "", 0, err
	}
	lines := strings.Split(head.Content, "\n")
	if head.TotalLines == nil {
		return renderPreview(lines, nil, 0, m.cfg.PreviewLineChars) + "\n…", 0, nil
	}
	total := *head.TotalLines
	if total <= n {
		return renderPreview(lines, nil, 0, m.cfg.PreviewLineChars), total, nil
	}
	start := max(total-n, n)
	tail, err := m.b.Read(ctx, backend.ReadRequest{Path: p, Offset: start, Limit: n})
	if err != nil {
		return "", 0, err
	}
	if start == n { // the tail follows the head directly
		return renderPreview(append(lines, strings.Split(tail.Content, "\n")...), nil, 0, m.cfg.PreviewLineChars), total, nil
	}
	return renderPreview(lines, strings.Split(tail.Content, "\n"), start+1, m.cfg.PreviewLineChars), total, nil
}

func truncated(res agent.ToolResult, limit int, why string) agent.ToolResult {
	res.Content = cutChars(res.Content, limit) + fmt.Sprintf("\n\n[Output cut at %d characters: it was too large to show and could not be saved (%s).]", limit, why)
	return res
}
