package jsonquote

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAppend(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"", `""`},
		{"plain text", `"plain text"`},
		{`quote " backslash \`, `"quote \" backslash \\"`},
		{"\n\r\t", `"\n\r\t"`},
		{"\x00\x01\x08\x0c\x1f", `"\u0000\u0001\u0008\u000c\u001f"`},
		{"\x7f ~", "\"\x7f ~\""},
		{"<a href='x'>&amp;</a>", `"<a href='x'>&amp;</a>"`},
		{"héllo, 世界 🙂", `"héllo, 世界 🙂"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"bad \xff byte", `"bad \ufffd byte"`},
		{"cut \xe4\xb8", `"cut \ufffd\ufffd"`},
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`}, // a surrogate half
		{"\U0010ffff", "\"\U0010ffff\""},
	} {
		if got := string(Append(nil, tt.in)); got != tt.want {
			t.Errorf("Append(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzAppend: encoding/json reads what Append writes back to the string,
// each byte of invalid UTF-8 as U+FFFD.
func FuzzAppend(f *testing.F) {
	f.Add("a\"b\\c\n\x00\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		b := Append(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %s: %v", s, b, err)
		}
		// Ranging over s yields U+FFFD for each byte of invalid UTF-8.
		if want := strings.Map(func(r rune) rune { return r }, s); got != want {
			t.Fatalf("%q: %s reads as %q", s, b, got)
		}
	})
}
