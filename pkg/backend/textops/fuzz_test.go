package textops

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

func FuzzReplace(f *testing.F) {
	f.Add([]byte("foo bar foo"), "foo", "qux", false)
	f.Add([]byte("one\r\ntwo\r\n"), "one\ntwo", "1\n2", false)
	f.Fuzz(func(t *testing.T, content []byte, old, new string, all bool) {
		orig := bytes.Clone(content)
		out, n, adapted, err := Replace(content, old, new, all)
		if !bytes.Equal(content, orig) {
			t.Fatal("Replace modified its input")
		}
		if err != nil {
			if out != nil || n != 0 {
				t.Fatalf("error %v with output %q, %d", err, out, n)
			}
			switch err.Code {
			case backend.CodeInvalidArgument:
				if old != "" && old != new {
					t.Fatalf("invalid_argument for old %q new %q", old, new)
				}
			case backend.CodeStringNotFound:
				if bytes.Contains(content, []byte(old)) {
					t.Fatalf("string_not_found but %q is in %q", old, content)
				}
			case backend.CodeMultipleOccurrences:
				if all {
					t.Fatal("multiple_occurrences with replaceAll")
				}
			default:
				t.Fatalf("unexpected code %s", err.Code)
			}
			return
		}
		if n < 1 || (!all && n != 1) {
			t.Fatalf("occurrences = %d (all=%v)", n, all)
		}
		if !adapted {
			limit := 1
			if all {
				limit = -1
			}
			if want := bytes.Replace(content, []byte(old), []byte(new), limit); !bytes.Equal(out, want) {
				t.Fatalf("Replace = %q, want %q", out, want)
			}
		}
		// Plain ASCII edits of LF-only text behave exactly like strings.Replace.
		if isPlainASCII(old) && isPlainASCII(new) && !bytes.ContainsRune(content, '\r') {
			if adapted {
				t.Fatal("adapted on an LF-only file with CR-free strings")
			}
			limit := 1
			if all {
				limit = -1
			}
			if want := strings.Replace(string(content), old, new, limit); string(out) != want {
				t.Fatalf("Replace = %q, strings.Replace = %q", out, want)
			}
			if all && n != strings.Count(string(content), old) {
				t.Fatalf("occurrences = %d, strings.Count = %d", n, strings.Count(string(content), old))
			}
		}
	})
}

func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || s[i] == '\r' {
			return false
		}
	}
	return true
}

func FuzzSliceLines(f *testing.F) {
	f.Add([]byte("one\ntwo\nthree"), 0, 2, uint16(100))
	f.Add([]byte("a\r\nb\rc\n"), -1, 5, uint16(3))
	f.Fuzz(func(t *testing.T, content []byte, offset, limit int, budget uint16) {
		b := int(budget%256) + 1
		lines := SplitLines(string(content))
		for _, countTotal := range []bool{true, false} {
			res, err := sliceLines(bytes.NewReader(content), offset, limit, countTotal, b)
			if limit <= 0 {
				if err != nil || !res.NoLinesRequested || res.StartLine != 0 || res.Content != "" {
					t.Fatalf("limit %d: %+v, %v", limit, res, err)
				}
				continue
			}
			off := max(offset, 0)
			if res.OffsetClamped != (offset < 0) {
				t.Fatalf("OffsetClamped = %v for offset %d", res.OffsetClamped, offset)
			}
			if off >= len(lines) {
				var be *backend.Error
				if !errors.As(err, &be) || be.Code != backend.CodeOffsetOutOfRange || be.Details["total_lines"] != itoa(len(lines)) {
					t.Fatalf("offset %d of %d lines: %v", off, len(lines), err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.NoLinesRequested || res.EmptyFile || res.Encoding != backend.EncodingUTF8 {
				t.Fatalf("flags %+v", res)
			}
			if res.StartLine != off+1 || res.EndLine < res.StartLine || res.EndLine > len(lines) {
				t.Fatalf("window %d..%d of %d lines at offset %d", res.StartLine, res.EndLine, len(lines), off)
			}
			if res.EndLine-res.StartLine+1 > limit {
				t.Fatalf("%d lines for limit %d", res.EndLine-res.StartLine+1, limit)
			}
			if res.TotalLines != nil && *res.TotalLines != len(lines) {
				t.Fatalf("total %d, want %d", *res.TotalLines, len(lines))
			}
			if countTotal && res.TotalLines == nil {
				t.Fatal("total unknown with countTotal")
			}
			more := res.EndLine < len(lines)
			if more != (res.NextOffset != nil) || (more && *res.NextOffset != res.EndLine) {
				t.Fatalf("next %v with end %d of %d", res.NextOffset, res.EndLine, len(lines))
			}
			if strings.ContainsRune(res.Content, '\r') || !utf8.ValidString(res.Content) {
				t.Fatalf("content %q", res.Content)
			}
			var want []string
			invalid := false
			for _, l := range lines[res.StartLine-1 : res.EndLine] {
				v, inv := appendValid(nil, []byte(l))
				want = append(want, string(v))
				invalid = invalid || inv
			}
			joined := strings.Join(want, "\n")
			if res.PartialLine {
				if res.EndLine != res.StartLine || len(res.Content) > b || !strings.HasPrefix(joined, res.Content) || len(joined) <= b {
					t.Fatalf("partial %q of %q, budget %d", res.Content, joined, b)
				}
				continue
			}
			if res.Content != joined || res.InvalidUTF8 != invalid {
				t.Fatalf("content %q (invalid %v), want %q (%v)", res.Content, res.InvalidUTF8, joined, invalid)
			}
			if res.EndLine > res.StartLine && len(res.Content) > b {
				t.Fatalf("content %d bytes over budget %d", len(res.Content), b)
			}
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func FuzzGlob(f *testing.F) {
	f.Add("**/*.py", "sub/nested/c.py")
	f.Add("{a,b}/[!x]?.{py,md}", "a/yz.md")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		g, err := CompileGlob(pattern)
		if err != nil {
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.CodeInvalidPattern {
				t.Fatalf("CompileGlob(%q) error %v is not invalid_pattern", pattern, err)
			}
			return
		}
		var segs []string
		for _, s := range strings.Split(path, "/") {
			if s != "" {
				segs = append(segs, s)
			}
		}
		if len(segs) == 0 {
			return
		}
		rel := strings.Join(segs, "/")
		match := g.Match(rel)
		if match {
			for i := range segs {
				if !g.CanDescend(strings.Join(segs[:i], "/")) {
					t.Fatalf("%q matches %q but CanDescend(%q) is false", pattern, rel, strings.Join(segs[:i], "/"))
				}
			}
		}
		var alts []string
		for _, a := range g.Alternatives() {
			alts = append(alts, a.String())
		}
		if g2, err := CompileGlob(JoinAlternatives(alts)); err == nil && g2.Match(rel) != match {
			t.Fatalf("canonical %q disagrees with %q on %q", alts, pattern, rel)
		}
		if len(segs) > 1 {
			rs := g.Residuals(segs[:1])
			got := false
			if len(rs) > 0 {
				if rg, err := CompileGlob(JoinAlternatives(rs)); err == nil {
					got = rg.Match(strings.Join(segs[1:], "/"))
				} else {
					got = match // over the expansion cap: nothing to compare
				}
			}
			if got != match {
				t.Fatalf("pattern %q on %q: residuals %q give %v, want %v", pattern, rel, rs, got, match)
			}
		}
	})
}
