package fileops

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestFailEROFS(t *testing.T) {
	erofs := &fs.PathError{Op: "openat", Path: "/host/root/etc/x", Err: syscall.EROFS}
	plain := &Engine{}
	be := plain.fail("write", "/etc/x", erofs)
	if be.Code != backend.CodePermissionDenied || !strings.Contains(be.Message, "read-only file system") {
		t.Errorf("EROFS = %+v, want permission_denied naming the read-only file system", be)
	}
	sandbox := &Engine{cfg: config{writable: []string{"/workspace", "/tmp"}}}
	be = sandbox.fail("write", "/etc/x", erofs)
	if be.Code != backend.CodePermissionDenied || !strings.Contains(be.Message, "/workspace, /tmp") ||
		be.Details["writable_roots"] != "/workspace,/tmp" || strings.Contains(be.Message, "/host/root") {
		t.Errorf("EROFS with writable roots = %+v", be)
	}
	be = sandbox.fail("write", "/etc/x", &fs.PathError{Op: "openat", Path: "x", Err: syscall.EACCES})
	if strings.Contains(be.Message, "/workspace") {
		t.Errorf("EACCES names the writable roots: %q", be.Message)
	}
}

func TestTempName(t *testing.T) {
	for _, base := range []string{"a.txt", strings.Repeat("a", 255), strings.Repeat("é", 127), strings.Repeat("€", 85)} {
		n := tempName(base)
		if len(n) > backend.MaxComponentBytes || !utf8.ValidString(n) || !strings.HasPrefix(n, ".") || !strings.Contains(n, tmpPrefix) {
			t.Errorf("tempName(%d bytes) = %q (%d bytes)", len(base), n, len(n))
		}
	}
	if first, second := tempName("a"), tempName("a"); first == second {
		t.Errorf("tempName is not random")
	}
}
