package textops

import (
	"bytes"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// IsBinary applies the docs/file-tools.md §4 binary sniff to head, the first
// min(size, SniffWindow) bytes of a file (an engine passes
// whole = size <= len(head)): binary if head holds a NUL byte,
// or if more than 10% of its bytes belong to invalid UTF-8 sequences.
// whole reports that head is the entire file; when it is not, a multibyte
// character cut at the end of head is not counted as invalid.
func IsBinary(head []byte, whole bool) bool {
	if len(head) > backend.SniffWindow {
		head = head[:backend.SniffWindow]
		whole = false
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	if !whole {
		head = head[:len(head)-incompleteTail(head)]
	}
	invalid := 0
	for i := 0; i < len(head); {
		if head[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && n == 1 {
			invalid++
		}
		i += n
	}
	return invalid*10 > len(head)
}

// MediaHeadBytes is the number of leading bytes MediaType needs.
const MediaHeadBytes = 12

var mediaTypes = []struct {
	exts []string
	mime string
	sig  func(head []byte) bool
}{
	{[]string{".png"}, "image/png", at(0, "\x89PNG")},
	{[]string{".jpg", ".jpeg"}, "image/jpeg", at(0, "\xFF\xD8\xFF")},
	{[]string{".gif"}, "image/gif", at(0, "GIF8")},
	{[]string{".webp"}, "image/webp", riff("WEBP")},
	{[]string{".pdf"}, "application/pdf", at(0, "%PDF-")},
}

// MediaType implements docs/file-tools.md §4.2 step 3: it returns the MIME type when name has
// a media extension (.png .jpg .jpeg .gif .webp .pdf, any case) AND head
// (at least the first MediaHeadBytes bytes of the file, or all of it)
// starts with that format's signature. Otherwise it returns "" and the file
// is sniffed as text or binary.
func MediaType(name string, head []byte) string {
	ext := strings.ToLower(path.Ext(name))
	for _, m := range mediaTypes {
		for _, e := range m.exts {
			if e == ext && m.sig(head) {
				return m.mime
			}
		}
	}
	return ""
}

// SniffMIME returns a best-effort MIME type of binary content for
// not_text details, from the signatures in sniffSignatures (magic.go), or
// "application/octet-stream" when none matches. It does not use
// net/http.DetectContentType: net/http (linked here and through zap)
// cost the in-box agent about 1 MiB RSS (docs/benchmarks-history.md, "A
// lean in-box agent"). For the binary formats DetectContentType knows, the answer is
// the same; it differs only as magic.go's doc comment lists.
func SniffMIME(head []byte) string {
	if len(head) > sniffBytes {
		head = head[:sniffBytes]
	}
	for _, s := range sniffSignatures {
		if s.match(head) {
			return s.mime
		}
	}
	return octetStream
}

// CheckText is the content part of docs/file-tools.md §4.4 step 3, shared by every edit
// implementation: media (by MediaType) and binary content (by IsBinary)
// are not_text. name supplies the extension. The error has no Path.
func CheckText(name string, content []byte) *backend.Error {
	if mime := MediaType(name, content); mime != "" {
		return NotTextError(int64(len(content)), mime)
	}
	head := content[:min(len(content), backend.SniffWindow)]
	if IsBinary(head, len(head) == len(content)) {
		return NotTextError(int64(len(content)), SniffMIME(head))
	}
	return nil
}
