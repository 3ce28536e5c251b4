package backend_test

import (
	"context"
	"slices"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// TestNotices: notices reach the innermost collector of the context, in
// order and once each; without a collector they are dropped.
func TestNotices(t *testing.T) {
	backend.Notify(context.Background(), "nobody listens") // must not panic

	outer, outerTake := backend.WithNotices(context.Background())
	backend.Notify(outer, "a")
	inner, innerTake := backend.WithNotices(outer)
	backend.Notify(inner, "b")
	backend.Notify(inner, "c")
	backend.Notify(inner, "b")
	backend.Notify(inner, "")
	if got := innerTake(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("inner notices %q", got)
	}
	if got := outerTake(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("outer notices %q", got)
	}
}
