package sandbox

import (
	"testing"
	"time"
)

// TestKnownRuntimes: a listed runtime is known until the list is
// runtimesFresh old; an unlisted one never is, so checkRuntime asks the
// engine again for it.
func TestKnownRuntimes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	var k knownRuntimes
	if k.has("runc", t0) {
		t.Fatal("known before any list")
	}
	k.set([]string{"runc", "runsc"}, t0)
	for _, tc := range []struct {
		name string
		at   time.Duration
		want bool
	}{
		{"runc", 0, true},
		{"runsc", runtimesFresh - time.Nanosecond, true},
		{"runsc", runtimesFresh, false},
		{"kata", 0, false},
	} {
		if got := k.has(tc.name, t0.Add(tc.at)); got != tc.want {
			t.Errorf("has(%q) at +%v = %v, want %v", tc.name, tc.at, got, tc.want)
		}
	}
}
