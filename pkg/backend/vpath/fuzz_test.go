package vpath

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/src/main.go", "a\\..\\b", "~/x", "c:", "/a\xff", "/./a//b/", "/a／..", "/[...slug]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Normalize(raw)
		if err != nil {
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.CodeInvalidPath {
				t.Fatalf("Normalize(%q) error %v is not invalid_path", raw, err)
			}
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("Normalize(%q) = %q: no leading /", raw, got)
		}
		if len(got) > backend.MaxPathBytes {
			t.Fatalf("Normalize(%q) = %d bytes", raw, len(got))
		}
		if !utf8.ValidString(got) {
			t.Fatalf("Normalize(%q) = %q: invalid UTF-8", raw, got)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || r == '\\' {
				t.Fatalf("Normalize(%q) = %q: contains %U", raw, got, r)
			}
		}
		if got != "/" {
			for _, c := range strings.Split(got[1:], "/") {
				if c == "" || c == "." || c == ".." || len(c) > backend.MaxComponentBytes {
					t.Fatalf("Normalize(%q) = %q: bad component %q", raw, got, c)
				}
			}
		}
		again, err := Normalize(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: Normalize(%q) = %q, %v", got, again, err)
		}
	})
}
