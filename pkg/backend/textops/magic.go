package textops

import (
	"bytes"
	"encoding/binary"
)

// octetStream is SniffMIME's answer when no signature matches.
const octetStream = "application/octet-stream"

// sniffBytes is how much of the head SniffMIME looks at, as
// DetectContentType (whose mp4 box-size check depends on it).
const sniffBytes = 512

// magic is one signature: mime when match(head) holds.
type magic struct {
	mime  string
	match func(head []byte) bool
}

// sniffSignatures is the signature table of SniffMIME, tried in order. The
// first part is every binary
// signature of net/http.DetectContentType (the WHATWG MIME sniffing
// standard's), in its order and with its MIME names, so that a not_text
// detail reads the same as when the sniff was DetectContentType's; the
// second part adds formats found in sandboxes that DetectContentType calls
// application/octet-stream: bzip2, xz, zstd, 7z, tar, ELF, Mach-O, PE,
// SQLite, Java class files, MP3 without an ID3 tag, Matroska, and the
// ftyp boxes of QuickTime, M4A, HEIC and AVIF.
//
// SniffMIME only ever sees content IsBinary called binary, so the text
// rules of DetectContentType are left out on purpose: HTML and XML
// prefixes, and the "text/plain; charset=utf-8" of content without
// control bytes (binary here for its invalid UTF-8), are
// application/octet-stream. The byte-order marks stay: UTF-16 text holds
// NUL bytes, so it is binary by the sniff, and its BOM is the useful hint.
// These are the only differences from DetectContentType (TestSniffMIMEAgreesWithNetHTTP).
var sniffSignatures = []magic{
	// DetectContentType's binary signatures, in its order.
	{"application/pdf", at(0, "%PDF-")},
	{"application/postscript", at(0, "%!PS-Adobe-")},
	{"text/plain; charset=utf-16be", byteOrderMark("\xFE\xFF")},
	{"text/plain; charset=utf-16le", byteOrderMark("\xFF\xFE")},
	{"text/plain; charset=utf-8", byteOrderMark("\xEF\xBB\xBF")},
	{"image/x-icon", at(0, "\x00\x00\x01\x00")},
	{"image/x-icon", at(0, "\x00\x00\x02\x00")},
	{"image/bmp", at(0, "BM")},
	{"image/gif", at(0, "GIF87a")},
	{"image/gif", at(0, "GIF89a")},
	{"image/webp", riff("WEBPVP")},
	{"image/png", at(0, "\x89PNG\r\n\x1A\n")},
	{"image/jpeg", at(0, "\xFF\xD8\xFF")},
	{"audio/aiff", func(h []byte) bool { return hasAt(h, 0, "FORM") && hasAt(h, 8, "AIFF") }},
	{"audio/mpeg", at(0, "ID3")},
	{"application/ogg", at(0, "OggS\x00")},
	{"audio/midi", at(0, "MThd\x00\x00\x00\x06")},
	{"video/avi", riff("AVI ")},
	{"audio/wave", riff("WAVE")},
	{"video/mp4", isMP4},
	{"video/x-matroska", func(h []byte) bool { return isEBML(h) && ebmlDocType(h, "matroska") }},
	{"video/webm", isEBML},
	{"application/vnd.ms-fontobject", at(34, "LP")},
	{"font/ttf", at(0, "\x00\x01\x00\x00")},
	{"font/otf", at(0, "OTTO")},
	{"font/collection", at(0, "ttcf")},
	{"font/woff", at(0, "wOFF")},
	{"font/woff2", at(0, "wOF2")},
	{"application/x-gzip", at(0, "\x1F\x8B\x08")},
	{"application/zip", at(0, "PK\x03\x04")},
	{"application/x-rar-compressed", at(0, "Rar!\x1A\x07\x00")},
	{"application/x-rar-compressed", at(0, "Rar!\x1A\x07\x01\x00")},
	{"application/wasm", at(0, "\x00asm")},

	// Formats DetectContentType does not know.
	{"application/zip", at(0, "PK\x05\x06")}, // an empty archive
	{"application/x-bzip2", func(h []byte) bool { return hasAt(h, 0, "BZh") && len(h) > 3 && '1' <= h[3] && h[3] <= '9' }},
	{"application/x-xz", at(0, "\xFD7zXZ\x00")},
	{"application/zstd", at(0, "\x28\xB5\x2F\xFD")},
	{"application/x-7z-compressed", at(0, "7z\xBC\xAF\x27\x1C")},
	{"application/x-tar", at(257, "ustar")}, // POSIX "ustar\0" and GNU "ustar  \0"
	{"application/x-elf", at(0, "\x7FELF")},
	{"application/x-mach-binary", machO},
	{"application/java-vm", func(h []byte) bool { return hasAt(h, 0, "\xCA\xFE\xBA\xBE") && !machO(h) }},
	{"application/vnd.microsoft.portable-executable", at(0, "MZ")},
	{"application/vnd.sqlite3", at(0, "SQLite format 3\x00")},
	{"audio/mpeg", mpegFrame},
	{"image/avif", ftyp("avif", "avis")},
	{"image/heic", ftyp("heic", "heix", "heim", "heis", "mif1", "msf1")},
	{"audio/mp4", ftyp("M4A ", "M4B ")},
	{"video/quicktime", ftyp("qt  ")},
	{"video/mp4", ftyp("isom", "iso2", "iso4", "iso5", "iso6", "avc1", "dash", "M4V ", "f4v ")},
	{"video/3gpp", ftyp("3gp4", "3gp5", "3gp6", "3ge6", "3gg6")},
}

// hasAt reports whether h holds sig at offset off.
func hasAt(h []byte, off int, sig string) bool {
	return len(h) >= off+len(sig) && string(h[off:off+len(sig)]) == sig
}

// at matches sig at offset off.
func at(off int, sig string) func([]byte) bool {
	return func(h []byte) bool { return hasAt(h, off, sig) }
}

// byteOrderMark matches a byte-order mark in a head of at least 4 bytes
// (DetectContentType's masks for the marks are 4 bytes long).
func byteOrderMark(mark string) func([]byte) bool {
	return func(h []byte) bool { return len(h) >= 4 && hasAt(h, 0, mark) }
}

// riff matches a RIFF container of the given form type ("RIFF" size form).
func riff(form string) func([]byte) bool {
	return func(h []byte) bool { return hasAt(h, 0, "RIFF") && hasAt(h, 8, form) }
}

// isMP4 is the WHATWG signature for MP4: an ftyp box whose size fits the
// head and is a multiple of 4, and whose brands (the major brand or a
// compatible one, skipping the minor version) include one starting "mp4".
func isMP4(h []byte) bool {
	if len(h) < 12 || !hasAt(h, 4, "ftyp") {
		return false
	}
	size := int(binary.BigEndian.Uint32(h[:4]))
	if len(h) < size || size%4 != 0 {
		return false
	}
	for off := 8; off < size; off += 4 {
		if off != 12 && hasAt(h, off, "mp4") {
			return true
		}
	}
	return false
}

// ftyp matches an ISO base media file (ftyp box at 4) with one of these
// major brands; isMP4 has already claimed the ones with an mp4 brand.
func ftyp(brands ...string) func([]byte) bool {
	return func(h []byte) bool {
		if !hasAt(h, 4, "ftyp") || len(h) < 12 {
			return false
		}
		for _, b := range brands {
			if hasAt(h, 8, b) {
				return true
			}
		}
		return false
	}
}

// isEBML matches an EBML header, which WebM and Matroska start with.
func isEBML(h []byte) bool { return hasAt(h, 0, "\x1A\x45\xDF\xA3") }

// ebmlDocType reports whether the EBML header (its first 64 bytes) holds
// the DocType element (0x4282) with the given value.
func ebmlDocType(h []byte, docType string) bool {
	h = h[:min(len(h), 64)]
	return bytes.Contains(h, append([]byte{0x42, 0x82, 0x80 | byte(len(docType))}, docType...))
}

// machO matches a Mach-O file: thin (32 or 64 bit, either byte order) or
// universal. A universal binary starts like a Java class file (CAFEBABE);
// as file(1) does, it is Mach-O when the next word (its architecture
// count) is small, and a class file when it is a class version (major ≥ 45).
func machO(h []byte) bool {
	if len(h) < 8 {
		return false
	}
	switch string(h[:4]) {
	case "\xFE\xED\xFA\xCE", "\xFE\xED\xFA\xCF", "\xCE\xFA\xED\xFE", "\xCF\xFA\xED\xFE":
		return true
	case "\xCA\xFE\xBA\xBE":
		n := binary.BigEndian.Uint32(h[4:8])
		return n > 0 && n < 20
	}
	return false
}

// mpegFrame matches an MPEG audio frame header at 0 (an MP3 without an
// ID3 tag): the frame sync, MPEG-1 or 2, layer III, with or without CRC.
func mpegFrame(h []byte) bool {
	if len(h) < 3 || h[0] != 0xFF {
		return false
	}
	switch h[1] {
	case 0xFB, 0xFA, 0xF3, 0xF2:
		// A bitrate index of 15 and a sampling rate of 3 are invalid.
		return h[2]>>4 != 0xF && (h[2]>>2)&3 != 3
	}
	return false
}
