package textops

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"

	"github.com/plumbhq/plumb/pkg/backend"
)

// SliceLines implements docs/file-tools.md §4.2 steps 5–9 over a stream: it returns a text
// window of limit lines starting at the 0-based line offset. r must be
// positioned at the start of the file (a BOM there is hidden).
//
//   - limit ≤ 0 → NoLinesRequested, and r is not read.
//   - offset < 0 → offset 0 and OffsetClamped.
//   - no line at offset → offset_out_of_range with details offset and
//     total_lines.
//   - lines are collected until limit, or until the content would exceed
//     ReadByteBudget bytes; the first line is always taken, cut at a UTF-8
//     boundary with PartialLine when it alone exceeds the budget.
//   - TotalLines is set when EOF was reached, or when countTotal is set
//     (the caller passes size ≤ TotalLinesCountMax) by scanning to EOF.
//   - NextOffset == EndLine while lines remain.
//
// Invalid UTF-8 in the window is shown as U+FFFD with InvalidUTF8 set.
// Memory is O(window) whatever the file and line sizes. The result's Path
// and Size are left for the caller; errors from r are returned as is.
func SliceLines(r io.Reader, offset, limit int, countTotal bool) (backend.ReadResult, error) {
	return sliceLines(r, offset, limit, countTotal, backend.ReadByteBudget)
}

func sliceLines(r io.Reader, offset, limit int, countTotal bool, budget int) (backend.ReadResult, error) {
	res := backend.ReadResult{Encoding: backend.EncodingUTF8}
	if limit <= 0 {
		res.NoLinesRequested = true
		return res, nil
	}
	if offset < 0 {
		offset = 0
		res.OffsetClamped = true
	}
	lr := newLineReader(bufio.NewReaderSize(r, scanBufSize))
	seen := 0 // lines consumed so far
	for seen < offset && lr.more() {
		lr.skipLine()
		seen++
	}
	if !lr.more() {
		if lr.err != nil {
			return res, lr.err
		}
		return res, offsetOutOfRange(offset, seen)
	}

	var buf []byte
	taken := 0
	dropped := false // a line was consumed but left out for the budget
	for taken < limit && lr.more() {
		lineStart := len(buf)
		if taken > 0 {
			buf = append(buf, '\n')
		}
		firstInvalid := -1 // offset in buf of the first U+FFFD we produced
		over := false
		for {
			p, done, _ := lr.piece()
			if !over {
				at := len(buf)
				var inv bool
				buf, inv = appendValid(buf, p)
				if inv && firstInvalid < 0 {
					firstInvalid = at + bytes.Index(buf[at:], []byte(replacementChar))
				}
				over = len(buf) > budget
			}
			if done {
				break
			}
		}
		seen++
		if over && taken > 0 {
			buf = buf[:lineStart]
			dropped = true
			break
		}
		if over {
			buf = buf[:cutAtRuneStart(buf, budget)]
			res.PartialLine = true
		}
		if firstInvalid >= 0 && firstInvalid < len(buf) {
			res.InvalidUTF8 = true
		}
		taken++
		if over {
			break
		}
	}
	if lr.err != nil {
		return res, lr.err
	}

	res.Content = string(buf)
	res.StartLine = offset + 1
	res.EndLine = offset + taken
	eof := !lr.more()
	remain := dropped || !eof
	switch {
	case eof:
		res.TotalLines = new(seen)
	case countTotal:
		res.TotalLines = new(seen + lr.countRest())
	}
	if lr.err != nil {
		return res, lr.err
	}
	if remain {
		res.NextOffset = new(res.EndLine)
	}
	res.LineEnding = lr.counts.class()
	return res, nil
}

func offsetOutOfRange(offset, total int) *backend.Error {
	valid := "the file has no lines"
	if total > 0 {
		valid = fmt.Sprintf("valid offsets are 0..%d", total-1)
	}
	return backend.Errorf(backend.CodeOffsetOutOfRange, "",
		"offset %d is out of range: the file has %d lines; %s", offset, total, valid).
		WithDetail("offset", strconv.Itoa(offset)).
		WithDetail("total_lines", strconv.Itoa(total))
}

// ReadContent implements all of docs/file-tools.md §4.2 after step 1 for a file held in
// memory (State and Store): the empty-file check, media (base64, or
// too_large above mediaCap), the binary sniff (not_text), then SliceLines.
// Errors carry p as their Path.
func ReadContent(p string, content []byte, offset, limit int, mediaCap int64) (backend.ReadResult, error) {
	size := int64(len(content))
	res := backend.ReadResult{Path: p, Size: size, Encoding: backend.EncodingUTF8}
	if size == 0 {
		res.EmptyFile = true
		res.LineEnding = backend.LineEndingNone
		return res, nil
	}
	if mime := MediaType(p, content); mime != "" {
		if size > mediaCap {
			return res, withPath(TooLargeError("media read", size, mediaCap), p)
		}
		res.Encoding = backend.EncodingBase64
		res.MimeType = mime
		res.Content = base64.StdEncoding.EncodeToString(content)
		return res, nil
	}
	head := content[:min(len(content), backend.SniffWindow)]
	if IsBinary(head, len(head) == len(content)) {
		return res, withPath(NotTextError(size, SniffMIME(head)), p)
	}
	w, err := SliceLines(bytes.NewReader(content), offset, limit, true)
	if be, ok := err.(*backend.Error); ok {
		return res, withPath(be, p)
	} else if err != nil {
		return res, err
	}
	w.Path, w.Size = p, size
	return w, nil
}

func withPath(e *backend.Error, p string) *backend.Error {
	e.Path = p
	return e
}

// NotTextError is the not_text error of read (docs/file-tools.md §4.2 step 4) and edit (§4.4
// step 3), with details size and mime_type.
func NotTextError(size int64, mime string) *backend.Error {
	return backend.Errorf(backend.CodeNotText, "",
		"the file is binary (%s, %d bytes), not text; inspect it with execute (file, xxd, pdftotext) if available", mime, size).
		WithDetail("size", strconv.FormatInt(size, 10)).
		WithDetail("mime_type", mime)
}

// TooLargeError is the too_large error for a size over a cap, with details
// size and limit. what names the capped operation ("media read", "write").
func TooLargeError(what string, size, limit int64) *backend.Error {
	return backend.Errorf(backend.CodeTooLarge, "",
		"%s: %d bytes is over the %d-byte limit", what, size, limit).
		WithDetail("size", strconv.FormatInt(size, 10)).
		WithDetail("limit", strconv.FormatInt(limit, 10))
}
