package textops

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Matcher is a compiled grep pattern (docs/file-tools.md §4.6): a literal byte substring, or
// an RE2 regexp, matched per line against the line without its terminator.
// A Matcher is safe for concurrent use.
type Matcher struct {
	lit []byte         // literal mode
	re  *regexp.Regexp // regex mode
}

// CompileMatcher validates and compiles a grep pattern. Errors are
// *backend.Error: invalid_argument for an empty pattern, one over
// MaxPatternBytes, or a literal containing LF or CR (matching never
// crosses lines); invalid_pattern when the regexp does not compile.
func CompileMatcher(pattern string, regex bool) (*Matcher, error) {
	switch {
	case pattern == "":
		return nil, backend.Errorf(backend.CodeInvalidArgument, "", "grep pattern is empty")
	case len(pattern) > backend.MaxPatternBytes:
		return nil, backend.Errorf(backend.CodeInvalidArgument, "",
			"grep pattern is %d bytes, over the %d-byte limit", len(pattern), backend.MaxPatternBytes)
	case !regex && strings.ContainsAny(pattern, "\r\n"):
		return nil, backend.Errorf(backend.CodeInvalidArgument, "",
			"grep pattern %s contains a line break; matching is per line, so search for one line at a time", backend.Quote(pattern))
	}
	if !regex {
		return &Matcher{lit: []byte(pattern)}, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, backend.Errorf(backend.CodeInvalidPattern, "",
			"grep regex does not compile (%v); note that Go RE2 syntax has no lookaround or backreferences", err)
	}
	return &Matcher{re: re}, nil
}

// MatchLine reports whether line (without terminator) matches.
func (m *Matcher) MatchLine(line []byte) bool {
	if m.re != nil {
		return m.re.Match(line)
	}
	return bytes.Contains(line, m.lit)
}

// LineMatch is one matching line of a scanned file.
type LineMatch struct {
	// Line is the 1-based line number of the line model (the read
	// numbering, in CRLF and CR files too).
	Line int
	// Text is the line without terminator or BOM, at most
	// GrepTextMaxChars chars, invalid UTF-8 shown as U+FFFD.
	Text string
	// TextTruncated reports that Text was cut.
	TextTruncated bool
}

// scanReaders recycles Scan's buffered readers.
var scanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, scanBufSize) }}

// Scan searches one file's content, read from its start. It first applies
// the binary sniff to the first SniffWindow bytes and returns binary=true
// without matches for a binary file. Otherwise it returns the matching
// lines in order, stopping after max matches (max ≤ 0: no cap; engines
// pass their remaining budget plus one to detect truncation).
//
// Lines of any length are handled in O(1) memory per line. When ctx ends,
// Scan returns the matches found so far with ctx's error; read errors are
// returned as is, also with the matches so far.
func (m *Matcher) Scan(ctx context.Context, r io.Reader, max int) (matches []LineMatch, binary bool, err error) {
	// A grep over many small files would otherwise allocate a whole scan
	// buffer per file.
	br := scanReaders.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() {
		br.Reset(nil)
		scanReaders.Put(br)
	}()
	head, err := br.Peek(backend.SniffWindow)
	switch {
	case err == io.EOF:
		if IsBinary(head, true) {
			return nil, true, nil
		}
	case err != nil:
		return nil, false, err
	case IsBinary(head, false):
		return nil, true, nil
	}

	lr := newLineReader(br)
	line := 0
	for iter := 0; lr.more(); iter++ {
		if iter%256 == 0 {
			if err := ctx.Err(); err != nil {
				return matches, false, err
			}
		}
		if m.lit != nil && !lr.bomLine {
			if n := m.skipBuffered(lr); n > 0 {
				line += n
				continue
			}
		}
		line++
		if ok, text, cut := m.scanLine(lr); ok {
			matches = append(matches, LineMatch{Line: line, Text: text, TextTruncated: cut})
			if max > 0 && len(matches) >= max {
				return matches, false, nil
			}
		}
	}
	return matches, false, lr.err
}

// skipBuffered is the literal fast path: it consumes the whole lines of
// the buffered data that precede the first occurrence of the literal (all
// of them when there is none) and returns how many it consumed. A literal
// holds no CR or LF, so an occurrence never spans lines, and lines before
// it cannot match. Only lines ending in LF within the buffer are skipped,
// so a CRLF split across refills is never miscounted.
func (m *Matcher) skipBuffered(lr *lineReader) int {
	b, _ := lr.br.Peek(lr.br.Buffered())
	end := len(b)
	if i := bytes.Index(b, m.lit); i >= 0 {
		end = i
	}
	k := bytes.LastIndexByte(b[:end], '\n')
	if k < 0 {
		return 0
	}
	region := b[:k+1]
	lf := bytes.Count(region, []byte{'\n'})
	cr, crlf := bytes.Count(region, []byte{'\r'}), 0
	if cr > 0 {
		crlf = bytes.Count(region, []byte("\r\n"))
	}
	lr.counts.lf += lf - crlf
	lr.counts.crlf += crlf
	lr.counts.cr += cr - crlf
	lr.br.Discard(k + 1)
	return lf + cr - crlf
}

// scanLine consumes the current line and reports whether it matches, with
// its display text.
func (m *Matcher) scanLine(lr *lineReader) (matched bool, text string, truncated bool) {
	p, done, _ := lr.piece()
	if done {
		if !m.MatchLine(p) {
			return false, "", false
		}
		var c textCapture
		c.add(p)
		return true, c.text(), c.truncated
	}
	// A line longer than the buffer: match while streaming its pieces.
	var c textCapture
	c.add(p)
	if m.re != nil {
		rr := &lineRunes{lr: lr, p: p, capture: &c}
		matched = m.re.MatchReader(rr)
		for !rr.done {
			p, rr.done, _ = lr.piece()
			c.add(p)
		}
		return matched, c.text(), c.truncated
	}
	keep := len(m.lit) - 1 // bytes of an occurrence that can precede a piece boundary
	var carry, joint []byte
	for {
		if !matched {
			joint = append(append(joint[:0], carry...), p[:min(len(p), keep)]...)
			matched = bytes.Contains(joint, m.lit) || bytes.Contains(p, m.lit)
			carry = append(carry, p[max(0, len(p)-keep):]...)
			carry = carry[max(0, len(carry)-keep):]
		}
		if done {
			return matched, c.text(), c.truncated
		}
		p, done, _ = lr.piece()
		c.add(p)
	}
}

// lineRunes reads the runes of the current line for regexp.MatchReader.
type lineRunes struct {
	lr      *lineReader
	p       []byte
	done    bool
	capture *textCapture
}

// ReadRune implements io.RuneReader; it returns io.EOF at the end of the
// line.
func (x *lineRunes) ReadRune() (rune, int, error) {
	for len(x.p) == 0 {
		if x.done {
			return 0, 0, io.EOF
		}
		x.p, x.done, _ = x.lr.piece()
		x.capture.add(x.p)
	}
	r, n := utf8.DecodeRune(x.p)
	x.p = x.p[n:]
	return r, n, nil
}

// textCapture keeps the first GrepTextMaxChars chars of a line fed to it
// piece by piece.
type textCapture struct {
	buf       []byte
	chars     int
	truncated bool
}

func (c *textCapture) add(p []byte) {
	room := backend.GrepTextMaxChars - c.chars
	k := prefixChars(p, room)
	c.buf = append(c.buf, p[:k]...)
	c.chars += utf8.RuneCount(p[:k])
	if k < len(p) {
		c.truncated = true
	}
}

func (c *textCapture) text() string {
	out, _ := appendValid(nil, c.buf)
	return string(out)
}

// LooksLikeRegex is the docs/file-tools.md §4.6 regex-hint predicate for a literal search
// with no matches: true when pattern contains "|", ".*", ".+", a backslash
// escape, a leading "^" or a trailing "$". The tool layer then notes that
// the pattern was searched as literal text.
func LooksLikeRegex(pattern string) bool {
	if strings.ContainsAny(pattern, "|") || strings.Contains(pattern, ".*") || strings.Contains(pattern, ".+") {
		return true
	}
	if i := strings.IndexByte(pattern, '\\'); i >= 0 && i+1 < len(pattern) {
		return true
	}
	return strings.HasPrefix(pattern, "^") || strings.HasSuffix(pattern, "$")
}
