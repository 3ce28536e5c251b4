package textops

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"testing"
)

// sample builds a head: parts laid out at their offsets, zero-filled
// between, at least n bytes long.
func sample(n int, parts ...any) []byte {
	var b []byte
	for i := 0; i < len(parts); i += 2 {
		off, s := parts[i].(int), parts[i+1].(string)
		if len(b) < off+len(s) {
			b = append(b, make([]byte, off+len(s)-len(b))...)
		}
		copy(b[off:], s)
	}
	if len(b) < n {
		b = append(b, make([]byte, n-len(b))...)
	}
	return b
}

// box is an ISO base media ftyp box: size, "ftyp", major brand, minor
// version, compatible brands.
func box(major string, compatible ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+4*len(compatible)))
	b = append(b, "ftyp"+major+"\x00\x00\x02\x00"...)
	for _, c := range compatible {
		b = append(b, c...)
	}
	return append(b, "\x00\x00\x00\x08free"...)
}

// sniffCases are heads of each format SniffMIME knows, and what it says.
var sniffCases = []struct {
	name, want string
	head       []byte
}{
	{"png", "image/png", sample(32, 0, "\x89PNG\r\n\x1A\n\x00\x00\x00\rIHDR")},
	{"jpeg", "image/jpeg", sample(32, 0, "\xFF\xD8\xFF\xE0\x00\x10JFIF\x00")},
	{"gif87", "image/gif", sample(32, 0, "GIF87a\x01\x00")},
	{"gif89", "image/gif", sample(32, 0, "GIF89a\x01\x00")},
	{"webp", "image/webp", sample(32, 0, "RIFF\x24\x00\x00\x00WEBPVP8 ")},
	{"bmp", "image/bmp", sample(32, 0, "BM\x36\x00")},
	{"ico", "image/x-icon", sample(32, 0, "\x00\x00\x01\x00\x01\x00")},
	{"pdf", "application/pdf", sample(32, 0, "%PDF-1.7\n%\xE2\xE3\xCF\xD3\n\x00")},
	{"postscript", "application/postscript", sample(32, 0, "%!PS-Adobe-3.0\n\x00")},
	{"utf-16le text", "text/plain; charset=utf-16le", []byte("\xFF\xFEh\x00i\x00\n\x00")},
	{"utf-16be text", "text/plain; charset=utf-16be", []byte("\xFE\xFF\x00h\x00i\x00\n")},
	{"utf-8 bom then a nul", "text/plain; charset=utf-8", []byte("\xEF\xBB\xBFa\x00b")},
	{"gzip", "application/x-gzip", sample(32, 0, "\x1F\x8B\x08\x00")},
	{"zip", "application/zip", sample(32, 0, "PK\x03\x04\x14\x00")},
	{"empty zip", "application/zip", sample(22, 0, "PK\x05\x06")},
	{"bzip2", "application/x-bzip2", sample(32, 0, "BZh91AY&SY\x00")},
	{"bzip2 without a block size is not", octetStream, sample(32, 0, "BZhx\x00")},
	{"xz", "application/x-xz", sample(32, 0, "\xFD7zXZ\x00\x00\x04")},
	{"zstd", "application/zstd", sample(32, 0, "\x28\xB5\x2F\xFD\x04\x00")},
	{"7z", "application/x-7z-compressed", sample(32, 0, "7z\xBC\xAF\x27\x1C\x00\x04")},
	{"rar4", "application/x-rar-compressed", sample(32, 0, "Rar!\x1A\x07\x00")},
	{"rar5", "application/x-rar-compressed", sample(32, 0, "Rar!\x1A\x07\x01\x00")},
	{"posix tar", "application/x-tar", sample(512, 0, "file.txt", 100, "0000644\x00", 257, "ustar\x0000")},
	{"gnu tar", "application/x-tar", sample(512, 0, "file.txt", 257, "ustar  \x00")},
	{"tar cut before its magic", octetStream, sample(200, 0, "file.txt")},
	{"elf", "application/x-elf", sample(64, 0, "\x7FELF\x02\x01\x01\x00")},
	{"mach-o 64 le", "application/x-mach-binary", sample(32, 0, "\xCF\xFA\xED\xFE\x07\x00\x00\x01")},
	{"mach-o 32 be", "application/x-mach-binary", sample(32, 0, "\xFE\xED\xFA\xCE\x00\x00\x00\x12")},
	{"mach-o universal", "application/x-mach-binary", sample(32, 0, "\xCA\xFE\xBA\xBE\x00\x00\x00\x02")},
	{"java class", "application/java-vm", sample(32, 0, "\xCA\xFE\xBA\xBE\x00\x00\x00\x3D")},
	{"pe", "application/vnd.microsoft.portable-executable", sample(128, 0, "MZ\x90\x00", 0x3C, "\x80\x00\x00\x00", 0x80, "PE\x00\x00")},
	{"wasm", "application/wasm", sample(16, 0, "\x00asm\x01\x00\x00\x00")},
	{"sqlite", "application/vnd.sqlite3", sample(100, 0, "SQLite format 3\x00\x10\x00")},
	{"class file cut short", octetStream, []byte("\xCA\xFE\xBA")},
	{"mp3 id3", "audio/mpeg", sample(32, 0, "ID3\x04\x00\x00")},
	{"mp3 frame", "audio/mpeg", sample(32, 0, "\xFF\xFB\x90\x64")},
	{"mpeg bad bitrate is not", octetStream, sample(32, 0, "\xFF\xFB\xF0\x64")},
	{"mp4", "video/mp4", box("isom", "isom", "iso2", "mp41")},
	{"mp4 brand only", "video/mp4", box("isom", "isom", "avc1")},
	{"quicktime", "video/quicktime", box("qt  ", "qt  ")},
	{"m4a", "audio/mp4", box("M4A ", "M4A ", "isom")},
	{"heic", "image/heic", box("heic", "mif1", "heic")},
	{"avif", "image/avif", box("avif", "avif", "mif1", "miaf")},
	{"3gp", "video/3gpp", box("3gp4", "3gp4")},
	{"ogg", "application/ogg", sample(32, 0, "OggS\x00\x02")},
	{"wav", "audio/wave", sample(44, 0, "RIFF\x24\x00\x00\x00WAVEfmt ")},
	{"avi", "video/avi", sample(44, 0, "RIFF\x24\x00\x00\x00AVI LIST")},
	{"aiff", "audio/aiff", sample(32, 0, "FORM\x00\x00\x00\x20AIFFCOMM")},
	{"midi", "audio/midi", sample(32, 0, "MThd\x00\x00\x00\x06\x00\x01")},
	{"webm", "video/webm", sample(64, 0, "\x1A\x45\xDF\xA3\x9F\x42\x86\x81\x01\x42\x82\x84webm")},
	{"matroska", "video/x-matroska", sample(64, 0, "\x1A\x45\xDF\xA3\xA3\x42\x86\x81\x01\x42\x82\x88matroska")},
	{"ttf", "font/ttf", sample(32, 0, "\x00\x01\x00\x00\x00\x0A")},
	{"otf", "font/otf", sample(32, 0, "OTTO\x00\x0A")},
	{"ttc", "font/collection", sample(32, 0, "ttcf\x00\x01")},
	{"woff", "font/woff", sample(32, 0, "wOFF\x00\x01")},
	{"woff2", "font/woff2", sample(32, 0, "wOF2\x00\x01")},
	{"eot", "application/vnd.ms-fontobject", sample(64, 34, "LP")},
	{"nothing known", octetStream, []byte("\x00\x01\x02\x03 plain junk")},
	{"empty", octetStream, nil},
	{"one byte", octetStream, []byte{0xFF}},
}

func TestSniffMIME(t *testing.T) {
	for _, tt := range sniffCases {
		t.Run(tt.name, func(t *testing.T) {
			orig := bytes.Clone(tt.head)
			if got := SniffMIME(tt.head); got != tt.want {
				t.Errorf("SniffMIME(%q) = %q, want %q", tt.head, got, tt.want)
			}
			if !bytes.Equal(tt.head, orig) {
				t.Error("SniffMIME modified its input")
			}
		})
	}
}

// oursOnly are the types SniffMIME gives where DetectContentType finds no
// signature (the second part of sniffSignatures).
var oursOnly = map[string]bool{
	"application/zip": true, "application/x-bzip2": true, "application/x-xz": true,
	"application/zstd": true, "application/x-7z-compressed": true, "application/x-tar": true,
	"application/x-elf": true, "application/x-mach-binary": true, "application/java-vm": true,
	"application/vnd.microsoft.portable-executable": true, "application/vnd.sqlite3": true,
	"audio/mpeg": true, "image/avif": true, "image/heic": true, "audio/mp4": true,
	"video/quicktime": true, "video/mp4": true, "video/3gpp": true,
}

// httpTextOnly are DetectContentType's text answers that SniffMIME never
// gives for the same reason (it sees binary content only).
var httpTextOnly = map[string]bool{
	"text/html; charset=utf-8": true, "text/xml; charset=utf-8": true, "text/plain; charset=utf-8": true,
}

// documentedDifference reports whether SniffMIME's answer ours may differ from DetectContentType's, as magic.go documents: no text
// rules (HTML, XML, text without control bytes), formats DetectContentType
// does not know, and Matroska told from WebM.
func documentedDifference(ours, theirs string) bool {
	switch {
	case ours == theirs:
		return true
	case httpTextOnly[theirs]:
		return true // DetectContentType's text rules, which SniffMIME leaves out
	case theirs == octetStream && oursOnly[ours]:
		return true
	case theirs == "video/webm" && ours == "video/x-matroska":
		return true
	}
	return false
}

// TestSniffMIMEAgreesWithNetHTTP holds SniffMIME to
// net/http.DetectContentType (the sniff it replaced) on every sample: the
// same answer, or a difference magic.go documents. Every format both know
// gives the same answer.
func TestSniffMIMEAgreesWithNetHTTP(t *testing.T) {
	extra := [][]byte{
		[]byte("<html><body>\x00</body></html>"),
		[]byte("  <?xml version=\"1.0\"?>\xFF\xFE"),
		[]byte("caf\xE9 cr\xE8me \xE0 la carte"), // Latin-1: binary by IsBinary, text by net/http
		[]byte("MZ is also the start of this text"),
		[]byte("\xFF\xFBnot control bytes"),
		box("isom", "isom", "avc1"),
	}
	heads := extra
	for _, tt := range sniffCases {
		heads = append(heads, tt.head)
	}
	for _, h := range heads {
		ours, theirs := SniffMIME(h), http.DetectContentType(h)
		if !documentedDifference(ours, theirs) {
			t.Errorf("%q: SniffMIME %q, DetectContentType %q: an undocumented difference", h, ours, theirs)
		}
	}
	both := 0
	for _, tt := range sniffCases {
		theirs := http.DetectContentType(tt.head)
		if theirs == octetStream || httpTextOnly[theirs] && tt.want != theirs {
			continue
		}
		both++
		if tt.want != theirs && !(tt.name == "matroska" && theirs == "video/webm") {
			t.Errorf("%s: SniffMIME %q, DetectContentType %q", tt.name, tt.want, theirs)
		}
	}
	if both < 30 {
		t.Errorf("only %d samples of formats both sniffs know", both)
	}
}

// FuzzSniffMIME: SniffMIME never panics, never returns "", does not modify
// its input, and differs from net/http.DetectContentType only as
// documented.
func FuzzSniffMIME(f *testing.F) {
	for _, tt := range sniffCases {
		f.Add(tt.head)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		orig := bytes.Clone(head)
		ours := SniffMIME(head)
		if ours == "" {
			t.Fatal("empty MIME type")
		}
		if !bytes.Equal(head, orig) {
			t.Fatal("SniffMIME modified its input")
		}
		if theirs := http.DetectContentType(head); !documentedDifference(ours, theirs) {
			t.Fatalf("%q: SniffMIME %q, DetectContentType %q: an undocumented difference", head, ours, theirs)
		}
	})
}
