package textops

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormatLines(t *testing.T) {
	twelve := make([]string, 12)
	for i := range twelve {
		twelve[i] = fmt.Sprintf("l%d", i+1)
	}
	long := strings.Repeat("a", 12000)
	tests := []struct {
		name    string
		content string
		start   int
		want    []string // rows
	}{
		{"18 twelve lines", strings.Join(twelve, "\n"), 1, []string{
			" 1  l1", " 2  l2", " 3  l3", " 4  l4", " 5  l5", " 6  l6", " 7  l7", " 8  l8", " 9  l9", "10  l10", "11  l11", "12  l12"}},
		{"19 offset 7 limit 5", strings.Join(twelve[7:], "\n"), 8, []string{" 8  l8", " 9  l9", "10  l10", "11  l11", "12  l12"}},
		{"20 long line", "x\n" + long + "\nz", 1, []string{
			"  1  x", "  2  " + long[:5000], "2.1  " + long[:5000], "2.2  " + long[:2000], "  3  z"}},
		{"21 tab verbatim", "\tif x:", 1, []string{"1  \tif x:"}},
		{"22 blank line", "a\n\nc", 1, []string{"1  a", "2  ", "3  c"}},
		{"single empty line", "", 1, []string{"1  "}},
		{"row width counts chars", strings.Repeat("é", 5001), 9, []string{"  9  " + strings.Repeat("é", 5000), "9.1  é"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatLines(tt.content, tt.start)
			if want := strings.Join(tt.want, "\n"); got != want {
				t.Errorf("FormatLines =\n%.300q\nwant\n%.300q", got, want)
			}
		})
	}
}

func TestLineRows(t *testing.T) {
	rows := LineRows(2, strings.Repeat("a", 12000))
	var markers []string
	for _, r := range rows {
		markers = append(markers, r.Marker)
	}
	if got := strings.Join(markers, ","); got != "2,2.1,2.2" {
		t.Errorf("markers = %s", got)
	}
	if len(rows[2].Text) != 2000 {
		t.Errorf("row 2.2 holds %d chars, want 2000", len(rows[2].Text))
	}
	if rows := LineRows(7, strings.Repeat("b", 5000)); len(rows) != 1 {
		t.Errorf("a line of exactly RowWidth chars gives %d rows, want 1", len(rows))
	}
}
