package textops

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// window is the comparable part of a ReadResult text window.
type window struct {
	content          string
	start, end       int
	total, next      int // -1 = nil
	clamped, partial bool
	invalid          bool
	ending           backend.LineEnding
}

func windowOf(r backend.ReadResult) window {
	w := window{content: r.Content, start: r.StartLine, end: r.EndLine, total: -1, next: -1,
		clamped: r.OffsetClamped, partial: r.PartialLine, invalid: r.InvalidUTF8, ending: r.LineEnding}
	if r.TotalLines != nil {
		w.total = *r.TotalLines
	}
	if r.NextOffset != nil {
		w.next = *r.NextOffset
	}
	return w
}

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestSliceLines(t *testing.T) {
	five := "one\ntwo\nthree\nfour\nfive"
	lf := backend.LineEndingLF
	tests := []struct {
		name          string
		in            string
		offset, limit int
		countTotal    bool
		budget        int
		want          window
	}{
		{"6 first two", five, 0, 2, true, 0, window{content: "one\ntwo", start: 1, end: 2, total: 5, next: 2, ending: lf}},
		{"7 middle two", five, 2, 2, true, 0, window{content: "three\nfour", start: 3, end: 4, total: 5, next: 4, ending: lf}},
		{"8 limit past EOF", "a\nb\nc", 0, 10, false, 0, window{content: "a\nb\nc", start: 1, end: 3, total: 3, next: -1, ending: lf}},
		{"9 negative offset", "a\nb\nc", -1, 10, false, 0, window{content: "a\nb\nc", start: 1, end: 3, total: 3, next: -1, clamped: true, ending: lf}},
		{"13 two blank lines", "\n\n", 0, 10, false, 0, window{content: "\n", start: 1, end: 2, total: 2, next: -1, ending: lf}},
		{"14 CRLF", "a\r\nb\r\n", 0, 10, false, 0, window{content: "a\nb", start: 1, end: 2, total: 2, next: -1, ending: backend.LineEndingCRLF}},
		{"14 CR", "a\rb\rc", 0, 10, false, 0, window{content: "a\nb\nc", start: 1, end: 3, total: 3, next: -1, ending: backend.LineEndingCR}},
		{"14 mixed", "a\nb\r\nc", 0, 10, false, 0, window{content: "a\nb\nc", start: 1, end: 3, total: 3, next: -1, ending: backend.LineEndingMixed}},
		{"15 no final LF", "x\ny", 0, 10, false, 0, window{content: "x\ny", start: 1, end: 2, total: 2, next: -1, ending: lf}},
		{"15 final LF", "x\ny\n", 0, 10, false, 0, window{content: "x\ny", start: 1, end: 2, total: 2, next: -1, ending: lf}},
		{"17 default limit", numbered(2500), 0, 2000, true, 0, window{content: strings.TrimSuffix(numbered(2000), "\n"), start: 1, end: 2000, total: 2500, next: 2000, ending: lf}},
		{"total unknown without countTotal", five, 0, 2, false, 0, window{content: "one\ntwo", start: 1, end: 2, total: -1, next: 2, ending: lf}},
		{"exact limit at EOF", "a\nb\n", 0, 2, false, 0, window{content: "a\nb", start: 1, end: 2, total: 2, next: -1, ending: lf}},
		{"last line only", five, 4, 1, false, 0, window{content: "five", start: 5, end: 5, total: 5, next: -1, ending: lf}},
		{"H6 invalid UTF-8", "ok\n\xff bad\nok2\n", 0, 10, false, 0, window{content: "ok\n\uFFFD bad\nok2", start: 1, end: 3, total: 3, next: -1, invalid: true, ending: lf}},
		{"invalid outside window", "ok\n\xff bad\nok2\n", 2, 10, false, 0, window{content: "ok2", start: 3, end: 3, total: 3, next: -1, ending: lf}},
		{"BOM hidden", "\uFEFFa\nb", 0, 10, false, 0, window{content: "a\nb", start: 1, end: 2, total: 2, next: -1, ending: lf}},
		{"BOM only", "\uFEFF", 0, 10, false, 0, window{content: "", start: 1, end: 1, total: 1, next: -1, ending: backend.LineEndingNone}},
		// Budget cases use a 10-byte budget.
		{"budget stops before a line", "aaaa\nbbbb\ncccc\n", 0, 10, true, 10, window{content: "aaaa\nbbbb", start: 1, end: 2, total: 3, next: 2, ending: lf}},
		{"budget exact fit", "aaaa\nbbbbb\nc\nd", 0, 10, false, 10, window{content: "aaaa\nbbbbb", start: 1, end: 2, total: -1, next: 2, ending: lf}},
		{"budget dropped last line counted", "aaaa\nbbbbbbbbbbbb", 0, 10, false, 10, window{content: "aaaa", start: 1, end: 1, total: 2, next: 1, ending: lf}},
		{"partial first line, more lines", "abcdefghijklmno\nz", 0, 10, true, 10, window{content: "abcdefghij", start: 1, end: 1, total: 2, next: 1, partial: true, ending: lf}},
		{"partial last line", "z\nabcdefghijklmno", 1, 10, false, 10, window{content: "abcdefghij", start: 2, end: 2, total: 2, next: -1, partial: true, ending: lf}},
		{"partial cut at rune boundary", "ééééééé", 0, 10, false, 10, window{content: "ééééé", start: 1, end: 1, total: 1, next: -1, partial: true, ending: backend.LineEndingNone}},
		{"partial with invalid beyond cut", "abcdefghijkl\xff", 0, 10, false, 10, window{content: "abcdefghij", start: 1, end: 1, total: 1, next: -1, partial: true, ending: backend.LineEndingNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := tt.budget
			if budget == 0 {
				budget = backend.ReadByteBudget
			}
			res, err := sliceLines(strings.NewReader(tt.in), tt.offset, tt.limit, tt.countTotal, budget)
			if err != nil {
				t.Fatal(err)
			}
			if got := windowOf(res); got != tt.want {
				t.Errorf("window\n got %+v\nwant %+v", got, tt.want)
			}
			if res.Encoding != backend.EncodingUTF8 || res.NoLinesRequested || res.EmptyFile {
				t.Errorf("flags: %+v", res)
			}
		})
	}
}

func TestSliceLinesErrors(t *testing.T) {
	tests := []struct {
		name          string
		in            string
		offset, limit int
		wantTotal     string
	}{
		{"10 offset equals total", "a\nb\nc", 3, 10, "3"},
		{"10 offset past total", "a\nb\nc\n", 10, 10, "3"},
		{"empty input", "", 0, 5, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SliceLines(strings.NewReader(tt.in), tt.offset, tt.limit, false)
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.CodeOffsetOutOfRange {
				t.Fatalf("err = %v, want offset_out_of_range", err)
			}
			if be.Details["total_lines"] != tt.wantTotal || be.Details["offset"] != fmt.Sprint(tt.offset) {
				t.Errorf("details = %v, want total_lines %s", be.Details, tt.wantTotal)
			}
		})
	}
	t.Run("11 limit 0 reads nothing", func(t *testing.T) {
		res, err := SliceLines(failingReader{}, 5, 0, true)
		if err != nil || !res.NoLinesRequested || res.StartLine != 0 || res.OffsetClamped {
			t.Errorf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("reader error", func(t *testing.T) {
		_, err := SliceLines(failingReader{}, 0, 5, true)
		if !errors.Is(err, errBroken) {
			t.Errorf("err = %v, want %v", err, errBroken)
		}
	})
}

var errBroken = errors.New("broken disk")

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errBroken }

// genReader produces n bytes of a repeating pattern without holding them.
type genReader struct {
	pattern []byte
	n, pos  int
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.pos >= g.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && g.pos < g.n {
		p[k] = g.pattern[g.pos%len(g.pattern)]
		k++
		g.pos++
	}
	return k, nil
}

// TestSliceLinesH7 reads a window from the middle of a 50 MiB,
// 1,000,000-line stream and the head of a 50 MiB single line, and checks
// that memory stays O(window).
func TestSliceLinesH7(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 MiB")
	}
	line := []byte(strings.Repeat("x", 51) + "\n") // 52 bytes × 1,000,000 ≈ 50 MiB
	tests := []struct {
		name  string
		r     io.Reader
		check func(t *testing.T, res backend.ReadResult)
	}{
		{"million lines", &genReader{pattern: line, n: len(line) * 1_000_000}, func(t *testing.T, res backend.ReadResult) {
			if res.StartLine != 500001 || res.EndLine != 500010 || *res.TotalLines != 1_000_000 || *res.NextOffset != 500010 {
				t.Errorf("window %d..%d total %v next %v", res.StartLine, res.EndLine, *res.TotalLines, *res.NextOffset)
			}
		}},
		{"single line", &genReader{pattern: []byte("ab"), n: 50 << 20}, func(t *testing.T, res backend.ReadResult) {
			if !res.PartialLine || len(res.Content) != backend.ReadByteBudget || res.NextOffset != nil || *res.TotalLines != 1 {
				t.Errorf("partial %v len %d next %v", res.PartialLine, len(res.Content), res.NextOffset)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offset := 0
			if tt.name == "million lines" {
				offset = 500000
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res, err := SliceLines(tt.r, offset, 10, true)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, res)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
				t.Errorf("allocated %d bytes, want < 8 MiB", grew)
			}
		})
	}
}

func TestReadContent(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 1, 2}, 3000)...)
	pdf := append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte{0}, 100)...)
	tests := []struct {
		name     string
		path     string
		content  []byte
		offset   int
		limit    int
		mediaCap int64
		wantCode backend.Code
		check    func(t *testing.T, r backend.ReadResult)
	}{
		{"12 empty file limit 5", "/e.txt", nil, 0, 5, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if !r.EmptyFile || r.Size != 0 || r.StartLine != 0 {
				t.Errorf("%+v", r)
			}
		}},
		{"12 empty file limit 0", "/e.txt", []byte{}, 0, 0, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if !r.EmptyFile || r.NoLinesRequested {
				t.Errorf("%+v", r)
			}
		}},
		{"11 limit 0", "/n.txt", []byte("abc"), 0, 0, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if !r.NoLinesRequested || r.EmptyFile || r.Content != "" || r.Size != 3 {
				t.Errorf("%+v", r)
			}
		}},
		{"whitespace-only is text", "/w.txt", []byte("  \n"), 0, 5, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if r.EmptyFile || r.Content != "  " {
				t.Errorf("%+v", r)
			}
		}},
		{"26 png", "/img.png", png, 5, 1, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if r.Encoding != backend.EncodingBase64 || r.MimeType != "image/png" || r.Content != base64.StdEncoding.EncodeToString(png) || r.NextOffset != nil || r.StartLine != 0 {
				t.Errorf("encoding %q mime %q next %v", r.Encoding, r.MimeType, r.NextOffset)
			}
		}},
		{"27 media over cap", "/doc.pdf", pdf, 0, 5, 50, backend.CodeTooLarge, nil},
		{"27 png holding text", "/fake.png", []byte("just text\n"), 0, 5, backend.MediaCap, "", func(t *testing.T, r backend.ReadResult) {
			if r.Encoding != backend.EncodingUTF8 || r.Content != "just text" {
				t.Errorf("%+v", r)
			}
		}},
		{"28 binary", "/x.bin", []byte("ab\x00cd"), 0, 5, backend.MediaCap, backend.CodeNotText, nil},
		{"73 invalid bytes", "/x.dat", []byte("\xff\xfe"), 0, 5, backend.MediaCap, backend.CodeNotText, nil},
		{"binary before limit 0", "/x.bin", []byte("\x00"), 0, 0, backend.MediaCap, backend.CodeNotText, nil},
		{"10 offset out of range", "/a.txt", []byte("a\nb\nc"), 3, 5, backend.MediaCap, backend.CodeOffsetOutOfRange, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ReadContent(tt.path, tt.content, tt.offset, tt.limit, tt.mediaCap)
			if tt.wantCode != "" {
				var be *backend.Error
				if !errors.As(err, &be) || be.Code != tt.wantCode || be.Path != tt.path {
					t.Fatalf("err = %#v, want %s with path %s", err, tt.wantCode, tt.path)
				}
				if tt.wantCode == backend.CodeNotText && be.Details["size"] != fmt.Sprint(len(tt.content)) {
					t.Errorf("details = %v", be.Details)
				}
				if tt.wantCode == backend.CodeTooLarge && (be.Details["size"] != fmt.Sprint(len(tt.content)) || be.Details["limit"] != fmt.Sprint(tt.mediaCap)) {
					t.Errorf("details = %v", be.Details)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Path != tt.path || r.Size != int64(len(tt.content)) {
				t.Errorf("path %q size %d", r.Path, r.Size)
			}
			tt.check(t, r)
		})
	}
}

func TestIsBinary(t *testing.T) {
	tests := []struct {
		name  string
		head  []byte
		whole bool
		want  bool
	}{
		{"text", []byte("hello\n"), true, false},
		{"NUL", []byte("a\x00b"), true, true},
		{"10% invalid is text", append([]byte("\xff"), bytes.Repeat([]byte("a"), 9)...), true, false},
		{"over 10% invalid", append([]byte("\xff\xff"), bytes.Repeat([]byte("a"), 9)...), true, true},
		{"cut char at window end not invalid", append(bytes.Repeat([]byte("a"), 9), 0xe2, 0x82), false, false},
		{"cut char at file end invalid", append(bytes.Repeat([]byte("a"), 9), 0xe2, 0x82), true, true},
		{"NUL beyond window ignored", append(bytes.Repeat([]byte("a"), backend.SniffWindow), 0), false, false},
		{"utf-16 BOM", []byte("\xff\xfeh\x00i\x00"), true, true},
		{"H6 below threshold", []byte("ok\n\xff bad\nok2\n"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsBinary(tt.head, tt.whole); got != tt.want {
				t.Errorf("IsBinary = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMediaType(t *testing.T) {
	tests := []struct {
		name, file, head, want string
	}{
		{"png", "/a.png", "\x89PNG\r\n\x1a\n", "image/png"},
		{"png upper ext", "/A.PNG", "\x89PNG\r\n\x1a\n", "image/png"},
		{"jpg", "/a.jpg", "\xff\xd8\xff\xe0", "image/jpeg"},
		{"jpeg", "/a.jpeg", "\xff\xd8\xff\xe0", "image/jpeg"},
		{"gif", "/a.gif", "GIF89a", "image/gif"},
		{"webp", "/a.webp", "RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"riff not webp", "/a.webp", "RIFF\x00\x00\x00\x00WAVE", ""},
		{"pdf", "/a.pdf", "%PDF-1.4", "application/pdf"},
		{"png ext jpeg signature", "/a.png", "\xff\xd8\xff\xe0", ""},
		{"signature without extension", "/a.bin", "\x89PNG", ""},
		{"text in png", "/a.png", "hello", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MediaType(tt.file, []byte(tt.head)); got != tt.want {
				t.Errorf("MediaType = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckText(t *testing.T) {
	tests := []struct {
		name, file, content string
		wantMIME            string // "" = text
	}{
		{"text", "/a.txt", "hello\n", ""},
		{"empty", "/a.txt", "", ""},
		{"45 binary", "/a.bin", "a\x00b", "application/octet-stream"},
		{"media", "/a.png", "\x89PNG\r\n\x1a\nrest", "image/png"},
		{"png holding text", "/a.png", "text", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckText(tt.file, []byte(tt.content))
			if tt.wantMIME == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || err.Code != backend.CodeNotText || err.Details["mime_type"] != tt.wantMIME {
				t.Fatalf("err = %#v, want not_text %s", err, tt.wantMIME)
			}
		})
	}
}
