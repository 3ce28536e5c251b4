package textops

import (
	"strconv"
	"strings"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Row is one row of the read gutter format (docs/file-tools.md §4.2 Formatting).
type Row struct {
	// Marker is "N" for a line's first row and "N.1", "N.2", … for its
	// continuation rows.
	Marker string
	// Text is at most RowWidth chars of the line.
	Text string
}

// LineRows cuts line number n into rows of backend.RowWidth chars. A blank
// line gives one row with empty Text. Continuation rows do not count toward
// a read's limit; the tool layer uses the rows of each line to keep whole
// lines under its result cap.
func LineRows(n int, line string) []Row {
	num := strconv.Itoa(n)
	rows := []Row{{Marker: num}}
	for k := 0; ; k++ {
		cut := prefixCharsString(line, backend.RowWidth)
		if k > 0 {
			rows = append(rows, Row{Marker: num + "." + strconv.Itoa(k)})
		}
		rows[len(rows)-1].Text = line[:cut]
		line = line[cut:]
		if line == "" {
			return rows
		}
	}
}

// FormatRows renders rows one per line (no trailing newline): each marker
// right-aligned to the widest marker among rows, two spaces, then the text
// verbatim.
func FormatRows(rows []Row) string {
	width, size := 0, 0
	for _, r := range rows {
		width = max(width, len(r.Marker))
		size += len(r.Text) + 1
	}
	var b strings.Builder
	b.Grow(size + len(rows)*(width+2))
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		for range width - len(r.Marker) {
			b.WriteByte(' ')
		}
		b.WriteString(r.Marker)
		b.WriteString("  ")
		b.WriteString(r.Text)
	}
	return b.String()
}

// FormatLines renders a read window in the gutter format: content is
// ReadResult.Content (lines joined by LF) and startLine its StartLine.
func FormatLines(content string, startLine int) string {
	var rows []Row
	for i, line := range strings.Split(content, "\n") {
		rows = append(rows, LineRows(startLine+i, line)...)
	}
	return FormatRows(rows)
}
