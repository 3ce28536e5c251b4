package textops

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// ValidateEdit implements docs/file-tools.md §4.4 steps 1 and 2, which come before any file
// access: an empty old string, or old == new, is invalid_argument.
func ValidateEdit(old, new string) *backend.Error {
	switch {
	case old == "":
		return backend.Errorf(backend.CodeInvalidArgument, "",
			"old_string is empty, which is refused; to create or replace a whole file use write_file; to insert text, include a neighbouring line in old_string")
	case old == new:
		return backend.Errorf(backend.CodeInvalidArgument, "",
			"old_string and new_string are identical; nothing would change")
	}
	return nil
}

// Replace implements docs/file-tools.md §4.4 steps 1, 2 and 4–7 on a file's content (step 3,
// the file checks, is the caller's). It tries old as sent, then old
// converted to the file's dominant terminator (when that is CRLF or CR and
// old has LF), then old with CRLF and CR turned into LF; the first variant
// found wins, new gets the same conversion, and adapted reports a
// conversion. Occurrences are counted non-overlapping, left to right,
// bytewise. Zero hits is string_not_found with the first applicable hint;
// more than one without replaceAll is multiple_occurrences with details
// count and lines. Bytes outside the replaced spans, invalid UTF-8
// included, are kept as they are.
//
// On error, out is nil and content is untouched. err has no Path.
func Replace(content []byte, old, new string, replaceAll bool) (out []byte, occurrences int, adapted bool, err *backend.Error) {
	if err := ValidateEdit(old, new); err != nil {
		return nil, 0, false, err
	}
	type variant struct{ old, new string }
	variants := []variant{{old, new}}
	if dom := DominantTerminator(content); dom != "\n" && strings.Contains(old, "\n") {
		variants = append(variants, variant{withTerminator(old, dom), withTerminator(new, dom)})
	}
	variants = append(variants, variant{toLF(old), toLF(new)})

	tried := make(map[string]bool, len(variants))
	for i, v := range variants {
		if tried[v.old] {
			continue
		}
		tried[v.old] = true
		n := bytes.Count(content, []byte(v.old))
		if n == 0 {
			continue
		}
		if n > 1 && !replaceAll {
			return nil, 0, false, multipleOccurrences(content, v.old, n)
		}
		if !replaceAll {
			n = 1
		}
		return bytes.Replace(content, []byte(v.old), []byte(v.new), n), n, i > 0, nil
	}
	return nil, 0, false, notFound(content, old)
}

// toLF turns CRLF and lone CR into LF.
func toLF(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// withTerminator converts every line terminator of s to t.
func withTerminator(s, t string) string {
	return strings.ReplaceAll(toLF(s), "\n", t)
}

// maxReportedHits is how many hits multiple_occurrences reports lines for.
const maxReportedHits = 5

func multipleOccurrences(content []byte, old string, n int) *backend.Error {
	var lines []string
	line, scanned := 1, 0
	for pos := 0; len(lines) < maxReportedHits; pos += len(old) {
		i := bytes.Index(content[pos:], []byte(old))
		if i < 0 {
			break
		}
		pos += i
		line += terminatorsIn(content, scanned, pos)
		scanned = pos
		if s := strconv.Itoa(line); len(lines) == 0 || lines[len(lines)-1] != s {
			lines = append(lines, s)
		}
	}
	at := strings.Join(lines, ", ")
	return backend.Errorf(backend.CodeMultipleOccurrences, "",
		"old_string occurs %d times (first hits at lines %s); include more surrounding lines to make it unique, or set replace_all=true to replace every occurrence", n, at).
		WithDetail("count", strconv.Itoa(n)).
		WithDetail("lines", strings.Join(lines, ","))
}

// terminatorsIn counts the line terminators that end in content[from:to]
// (a CR whose LF lies at or after to counts with the CRLF, not here).
func terminatorsIn(content []byte, from, to int) int {
	seg := content[from:to]
	n := bytes.Count(seg, []byte{'\n'})
	for i := 0; ; {
		j := bytes.IndexByte(seg[i:], '\r')
		if j < 0 {
			return n
		}
		i += j + 1
		if from+i >= len(content) || content[from+i] != '\n' {
			n++ // lone CR
		}
	}
}

// gutterPrefix and blankRun are compiled on first use, not at start-up:
// every box's agent links this package (docs/benchmarks-history.md, "A
// lean in-box agent").
var gutterPrefix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*\d+(\.\d+)?  `) })

var blankRun = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[ \t]+`) })

// notFound builds string_not_found with the first hint of docs/file-tools.md §4.4 step 6 that
// applies; details.hint names it (eof_newline, gutter, whitespace, reread).
func notFound(content []byte, old string) *backend.Error {
	e := backend.Errorf(backend.CodeStringNotFound, "", "old_string %s was not found in the file; ", backend.Quote(old))
	hint := "reread"
	stripped, hasNL := strings.CutSuffix(old, "\n")
	if hasNL {
		stripped = strings.TrimSuffix(stripped, "\r")
	}
	switch {
	case hasNL && utf8.RuneCountInString(old) > 1 && bytes.HasSuffix(content, []byte(stripped)):
		hint = "eof_newline"
		n := bytes.Count(content, []byte(stripped))
		e.Message += "it ends with a newline but the file does not end with one; without that final newline it occurs " +
			strconv.Itoa(n) + " time(s)"
		e.WithDetail("stripped_count", strconv.Itoa(n))
	case gutterPrefix().MatchString(old):
		hint = "gutter"
		e.Message += "it starts with a line-number prefix from read_file output, which is not file content; remove the prefix"
	case strings.Contains(
		blankRun().ReplaceAllString(toLF(string(content)), " "),
		blankRun().ReplaceAllString(toLF(old), " ")):
		hint = "whitespace"
		e.Message += "the text exists with different indentation or spacing; copy the exact whitespace from read_file output"
	default:
		e.Message += "re-read the file with read_file and copy the exact text"
	}
	return e.WithDetail("hint", hint)
}
