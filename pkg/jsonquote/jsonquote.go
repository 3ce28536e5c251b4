// Package jsonquote writes a Go string as a JSON string, escaped as
// encoding/json and log/slog escape it (but for '<', '>' and '&', which JSON
// does not require escaping and which are left as they are), without
// linking either: the in-box agent's frame codec (pkg/sandbox/agentproto)
// and its logger (pkg/sandbox/agentlog) share it, and every KB of the
// agent's static binary costs RSS in every sandbox (docs/benchmarks.md, B9).
//
// It must import nothing but unicode/utf8.
package jsonquote

import "unicode/utf8"

const hex = "0123456789abcdef"

// Append appends s to b as a JSON string: '"' and '\\' with a backslash,
// \n \r \t as such, other control characters, U+2028 and U+2029 as
// \uXXXX, and each byte of invalid UTF-8 as \ufffd.
func Append(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is still to be copied
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
