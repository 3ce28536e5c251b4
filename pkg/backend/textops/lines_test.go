package textops

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/plumbhq/plumb/pkg/backend"
)

// streamLines collects the lines of r through lineReader.
func streamLines(t testing.TB, r io.Reader) ([]string, terminatorCounts) {
	t.Helper()
	lr := newLineReader(bufio.NewReaderSize(r, scanBufSize))
	var lines []string
	for lr.more() {
		var line []byte
		for {
			p, done, _ := lr.piece()
			line = append(line, p...)
			if done {
				break
			}
		}
		lines = append(lines, string(line))
	}
	if lr.err != nil {
		t.Fatal(lr.err)
	}
	return lines, lr.counts
}

func TestSplitLines(t *testing.T) {
	long := strings.Repeat("x", scanBufSize-1)
	tests := []struct {
		name   string
		in     string
		want   []string
		ending backend.LineEnding
	}{
		{"empty", "", nil, backend.LineEndingNone},
		{"no terminator", "x", []string{"x"}, backend.LineEndingNone},
		{"final LF adds no line", "x\ny\n", []string{"x", "y"}, backend.LineEndingLF},
		{"last line without terminator", "x\ny", []string{"x", "y"}, backend.LineEndingLF},
		{"two blank lines", "\n\n", []string{"", ""}, backend.LineEndingLF},
		{"CRLF", "a\r\nb\r\n", []string{"a", "b"}, backend.LineEndingCRLF},
		{"lone CR", "a\rb\rc", []string{"a", "b", "c"}, backend.LineEndingCR},
		{"mixed", "a\nb\r\nc", []string{"a", "b", "c"}, backend.LineEndingMixed},
		{"CR CR LF", "a\r\r\nb", []string{"a", "", "b"}, backend.LineEndingMixed},
		{"BOM hidden", "\uFEFFa\nb", []string{"a", "b"}, backend.LineEndingLF},
		{"BOM only is one empty line", "\uFEFF", []string{""}, backend.LineEndingNone},
		{"BOM then LF", "\uFEFF\n", []string{""}, backend.LineEndingLF},
		{"BOM not at start kept", "a\uFEFF", []string{"a\uFEFF"}, backend.LineEndingNone},
		{"CRLF across buffer boundary", long + "\r\nz", []string{long, "z"}, backend.LineEndingCRLF},
		{"CR at buffer boundary", long + "\rz", []string{long, "z"}, backend.LineEndingCR},
		{"line longer than buffer", strings.Repeat("é", scanBufSize) + "\nz", []string{strings.Repeat("é", scanBufSize), "z"}, backend.LineEndingLF},
		{"long line then CR at end", strings.Repeat("q", 3*scanBufSize) + "\r", []string{strings.Repeat("q", 3*scanBufSize)}, backend.LineEndingCR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitLines(tt.in)
			if !equalLines(got, tt.want) {
				t.Errorf("SplitLines = %q, want %q", short(got), short(tt.want))
			}
			if got := ClassifyLineEndings(TrimBOM([]byte(tt.in))); got != tt.ending {
				t.Errorf("ClassifyLineEndings = %q, want %q", got, tt.ending)
			}
			for name, r := range map[string]io.Reader{
				"whole":    strings.NewReader(tt.in),
				"one byte": iotest.OneByteReader(strings.NewReader(tt.in)),
				"half":     iotest.HalfReader(strings.NewReader(tt.in)),
			} {
				got, counts := streamLines(t, r)
				if !equalLines(got, tt.want) {
					t.Errorf("%s: streamed lines = %q, want %q", name, short(got), short(tt.want))
				}
				if counts.class() != tt.ending {
					t.Errorf("%s: streamed class = %q, want %q", name, counts.class(), tt.ending)
				}
			}
		})
	}
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func short(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > 20 {
			l = l[:20] + "…"
		}
		out[i] = l
	}
	return out
}

func TestDominantTerminator(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"none", "abc", "\n"},
		{"lf", "a\nb\n", "\n"},
		{"crlf", "a\r\nb\r\nc\n", "\r\n"},
		{"cr", "a\rb\rc\n", "\r"},
		{"tie lf crlf", "a\nb\r\n", "\n"},
		{"tie lf cr", "a\nb\r", "\n"},
		{"tie crlf cr", "a\r\nb\r", "\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DominantTerminator([]byte(tt.in)); got != tt.want {
				t.Errorf("DominantTerminator = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIncompleteTail(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"ascii", "abc", 0},
		{"complete 2-byte", "aé", 0},
		{"cut 2-byte", "a\xc3", 1},
		{"cut 3-byte after 1", "a\xe2", 1},
		{"cut 3-byte after 2", "a\xe2\x82", 2},
		{"cut 4-byte after 3", "a\xf0\x9f\x98", 3},
		{"complete 4-byte", "a😀", 0},
		{"stray continuation", "a\x80", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := incompleteTail([]byte(tt.in)); got != tt.want {
				t.Errorf("incompleteTail(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

// TestPiecesKeepCharacters checks that a line longer than the buffer is
// handed out in pieces that never split a UTF-8 sequence.
func TestPiecesKeepCharacters(t *testing.T) {
	line := strings.Repeat("a€😀", scanBufSize) // 8 bytes per unit
	lr := newLineReader(bufio.NewReaderSize(strings.NewReader("b"+line), scanBufSize))
	var got bytes.Buffer
	pieces := 0
	for {
		p, done, _ := lr.piece()
		if pieces == 0 && !done && len(p) < scanBufSize-3 {
			t.Errorf("first piece of a split line is %d bytes, want ≥ %d", len(p), scanBufSize-3)
		}
		if incompleteTail(p) != 0 {
			t.Fatalf("piece %d ends inside a character", pieces)
		}
		got.Write(p)
		pieces++
		if done {
			break
		}
	}
	if got.String() != "b"+line || pieces < 2 {
		t.Errorf("reassembled %d bytes in %d pieces, want %d bytes in ≥ 2", got.Len(), pieces, len(line)+1)
	}
}
