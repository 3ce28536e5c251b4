package runhost_test

import (
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/runhost"
)

// TestTakeoverIntervalIsBounded: the takeover scan runs every half lease
// TTL, but never less often than every 7.5 s, so that a run handed off by
// a stopping replica is continued within seconds even with a long TTL; a
// configured interval is kept as it is.
func TestTakeoverIntervalIsBounded(t *testing.T) {
	for _, tt := range []struct {
		ttl, configured, want time.Duration
	}{
		{runhost.DefaultLeaseTTL, 0, 7500 * time.Millisecond},
		{2 * time.Second, 0, time.Second},
		{10 * time.Minute, 0, 7500 * time.Millisecond},
		{10 * time.Minute, 20 * time.Millisecond, 20 * time.Millisecond},
		{10 * time.Minute, time.Minute, time.Minute},
		{10 * time.Minute, -1, -1},
	} {
		if got := runhost.TakeoverEvery(tt.ttl, tt.configured); got != tt.want {
			t.Errorf("takeover interval with lease TTL %v, configured %v = %v; want %v", tt.ttl, tt.configured, got, tt.want)
		}
	}
}
