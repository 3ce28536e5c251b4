package textops

import (
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestReplace(t *testing.T) {
	tests := []struct {
		name        string
		content     string
		old, new    string
		all         bool
		want        string
		wantN       int
		wantAdapted bool
	}{
		{"34 single", "def hello():\n    print('hello world')", "world", "universe", false,
			"def hello():\n    print('hello universe')", 1, false},
		{"35 replace all", "foo bar foo baz foo", "foo", "qux", true, "qux bar qux baz qux", 3, false},
		{"40 CRLF adapted", "one\r\ntwo\r\nthree\r\n", "one\ntwo", "1\n2", false, "1\r\n2\r\nthree\r\n", 1, true},
		{"CR file adapted", "one\rtwo\rthree", "one\ntwo", "1\n2", false, "1\r2\rthree", 1, true},
		{"41 LF file, CRLF old", "a\nb", "a\r\nb", "c\r\nd", false, "c\nd", 1, true},
		{"42 non-overlapping", "aaa", "aa", "X", true, "Xa", 1, false},
		{"CRLF old sent exactly", "a\r\nb\r\n", "a\r\nb", "z", false, "z\r\n", 1, false},
		{"H6 invalid bytes survive", "ok\n\xff bad\nok2\n", "ok2", "fine", false, "ok\n\xff bad\nfine\n", 1, false},
		{"invalid bytes inside new", "abc", "b", "\xfe", false, "a\xfec", 1, false},
		{"replace all single hit", "abc", "b", "x", true, "axc", 1, false},
		{"mixed file dominant CRLF", "a\r\nb\r\nc\nd", "b\nc", "X", false, "a\r\nX\nd", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content := []byte(tt.content)
			out, n, adapted, err := Replace(content, tt.old, tt.new, tt.all)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want || n != tt.wantN || adapted != tt.wantAdapted {
				t.Errorf("Replace = %q, %d, %v; want %q, %d, %v", out, n, adapted, tt.want, tt.wantN, tt.wantAdapted)
			}
			if string(content) != tt.content {
				t.Errorf("input modified: %q", content)
			}
		})
	}
}

func TestReplaceErrors(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		old, new string
		code     backend.Code
		details  map[string]string
		message  string
	}{
		{"36 multiple", "foo bar foo baz foo", "foo", "qux", backend.CodeMultipleOccurrences,
			map[string]string{"count": "3", "lines": "1"}, "replace_all=true"},
		{"multiple lines", "x\r\nfoo\rfoo\nbar\nfoo\n\nfoo\nfoo\nfoo foo", "foo", "q", backend.CodeMultipleOccurrences,
			map[string]string{"count": "7", "lines": "2,3,5,7,8"}, "7 times"},
		{"37 absent", "hello", "bye", "x", backend.CodeStringNotFound,
			map[string]string{"hint": "reread"}, "re-read"},
		{"38 empty old", "abc", "", "x", backend.CodeInvalidArgument, nil, "write_file"},
		{"38 empty old on empty file", "", "", "x", backend.CodeInvalidArgument, nil, "empty"},
		{"38 identical", "abc", "b", "b", backend.CodeInvalidArgument, nil, "identical"},
		{"39 EOF newline", "a\nx", "x\n", "y", backend.CodeStringNotFound,
			map[string]string{"hint": "eof_newline", "stripped_count": "1"}, "occurs 1 time"},
		{"EOF newline CRLF old", "a\r\nx", "x\r\n", "y", backend.CodeStringNotFound,
			map[string]string{"hint": "eof_newline", "stripped_count": "1"}, "final newline"},
		{"bare newline is not the EOF hint", "abc", "\n", "y", backend.CodeStringNotFound,
			map[string]string{"hint": "reread"}, "re-read"},
		{"43 gutter", "foo\n", "12  foo", "bar", backend.CodeStringNotFound,
			map[string]string{"hint": "gutter"}, "line-number prefix"},
		{"gutter continuation marker", "foo\n", "  2.1  foo", "bar", backend.CodeStringNotFound,
			map[string]string{"hint": "gutter"}, "prefix"},
		{"whitespace", "def f():\n\treturn 1\n", "def f():\n    return 1", "x", backend.CodeStringNotFound,
			map[string]string{"hint": "whitespace"}, "indentation"},
		{"H6 replacement char", "ok\n\xff bad\nok2\n", "\uFFFD bad", "x", backend.CodeStringNotFound,
			map[string]string{"hint": "reread"}, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, n, _, err := Replace([]byte(tt.content), tt.old, tt.new, false)
			if err == nil || err.Code != tt.code {
				t.Fatalf("Replace = %q, %d, %v; want %s", out, n, err, tt.code)
			}
			if out != nil || n != 0 {
				t.Errorf("out %q, n %d returned with an error", out, n)
			}
			for k, v := range tt.details {
				if err.Details[k] != v {
					t.Errorf("details[%s] = %q, want %q (all: %v)", k, err.Details[k], v, err.Details)
				}
			}
			if !strings.Contains(err.Message, tt.message) {
				t.Errorf("message %q lacks %q", err.Message, tt.message)
			}
		})
	}
}

func TestReplaceQuotesLongOld(t *testing.T) {
	old := strings.Repeat("z", 300)
	_, _, _, err := Replace([]byte("abc"), old, "x", false)
	if err == nil || !strings.Contains(err.Message, `"`+strings.Repeat("z", 200)+`"…`) || strings.Contains(err.Message, strings.Repeat("z", 201)) {
		t.Errorf("message = %v", err)
	}
}
