package vpath

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" means invalid_path
		rule string // substring of the message when invalid
	}{
		{"P1 absolute", "/src/main.go", "/src/main.go", ""},
		{"P2 relative", "src/main.go", "/src/main.go", ""},
		{"P3 double slash", "/src//main.go", "/src/main.go", ""},
		{"P4 dot components", "/./src/./main.go", "/src/main.go", ""},
		{"P5 trailing slash", "/src/", "/src", ""},
		{"P6 root", "/", "/", ""},
		{"P6 double slash root", "//", "/", ""},
		{"P6 dot", ".", "/", ""},
		{"P6 dot slash", "./", "/", ""},
		{"P7 dot prefix", "./src", "/src", ""},
		{"P8 empty", "", "", "empty"},
		{"P9 dots inside name", "/docs/report..final.md", "/docs/report..final.md", ""},
		{"P10 bracket dots", "/app/[...slug]/page.tsx", "/app/[...slug]/page.tsx", ""},
		{"P11 three dots", "/a/...", "/a/...", ""},
		{"P12 dotdot", "..", "", `".."`},
		{"P12 slash dotdot", "/..", "", `".."`},
		{"P12 trailing dotdot", "a/..", "", `".."`},
		{"P13 inner dotdot", "/a/../b", "", `".."`},
		{"P14 relative traversal", "../../etc/passwd", "", `".."`},
		{"P15 backslash dotdot", `a\..\b`, "", `".."`},
		{"P16 backslash separator", `dir\file.txt`, "/dir/file.txt", ""},
		{"P17 tilde", "~", "", "~"},
		{"P17 tilde slash", "~/secret", "", "~"},
		{"P17 tilde user", "~root/x", "", "~"},
		{"P18 inner tilde", "/home/~user/x", "/home/~user/x", ""},
		{"P19 drive backslash", `C:\Users\x`, "", "drive"},
		{"P19 drive slash", "c:/x", "", "drive"},
		{"P19 bare drive", "c:", "", "drive"},
		{"P20 drive-like component", "/c:/x", "/c:/x", ""},
		{"P21 NUL", "/a\x00b", "", "control"},
		{"P22 LF", "/a\nb", "", "control"},
		{"P22 TAB", "/a\tb", "", "control"},
		{"P22 DEL", "/a\x7fb", "", "control"},
		{"P23 component 256 bytes", "/" + strings.Repeat("a", 256), "", "255"},
		{"P24 component 255 bytes", "/" + strings.Repeat("a", 255), "/" + strings.Repeat("a", 255), ""},
		{"P25 4097 bytes", strings.Repeat("/a", 2048) + "/", "", "4096"},
		{"P26 multibyte", "/é/ü.txt", "/é/ü.txt", ""},
		{"P26 component 255 bytes of é is 127 chars", "/" + strings.Repeat("é", 128), "", "255"},
		{"P27 invalid UTF-8", "/a\xff", "", "UTF-8"},
		{"P28 spaces kept", "/a/ b .txt", "/a/ b .txt", ""},
		{"P29 no percent decoding", "/%2e%2e/x", "/%2e%2e/x", ""},
		{"P30 fullwidth solidus", "/a／..", "/a／..", ""},
		{"dotdot wins over long component", "/" + strings.Repeat("a", 300) + "/..", "", `".."`},
		{"control wins over tilde", "~\x00", "", "control"},
		{"4096 bytes relative becomes 4097", strings.Repeat("a/", 2047) + "ab", "", "4096"},
		{"exactly 4096 bytes", "/" + strings.Repeat("a/", 2047) + "a", "/" + strings.Repeat("a/", 2047) + "a", ""},
		{"H1 traversal", "../etc/passwd", "", `".."`},
		{"H1 absolute traversal", "/a/../../etc/passwd", "", `".."`},
		{"H1 backslash traversal", `..\..\etc`, "", `".."`},
		{"H1 dot then dotdot", "/a/./../b", "", `".."`},
		{"H1 trailing traversal", "a/b/../../..", "", `".."`},
		{"H4 NUL in name", "/a\x00.txt", "", "control"},
		{"H5 256-byte component", "/x/" + strings.Repeat("b", 256), "", "255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("Normalize(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
				}
				return
			}
			var be *backend.Error
			if !errors.As(err, &be) || be.Code != backend.CodeInvalidPath {
				t.Fatalf("Normalize(%q) = %q, %v; want invalid_path", tt.in, got, err)
			}
			if !strings.Contains(be.Message, tt.rule) {
				t.Errorf("message %q does not name the rule %q", be.Message, tt.rule)
			}
			if got != "" {
				t.Errorf("result %q returned with an error", got)
			}
		})
	}
}

// TestNormalizeHugeIsConstantTime is H5: a 10 MB path is rejected without
// work proportional to its length.
func TestNormalizeHugeIsConstantTime(t *testing.T) {
	huge := strings.Repeat("a", 10<<20)
	const runs = 1000
	start := time.Now()
	for range runs {
		if _, err := Normalize(huge); backend.CodeOf(err) != backend.CodeInvalidPath {
			t.Fatalf("err = %v, want invalid_path", err)
		}
	}
	if per := time.Since(start) / runs; per > time.Millisecond {
		t.Errorf("rejecting a 10 MB path took %v per call, want < 1ms", per)
	}
	_, err := Normalize(huge)
	var be *backend.Error
	if errors.As(err, &be) && (be.Path != "" || len(be.Message) > 200) {
		t.Errorf("the error carries the huge input: path %d bytes, message %d bytes", len(be.Path), len(be.Message))
	}
}

func TestHelpers(t *testing.T) {
	tests := []struct {
		name      string
		got, want any
	}{
		{"Join root", Join("/", "a/b"), "/a/b"},
		{"Join dir", Join("/d", "a"), "/d/a"},
		{"Join empty rel", Join("/d", ""), "/d"},
		{"Base root", Base("/"), "/"},
		{"Base file", Base("/a/b.txt"), "b.txt"},
		{"Base top", Base("/a"), "a"},
		{"Dir root", Dir("/"), "/"},
		{"Dir top", Dir("/a"), "/"},
		{"Dir nested", Dir("/a/b/c"), "/a/b"},
		{"IsUnder self", IsUnder("/a", "/a"), true},
		{"IsUnder child", IsUnder("/a/b", "/a"), true},
		{"IsUnder sibling prefix", IsUnder("/ab", "/a"), false},
		{"IsUnder root", IsUnder("/x", "/"), true},
		{"IsUnder parent", IsUnder("/a", "/a/b"), false},
		{"Segments root", len(Segments("/")), 0},
		{"Segments path", strings.Join(Segments("/a/b/c"), ","), "a,b,c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestRel(t *testing.T) {
	tests := []struct {
		name, root, p, want string
		ok                  bool
	}{
		{"same", "/a", "/a", "", true},
		{"root", "/", "/a/b", "a/b", true},
		{"below", "/a", "/a/b/c", "b/c", true},
		{"sibling prefix", "/a", "/ab", "", false},
		{"outside", "/a", "/b", "", false},
		{"root self", "/", "/", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Rel(tt.root, tt.p)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Rel(%q, %q) = %q, %v; want %q, %v", tt.root, tt.p, got, ok, tt.want, tt.ok)
			}
		})
	}
}
