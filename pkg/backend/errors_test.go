package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"backend error", Errorf(CodeNotText, "/a", "binary"), CodeNotText},
		{"wrapped backend error", fmt.Errorf("op: %w", Errorf(CodeTooLarge, "", "big")), CodeTooLarge},
		{"canceled", context.Canceled, CodeCancelled},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), CodeTimeout},
		{"other", errors.New("boom"), CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFromOS(t *testing.T) {
	pathErr := func(errno syscall.Errno) error {
		return &fs.PathError{Op: "open", Path: "/host/secret/root/a", Err: errno}
	}
	tests := []struct {
		name        string
		err         error
		want        Code
		wantMessage string
	}{
		{"enoent", pathErr(syscall.ENOENT), CodeFileNotFound, "no such file"},
		{"eisdir", pathErr(syscall.EISDIR), CodeIsDirectory, "is a directory"},
		{"enotdir", pathErr(syscall.ENOTDIR), CodeNotADirectory, "not a directory"},
		{"eacces", pathErr(syscall.EACCES), CodePermissionDenied, "permission denied"},
		{"eperm", pathErr(syscall.EPERM), CodePermissionDenied, "permission denied"},
		{"erofs", pathErr(syscall.EROFS), CodePermissionDenied, "read-only file system"},
		{"enospc", pathErr(syscall.ENOSPC), CodeNoSpace, "no space"},
		{"edquot", pathErr(syscall.EDQUOT), CodeNoSpace, "quota"},
		{"eagain", pathErr(syscall.EAGAIN), CodeResourceExhausted, "resource limit"},
		{"eloop", pathErr(syscall.ELOOP), CodeInvalidPath, "symbolic links"},
		{"escape", &fs.PathError{Op: "openat", Path: "x", Err: errors.New("path escapes from parent")}, CodeInvalidPath, "resolves outside the root"},
		{"fs not exist", fs.ErrNotExist, CodeFileNotFound, "no such file"},
		{"canceled", context.Canceled, CodeCancelled, "cancelled"},
		{"deadline", context.DeadlineExceeded, CodeTimeout, "deadline"},
		{"other errno", pathErr(syscall.EINVAL), CodeInternal, "invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromOS("read", "/a", tt.err)
			if got.Code != tt.want {
				t.Fatalf("code = %q, want %q (%v)", got.Code, tt.want, got)
			}
			if got.Path != "/a" {
				t.Errorf("path = %q, want /a", got.Path)
			}
			if !strings.Contains(got.Message, tt.wantMessage) || !strings.HasPrefix(got.Message, "read /a: ") {
				t.Errorf("message = %q, want prefix %q and %q", got.Message, "read /a: ", tt.wantMessage)
			}
			if strings.Contains(got.Message, "/host/secret") {
				t.Errorf("message leaks the host path: %q", got.Message)
			}
		})
	}
	if FromOS("read", "/a", nil) != nil {
		t.Error("FromOS(nil) != nil")
	}
	orig := Errorf(CodeNotText, "/b", "binary")
	if got := FromOS("read", "/a", fmt.Errorf("w: %w", orig)); got != orig {
		t.Errorf("FromOS did not pass an *Error through: %v", got)
	}
}

// TestFromOSRealRoot checks the mapping against errors os.Root really
// returns, since the escape error is matched by its text.
func TestFromOSRealRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("../../etc", filepath.Join(dir, "out")); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	if err := os.Symlink("l2", filepath.Join(dir, "l1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("l1", filepath.Join(dir, "l2")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	tests := []struct {
		name string
		path string
		want Code
	}{
		{"missing", "missing", CodeFileNotFound},
		{"escape", "out/passwd", CodeInvalidPath},
		{"dotdot", "../x", CodeInvalidPath},
		{"loop", "l1", CodeInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := root.Open(tt.path)
			if got := FromOS("read", "/"+tt.path, err); got == nil || got.Code != tt.want {
				t.Errorf("FromOS(%v) = %v, want %s", err, got, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	long := strings.Repeat("é", 250)
	tests := []struct {
		name, in, want string
	}{
		{"short", "a\nb", `"a\nb"`},
		{"cut at 200 chars", long, `"` + strings.Repeat("é", 200) + `"…`},
		{"exactly 200", strings.Repeat("x", 200), `"` + strings.Repeat("x", 200) + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quote(tt.in); got != tt.want {
				t.Errorf("Quote = %q, want %q", got, tt.want)
			}
		})
	}
}

// A message names a long path once, cut at 200 characters (docs/file-tools.md §6), whoever
// builds it; Path keeps the whole path.
func TestLongPathsAreClippedInMessages(t *testing.T) {
	long := "/" + strings.Repeat("d/", 150) + "é.txt"
	clipped := long[:200] + "…"
	if got := Clip(long); got != clipped {
		t.Fatalf("Clip = %q, want %q", got, clipped)
	}
	if got := Clip("/short"); got != "/short" {
		t.Errorf("Clip(/short) = %q", got)
	}
	tests := []struct {
		name string
		err  *Error
	}{
		{"FromOS", FromOS("read", long, fs.ErrNotExist)},
		{"Errorf", Errorf(CodeIsDirectory, long, "write %s: is a directory; %s is not a file", long, long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err.Path != long {
				t.Errorf("Path = %q, want the whole path", tt.err.Path)
			}
			if strings.Contains(tt.err.Message, long[:201]) || !strings.Contains(tt.err.Message, clipped) {
				t.Errorf("message %q does not show the path cut at 200 characters", tt.err.Message)
			}
		})
	}
}

func TestErrorWithDetail(t *testing.T) {
	e := Errorf(CodeOffsetOutOfRange, "/n.txt", "offset %d is out of range", 10).
		WithDetail("total_lines", "3").WithDetail("offset", "10")
	if e.Error() != "offset_out_of_range: offset 10 is out of range" {
		t.Errorf("Error() = %q", e.Error())
	}
	if got := strings.Join(e.DetailKeys(), ","); got != "offset,total_lines" {
		t.Errorf("DetailKeys = %q", got)
	}
}

type homeBackend struct{}

func (homeBackend) Home() string { return "/workspace" }

func TestHome(t *testing.T) {
	if got := Home(homeBackend{}); got != "/workspace" {
		t.Errorf("Home(Homer) = %q", got)
	}
	if got := Home(struct{}{}); got != "/" {
		t.Errorf("Home(other) = %q", got)
	}
}
