package textops

import "unicode/utf8"

const replacementChar = "\uFFFD"

// appendValid appends src to dst with every byte of an invalid UTF-8
// sequence replaced by U+FFFD (the decoding of a Go range loop), and
// reports whether any byte was replaced.
func appendValid(dst, src []byte) ([]byte, bool) {
	if utf8.Valid(src) {
		return append(dst, src...), false
	}
	for len(src) > 0 {
		r, n := utf8.DecodeRune(src)
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, replacementChar...)
		} else {
			dst = append(dst, src[:n]...)
		}
		src = src[n:]
	}
	return dst, true
}

// prefixChars returns the byte length of the first n chars of b (all of b
// if it has fewer), counting each invalid byte as one char.
func prefixChars(b []byte, n int) int {
	i := 0
	for ; n > 0 && i < len(b); n-- {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return i
}

// cutAtRuneStart returns the largest k ≤ max such that b[:k] ends at a
// character boundary of valid UTF-8 b.
func cutAtRuneStart(b []byte, max int) int {
	if max >= len(b) {
		return len(b)
	}
	for max > 0 && !utf8.RuneStart(b[max]) {
		max--
	}
	return max
}

// prefixCharsString is prefixChars for strings.
func prefixCharsString(s string, n int) int {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}
