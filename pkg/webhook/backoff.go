package webhook

import "time"

// Backoff bounds of the retries.
const (
	// FirstRetry is the delay after the first failed attempt.
	FirstRetry = 5 * time.Second
	// MaxRetry caps the delay between attempts.
	MaxRetry = 30 * time.Minute
)

// Backoff is the delay before the attempt after the attempts-th failed
// one: exponential from first (doubling, capped at max), with "equal
// jitter": half of it fixed, the other half scaled by rnd() in [0, 1), so
// that the deliveries a receiver's outage failed together spread out
// instead of returning in one burst.
func Backoff(attempts int, first, max time.Duration, rnd func() float64) time.Duration {
	if attempts < 1 {
		attempts = 1
	}
	d := first
	for i := 1; i < attempts && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + time.Duration(float64(d-half)*rnd())
}
