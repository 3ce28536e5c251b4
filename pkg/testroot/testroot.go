package testroot

import (
	"os"
	"testing"
)

// Require stops t unless the process is root: it fails under CI=true and
// skips otherwise. why completes "needs root …", e.g. "to switch
// identities".
func Require(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs root %s (CI runs the tests as root)", why)
	}
	t.Skipf("needs root %s", why)
}
