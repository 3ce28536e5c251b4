package textops

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// The line model (docs/file-tools.md §4): terminators are LF, CRLF and lone CR; a final
// terminator does not start an extra line; a last line without one still
// counts; a leading UTF-8 BOM is hidden. A file holding only a BOM has one
// empty line, so that it never reads as "0 lines" while its size is not 0.

var bom = []byte{0xEF, 0xBB, 0xBF}

// TrimBOM returns b without a leading UTF-8 byte order mark.
func TrimBOM(b []byte) []byte {
	return bytes.TrimPrefix(b, bom)
}

// SplitLines splits s by the line model and returns the lines without
// terminators. A leading BOM is hidden. It is the whole-content reference
// of the streaming scanners below.
func SplitLines(s string) []string {
	if rest, ok := cutBOM(s); ok {
		if rest == "" {
			return []string{""}
		}
		s = rest
	}
	var lines []string
	for s != "" {
		i := indexTermString(s)
		if i < 0 {
			lines = append(lines, s)
			break
		}
		lines = append(lines, s[:i])
		s = s[i+termLen(s, i):]
	}
	return lines
}

func cutBOM(s string) (string, bool) {
	if len(s) >= 3 && s[0] == bom[0] && s[1] == bom[1] && s[2] == bom[2] {
		return s[3:], true
	}
	return s, false
}

// indexTerm returns the index of the first CR or LF in b, or -1. Two
// IndexByte scans beat one IndexAny on the hot path.
func indexTerm(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	end := len(b)
	if lf >= 0 {
		end = lf
	}
	if cr := bytes.IndexByte(b[:end], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// indexTermString is indexTerm for strings.
func indexTermString(s string) int {
	lf := strings.IndexByte(s, '\n')
	end := len(s)
	if lf >= 0 {
		end = lf
	}
	if cr := strings.IndexByte(s[:end], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// termLen returns the length of the terminator at s[i] (2 for CRLF).
func termLen(s string, i int) int {
	if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
		return 2
	}
	return 1
}

// terminatorCounts tallies the terminators of a scan.
type terminatorCounts struct{ lf, crlf, cr int }

func (c *terminatorCounts) add(t term) {
	switch t {
	case termLF:
		c.lf++
	case termCRLF:
		c.crlf++
	case termCR:
		c.cr++
	}
}

func (c terminatorCounts) class() backend.LineEnding {
	kinds := 0
	var only backend.LineEnding
	for _, k := range []struct {
		n int
		e backend.LineEnding
	}{{c.lf, backend.LineEndingLF}, {c.crlf, backend.LineEndingCRLF}, {c.cr, backend.LineEndingCR}} {
		if k.n > 0 {
			kinds++
			only = k.e
		}
	}
	switch kinds {
	case 0:
		return backend.LineEndingNone
	case 1:
		return only
	}
	return backend.LineEndingMixed
}

// dominant returns the most frequent terminator. Ties go to LF, and a tie
// between CRLF and CR (both above LF) goes to CRLF.
func (c terminatorCounts) dominant() string {
	switch {
	case c.crlf > c.lf && c.crlf >= c.cr:
		return "\r\n"
	case c.cr > c.lf && c.cr > c.crlf:
		return "\r"
	}
	return "\n"
}

func countTerminators(content []byte) terminatorCounts {
	var c terminatorCounts
	c.lf = bytes.Count(content, []byte{'\n'})
	c.crlf = bytes.Count(content, []byte("\r\n"))
	c.cr = bytes.Count(content, []byte{'\r'}) - c.crlf
	c.lf -= c.crlf
	return c
}

// ClassifyLineEndings classifies the terminators of content: lf, crlf, cr,
// mixed (more than one kind), or none.
func ClassifyLineEndings(content []byte) backend.LineEnding {
	return countTerminators(content).class()
}

// DominantTerminator returns the most frequent terminator of content ("\n",
// "\r\n" or "\r"). Ties go to LF; a tie between CRLF and CR goes to CRLF.
// Content without terminators gives "\n".
func DominantTerminator(content []byte) string {
	return countTerminators(content).dominant()
}

// term is the terminator that ended a line.
type term uint8

const (
	termNone term = iota // last line without terminator
	termLF
	termCRLF
	termCR
)

// scanBufSize is the streaming buffer. A line that fits in it (terminator
// included) is handed out as one piece; longer lines come in pieces of at
// least scanBufSize-3 bytes, never splitting a UTF-8 sequence. Since
// scanBufSize/4 > GrepTextMaxChars, the first piece of a split line always
// holds more than GrepTextMaxChars chars.
const scanBufSize = 64 << 10

// lineReader streams lines by the line model from a bufio.Reader, handing
// out each line as one or more pieces that alias the buffer (valid until
// the next call). Memory is the buffer, whatever the line lengths.
type lineReader struct {
	br      *bufio.Reader
	eof     bool // the underlying reader returned EOF or an error
	bomLine bool // a BOM-only input still owes its one empty line
	err     error
	counts  terminatorCounts
}

func newLineReader(br *bufio.Reader) *lineReader {
	l := &lineReader{br: br}
	b, err := br.Peek(3)
	if err != nil && err != io.EOF {
		l.setErr(err) // bufio reports an error once; keep it
	}
	if bytes.Equal(b, bom) {
		br.Discard(3)
		if !l.more() {
			l.bomLine = true
		}
	}
	return l
}

// more reports whether another line starts at the current position.
func (l *lineReader) more() bool {
	if l.bomLine || l.br.Buffered() > 0 {
		return true
	}
	if l.eof {
		return false
	}
	if _, err := l.br.Peek(1); err != nil {
		l.setErr(err)
		return false
	}
	return true
}

func (l *lineReader) setErr(err error) {
	l.eof = true
	if err != io.EOF && l.err == nil {
		l.err = err
	}
}

// piece returns the next piece of the current line (call only when more
// reported true or the previous piece was not done). done reports that
// the line ended, with terminator t.
func (l *lineReader) piece() (p []byte, done bool, t term) {
	if l.bomLine {
		l.bomLine = false
		return nil, true, termNone
	}
	b, _ := l.br.Peek(l.br.Buffered())
	searched := 0
	for {
		i := -1
		if j := indexTerm(b[searched:]); j >= 0 {
			i = searched + j
		}
		if i >= 0 {
			switch {
			case b[i] == '\n':
				return l.emit(b, i, 1, termLF)
			case i+1 < len(b) && b[i+1] == '\n':
				return l.emit(b, i, 2, termCRLF)
			case i+1 < len(b) || l.eof:
				return l.emit(b, i, 1, termCR)
			}
			// A CR at the end of the buffered data: CR or CRLF is decided
			// by the next byte.
		}
		if l.eof {
			l.br.Discard(len(b))
			return b, true, termNone
		}
		if len(b) >= scanBufSize {
			n := len(b)
			if i >= 0 {
				n = i
			} else {
				n -= incompleteTail(b)
			}
			l.br.Discard(n)
			return b[:n], false, termNone
		}
		searched = len(b)
		if i >= 0 {
			searched = i
		}
		var err error
		b, err = l.br.Peek(scanBufSize)
		if err != nil {
			l.setErr(err)
		}
	}
}

func (l *lineReader) emit(b []byte, i, n int, t term) ([]byte, bool, term) {
	l.br.Discard(i + n)
	l.counts.add(t)
	return b[:i], true, t
}

// skipLine consumes the rest of the current line.
func (l *lineReader) skipLine() {
	for {
		if _, done, _ := l.piece(); done {
			return
		}
	}
}

// countRest consumes and counts the remaining lines.
func (l *lineReader) countRest() int {
	n := 0
	for l.more() {
		l.skipLine()
		n++
	}
	return n
}

// incompleteTail returns the length (0..3) of a UTF-8 sequence cut off at
// the end of b, so that pieces never split a character.
func incompleteTail(b []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}
