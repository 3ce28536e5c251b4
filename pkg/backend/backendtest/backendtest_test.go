package backendtest

import (
	"fmt"
	"strings"
	"testing"
)

// TestCoverage checks that every docs/file-tools.md §7 row of layers B, P, G and H has
// exactly one case, and that names are unique.
func TestCoverage(t *testing.T) {
	var want []string
	for n := 1; n <= 73; n++ {
		switch {
		case n >= 18 && n <= 25, n == 43, n == 53, n == 65: // tool layer (T)
			continue
		}
		want = append(want, fmt.Sprintf("B%02d", n))
	}
	for n := 1; n <= 30; n++ {
		want = append(want, fmt.Sprintf("P%02d", n))
	}
	for n := 1; n <= 27; n++ {
		want = append(want, fmt.Sprintf("G%02d", n))
	}
	for n := 1; n <= 10; n++ {
		want = append(want, fmt.Sprintf("H%02d", n))
	}
	seen := map[string]int{}
	for _, name := range CaseNames() {
		id, _, _ := strings.Cut(name, "_")
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("case %s: %d cases, want 1", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %s used by %d cases", id, n)
		}
	}
}

func TestPrefixMapping(t *testing.T) {
	e := &env{h: &Harness{Prefix: "/mnt"}}
	for _, tt := range []struct{ casePath, backendPath string }{
		{"/", "/mnt"}, {"/a.txt", "/mnt/a.txt"}, {"/d/", "/mnt/d/"},
	} {
		if got := e.p(tt.casePath); got != tt.backendPath {
			t.Errorf("p(%q) = %q, want %q", tt.casePath, got, tt.backendPath)
		}
		if got := e.v(tt.backendPath); got != tt.casePath {
			t.Errorf("v(%q) = %q, want %q", tt.backendPath, got, tt.casePath)
		}
	}
	if got := e.v("/other/x"); !strings.HasPrefix(got, "OUTSIDE-PREFIX:") {
		t.Errorf("v of a path outside the prefix = %q", got)
	}
}
