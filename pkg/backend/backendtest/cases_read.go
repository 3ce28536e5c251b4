package backendtest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strconv"
	"strings"

	"github.com/plumbhq/plumb/pkg/backend"
)

// lsReadCases are docs/file-tools.md §7 rows 1–17 and 26–28: ls (§4.1) and read (§4.2).
func lsReadCases() []testCase {
	tree := map[string]string{"/a.txt": "a", "/d/b.txt": "bb", "/d/e/c.txt": "ccc"}
	five := "one\ntwo\nthree\nfour\nfive"
	three := "l1\nl2\nl3\n"
	return []testCase{
		{name: "B01_ls_root", run: func(e *env) {
			e.seed(tree)
			got := e.ls("/")
			e.wantList("ls /", pathsOf(got), []string{"/a.txt", "/d/"})
			for _, fi := range got {
				switch fi.Path {
				case "/a.txt":
					if fi.Kind != backend.KindFile || fi.IsDir || fi.Size != 1 {
						e.t.Errorf("ls /: /a.txt = %+v, want a 1-byte file", fi)
					}
				case "/d/":
					if fi.Kind != backend.KindDir || !fi.IsDir || fi.Size != 0 {
						e.t.Errorf("ls /: /d/ = %+v, want a dir of size 0", fi)
					}
				}
			}
		}},
		{name: "B02_ls_subdir", run: func(e *env) {
			e.seed(tree)
			e.wantList("ls /d/", e.lsPaths("/d/"), []string{"/d/b.txt", "/d/e/"})
			e.wantList("ls /d", e.lsPaths("/d"), []string{"/d/b.txt", "/d/e/"})
		}},
		{name: "B03_ls_errors", run: func(e *env) {
			e.seed(tree)
			_, err := e.b.Ls(e.ctx, e.p("/missing"))
			e.wantCode("ls /missing", err, backend.CodeFileNotFound)
			_, err = e.b.Ls(e.ctx, e.p("/a.txt"))
			e.wantCode("ls /a.txt", err, backend.CodeNotADirectory)
		}},
		{name: "B04_ls_empty_and_dotfile", run: func(e *env) {
			res, err := e.b.Ls(e.ctx, e.p("/"))
			if e.noErr("ls / (empty)", err) {
				var kept []string
				for _, fi := range res.Entries {
					if !e.ignored(fi.Path) {
						kept = append(kept, fi.Path)
					}
				}
				e.wantList("ls / (empty)", kept, nil)
				if res.Truncated {
					e.t.Errorf("ls / (empty): truncated")
				}
			}
			e.seed(map[string]string{"/.env": "K=V\n"})
			e.wantList("ls /", e.lsPaths("/"), []string{"/.env"})
		}},
		{name: "B05_ls_size_in_bytes", run: func(e *env) {
			e.seed(map[string]string{"/u.txt": "é"})
			fi, ok := e.entry("/", "/u.txt")
			if !ok || fi.Size != 2 {
				e.t.Errorf("ls /: /u.txt = %+v (found %v), want size 2", fi, ok)
			}
		}},
		{name: "B06_read_first_page", run: func(e *env) {
			e.seed(map[string]string{"/n.txt": five})
			r := e.mustRead("/n.txt", 0, 2)
			e.window("read offset 0 limit 2", r, "one\ntwo", 1, 2, intp(5), intp(2))
			if r.Size != int64(len(five)) {
				e.t.Errorf("size %d, want %d", r.Size, len(five))
			}
		}},
		{name: "B07_read_second_page", run: func(e *env) {
			e.seed(map[string]string{"/n.txt": five})
			r := e.mustRead("/n.txt", 2, 2)
			e.window("read offset 2 limit 2", r, "three\nfour", 3, 4, intp(5), intp(4))
		}},
		{name: "B08_read_to_eof", run: func(e *env) {
			e.seed(map[string]string{"/t.txt": three})
			r := e.mustRead("/t.txt", 0, 10)
			e.window("read limit 10", r, "l1\nl2\nl3", 1, 3, intp(3), nil)
		}},
		{name: "B09_read_negative_offset", run: func(e *env) {
			e.seed(map[string]string{"/t.txt": three})
			r := e.mustRead("/t.txt", -1, 10)
			e.window("read offset -1", r, "l1\nl2\nl3", 1, 3, intp(3), nil)
			if !r.OffsetClamped {
				e.t.Errorf("read offset -1: offset_clamped not set")
			}
		}},
		{name: "B10_read_offset_out_of_range", run: func(e *env) {
			e.seed(map[string]string{"/t.txt": three})
			for _, off := range []int{3, 10} {
				_, err := e.read("/t.txt", off, 10)
				be := e.wantCode(fmt.Sprintf("read offset %d", off), err, backend.CodeOffsetOutOfRange)
				e.wantDetail(fmt.Sprintf("read offset %d", off), be, "total_lines", "3")
			}
		}},
		{name: "B11_read_limit_zero", run: func(e *env) {
			e.seed(map[string]string{"/t.txt": three})
			r := e.mustRead("/t.txt", 0, 0)
			if !r.NoLinesRequested || r.Content != "" || r.EmptyFile || r.StartLine != 0 {
				e.t.Errorf("read limit 0 = %+v, want no_lines_requested and no content", r)
			}
		}},
		{name: "B12_read_empty_file", run: func(e *env) {
			e.seed(map[string]string{"/empty.txt": ""})
			for _, lim := range []int{0, 5} {
				r := e.mustRead("/empty.txt", 0, lim)
				if !r.EmptyFile || r.NoLinesRequested || r.Content != "" || r.StartLine != 0 || r.Size != 0 {
					e.t.Errorf("read empty file limit %d = %+v, want empty_file only", lim, r)
				}
			}
		}},
		{name: "B13_read_blank_lines", run: func(e *env) {
			e.seed(map[string]string{"/b.txt": "\n\n"})
			r := e.mustRead("/b.txt", 0, 10)
			e.window("read \\n\\n", r, "\n", 1, 2, intp(2), nil)
		}},
		{name: "B14_read_line_endings", run: func(e *env) {
			for i, tt := range []struct {
				content, want string
				total         int
				ending        backend.LineEnding
			}{
				{"a\r\nb\r\n", "a\nb", 2, backend.LineEndingCRLF},
				{"a\rb\rc", "a\nb\nc", 3, backend.LineEndingCR},
				{"a\nb\r\nc", "a\nb\nc", 3, backend.LineEndingMixed},
			} {
				path := fmt.Sprintf("/le%d.txt", i)
				e.seed(map[string]string{path: tt.content})
				r := e.mustRead(path, 0, 10)
				e.window(fmt.Sprintf("read %q", tt.content), r, tt.want, 1, tt.total, intp(tt.total), nil)
				if r.LineEnding != tt.ending {
					e.t.Errorf("read %q: line_ending %q, want %q", tt.content, r.LineEnding, tt.ending)
				}
			}
		}},
		{name: "B15_read_final_newline", run: func(e *env) {
			e.seed(map[string]string{"/x1.txt": "x\ny", "/x2.txt": "x\ny\n"})
			for _, path := range []string{"/x1.txt", "/x2.txt"} {
				r := e.mustRead(path, 0, 10)
				e.window("read "+path, r, "x\ny", 1, 2, intp(2), nil)
			}
		}},
		{name: "B16_read_dir_and_missing", run: func(e *env) {
			e.seed(tree)
			_, err := e.read("/d", 0, 10)
			e.wantCode("read /d", err, backend.CodeIsDirectory)
			_, err = e.read("/missing.txt", 0, 10)
			e.wantCode("read /missing.txt", err, backend.CodeFileNotFound)
		}},
		{name: "B17_read_default_limit", run: func(e *env) {
			var b strings.Builder
			for i := 1; i <= 2500; i++ {
				fmt.Fprintf(&b, "line %d\n", i)
			}
			e.seed(map[string]string{"/big.txt": b.String()})
			r := e.mustRead("/big.txt", 0, backend.DefaultReadLimit)
			if r.StartLine != 1 || r.EndLine != 2000 || !eqIntPtr(r.NextOffset, intp(2000)) || !eqIntPtr(r.TotalLines, intp(2500)) {
				e.t.Errorf("read 2500 lines: lines %d–%d next %s total %s, want 1–2000 next 2000 total 2500",
					r.StartLine, r.EndLine, fmtIntPtr(r.NextOffset), fmtIntPtr(r.TotalLines))
			}
			if !strings.HasSuffix(r.Content, "\nline 2000") {
				e.t.Errorf("read 2500 lines: content ends %q", clip(r.Content))
			}
		}},
		{name: "B26_read_png", caps: []Capability{Media}, run: func(e *env) {
			img := pngBytes(10 << 10)
			e.seedBytes(map[string][]byte{"/img.png": img})
			r := e.mustRead("/img.png", 5, 1)
			if r.Encoding != backend.EncodingBase64 || r.MimeType != "image/png" {
				e.t.Fatalf("read png: encoding %q mime %q, want base64 image/png", r.Encoding, r.MimeType)
			}
			if got, err := base64.StdEncoding.DecodeString(r.Content); err != nil || !bytes.Equal(got, img) {
				e.t.Errorf("read png: content does not decode to the file (%v)", err)
			}
			if r.StartLine != 0 || r.EndLine != 0 || r.NextOffset != nil || r.TotalLines != nil {
				e.t.Errorf("read png: pagination fields set: %d–%d next %s total %s",
					r.StartLine, r.EndLine, fmtIntPtr(r.NextOffset), fmtIntPtr(r.TotalLines))
			}
		}},
		{name: "B27_read_media_cap", caps: []Capability{Media}, run: func(e *env) {
			pdf := append([]byte("%PDF-1.4\n"), bytes.Repeat([]byte("0123456789abcdef\n"), (6<<20)/17+1)...)
			pdf = pdf[:6<<20]
			e.seedBytes(map[string][]byte{"/doc.pdf": pdf, "/fake.png": []byte("just text\n")})
			_, err := e.read("/doc.pdf", 0, 10)
			be := e.wantCode("read 6 MiB pdf", err, backend.CodeTooLarge)
			e.wantDetail("read 6 MiB pdf", be, "size", strconv.Itoa(6<<20))
			if be != nil && be.Details["limit"] == "" {
				e.t.Errorf("read 6 MiB pdf: no limit detail in %v", be)
			}
			r := e.mustRead("/fake.png", 0, 10)
			e.window("read text .png", r, "just text", 1, 1, intp(1), nil)
		}},
		{name: "B28_read_binary", run: func(e *env) {
			bin := []byte("ELF\x00\x01\x02binary\x00data")
			e.seedBytes(map[string][]byte{"/prog.bin": bin})
			r, err := e.read("/prog.bin", 0, 10)
			be := e.wantCode("read .bin", err, backend.CodeNotText)
			e.wantDetail("read .bin", be, "size", strconv.Itoa(len(bin)))
			if r.Encoding == backend.EncodingBase64 || r.Content != "" {
				e.t.Errorf("read .bin returned content %q (%s)", clip(r.Content), r.Encoding)
			}
		}},
	}
}

func pathsOf(fis []backend.FileInfo) []string {
	var out []string
	for _, fi := range fis {
		out = append(out, fi.Path)
	}
	return out
}

// pngBytes encodes a valid PNG of about n bytes (noise compresses badly).
func pngBytes(n int) []byte {
	side := 8
	for {
		img := image.NewNRGBA(image.Rect(0, 0, side, side))
		seed := uint32(1)
		for i := range img.Pix {
			seed = seed*1664525 + 1013904223
			img.Pix[i] = uint8(seed >> 24)
		}
		img.Set(0, 0, color.NRGBA{255, 0, 0, 255})
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			panic(err)
		}
		if b.Len() >= n {
			return b.Bytes()
		}
		side += 4
	}
}
