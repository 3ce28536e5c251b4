package textops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestCompileMatcher(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		regex   bool
		code    backend.Code
		message string
	}{
		{"empty", "", false, backend.CodeInvalidArgument, "empty"},
		{"empty regex", "", true, backend.CodeInvalidArgument, "empty"},
		{"too long", strings.Repeat("a", 4097), false, backend.CodeInvalidArgument, "4096"},
		{"4096 ok", strings.Repeat("a", 4096), false, "", ""},
		{"literal LF", "a\nb", false, backend.CodeInvalidArgument, "line break"},
		{"literal CR", "a\rb", false, backend.CodeInvalidArgument, "line break"},
		{"52 bad regex", "(", true, backend.CodeInvalidPattern, "lookaround"},
		{"lookahead", "a(?=b)", true, backend.CodeInvalidPattern, "RE2"},
		{"literal paren ok", "(", false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := CompileMatcher(tt.pattern, tt.regex)
			if tt.code == "" {
				if err != nil || m == nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != tt.code || !strings.Contains(be.Message, tt.message) {
				t.Fatalf("err = %v, want %s mentioning %q", err, tt.code, tt.message)
			}
		})
	}
}

func TestScan(t *testing.T) {
	long := strings.Repeat("é", 100_000) // 200,000 bytes
	tests := []struct {
		name    string
		content string
		pattern string
		regex   bool
		max     int
		want    []LineMatch
		binary  bool
	}{
		{"49 import", "import os\nimport sys\nprint('hello')", "import", false, 0,
			[]LineMatch{{1, "import os", false}, {2, "import sys", false}}, false},
		{"51 literal dot", "axb\na.b\n", "a.b", false, 0, []LineMatch{{2, "a.b", false}}, false},
		{"52 regex alternation", "import os\nimport sys\nimport x\n", "^import (os|sys)$", true, 0,
			[]LineMatch{{1, "import os", false}, {2, "import sys", false}}, false},
		{"54 max 2", "a\na\na\n", "a", false, 2, []LineMatch{{1, "a", false}, {2, "a", false}}, false},
		{"57 binary", "abc\x00abc", "abc", false, 0, nil, true},
		{"58 CRLF numbering", "x\r\nfoo\r\ny\r\nfoo", "foo", false, 0, []LineMatch{{2, "foo", false}, {4, "foo", false}}, false},
		{"58 CR numbering", "x\rfoo\ry\rfoo\r", "foo", false, 0, []LineMatch{{2, "foo", false}, {4, "foo", false}}, false},
		{"58 regex dollar before CR", "foo\r\nbar", "foo$", true, 0, []LineMatch{{1, "foo", false}}, false},
		{"59 long line", "a\n" + long + "NEEDLE" + long + "\nb", "NEEDLE", false, 0,
			[]LineMatch{{2, strings.Repeat("é", 5000), true}}, false},
		{"59 long line regex", "a\n" + long + "NEEDLE" + long + "\nb", "NEE+DLE", true, 0,
			[]LineMatch{{2, strings.Repeat("é", 5000), true}}, false},
		{"long line regex anchored end", long + "END\nz", "END$", true, 0,
			[]LineMatch{{1, strings.Repeat("é", 5000), true}}, false},
		{"long line no match", long + "\nNEEDLE", "NEEDLE", false, 0, []LineMatch{{2, "NEEDLE", false}}, false},
		{"occurrence across piece boundary", strings.Repeat("x", scanBufSize-5) + "NEEDLE" + strings.Repeat("y", scanBufSize), "NEEDLE", false, 0,
			[]LineMatch{{1, strings.Repeat("x", 5000), true}}, false},
		{"BOM hidden", "\uFEFFfoo\nfoo", "foo", false, 0, []LineMatch{{1, "foo", false}, {2, "foo", false}}, false},
		{"BOM not matchable", "\uFEFFfoo", "\uFEFFfoo", false, 0, nil, false},
		{"invalid UTF-8 text", "ok\n\xff bad\nok2\n", "bad", false, 0, []LineMatch{{2, "\uFFFD bad", false}}, false},
		{"text cut at 5000", strings.Repeat("a", 6000), "a", false, 0, []LineMatch{{1, strings.Repeat("a", 5000), true}}, false},
		{"regex empty match", "a\n\nb", "^$", true, 0, []LineMatch{{2, "", false}}, false},
		{"no matches", "a\nb", "z", false, 0, nil, false},
		{"empty content", "", "z", false, 0, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := CompileMatcher(tt.pattern, tt.regex)
			if err != nil {
				t.Fatal(err)
			}
			readers := map[string]func(string) io.Reader{
				"whole":    func(s string) io.Reader { return strings.NewReader(s) },
				"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
			}
			for name, reader := range readers {
				got, binary, err := m.Scan(context.Background(), reader(tt.content), tt.max)
				if err != nil {
					t.Fatal(err)
				}
				if binary != tt.binary || fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("%s: Scan = %.200v, binary %v; want %.200v, %v", name, got, binary, tt.want, tt.binary)
				}
			}
		})
	}
}

// TestScanAgreesWithRead checks on random content that Scan numbers lines
// exactly as SplitLines (and so read) does, with and without the literal
// fast path.
func TestScanAgreesWithRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "ab", "\n", "\r", "\r\n", " ", "é"}
	for i := range 300 {
		var b strings.Builder
		for range rng.IntN(200) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		content := b.String()
		for _, regex := range []bool{false, true} {
			m, _ := CompileMatcher("ab", regex)
			got, _, err := m.Scan(context.Background(), strings.NewReader(content), 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []LineMatch
			for n, line := range SplitLines(content) {
				if strings.Contains(line, "ab") {
					want = append(want, LineMatch{Line: n + 1, Text: line})
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("case %d regex=%v content %q:\n got %v\nwant %v", i, regex, content, got, want)
			}
		}
	}
}

func TestScanCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m, _ := CompileMatcher("a", false)
	_, _, err := m.Scan(ctx, strings.NewReader(strings.Repeat("a\n", 1000)), 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestScanReadError(t *testing.T) {
	m, _ := CompileMatcher("a", false)
	_, _, err := m.Scan(context.Background(), failingReader{}, 0)
	if !errors.Is(err, errBroken) {
		t.Errorf("err = %v, want %v", err, errBroken)
	}
}

func TestLooksLikeRegex(t *testing.T) {
	tests := []struct {
		pattern string
		want    bool
	}{
		{"foo|bar", true},
		{"a.*b", true},
		{"a.+b", true},
		{`\d+`, true},
		{"^import", true},
		{"end$", true},
		{"a.b", false},
		{"plain text", false},
		{`trailing\`, false},
		{"mid^dle", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			if got := LooksLikeRegex(tt.pattern); got != tt.want {
				t.Errorf("LooksLikeRegex(%q) = %v, want %v", tt.pattern, got, tt.want)
			}
		})
	}
}
