package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// probe is one timed series: f is called warm times untimed, then n times
// timed.
type probe struct {
	name string
	warm int
	n    int
	f    func(ctx context.Context) error
	// after, if set, runs after each call (timed or not) outside the
	// clock: cleanup that is not part of what is measured.
	after func()
	got   samples
}

// call runs f once, then after, and returns how long f took.
func (p *probe) call(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := p.f(ctx)
	d := time.Since(t0)
	if p.after != nil {
		p.after()
	}
	return d, err
}

// interleave runs the probes' warm-ups, then their timed calls in rounds
// (each round runs every probe's share in turn), so that a slow spell of a
// shared machine hits plumb and its baseline alike instead of whichever
// series happened to run then.
func interleave(ctx context.Context, rounds int, probes ...*probe) error {
	return runRounds(ctx, rounds, false, probes)
}

// alternate is interleave with every other round run in reverse, so that
// no probe always runs first in its round, right after the same
// neighbour's clean-up: a box's teardown under runsc outlives the engine's
// answer to its delete and runs into the next call (B3). Only for probes
// that do not depend on each other's order.
func alternate(ctx context.Context, rounds int, probes ...*probe) error {
	return runRounds(ctx, rounds, true, probes)
}

func runRounds(ctx context.Context, rounds int, reverse bool, probes []*probe) error {
	for _, p := range probes {
		for range p.warm {
			if _, err := p.call(ctx); err != nil {
				return fmt.Errorf("%s (warm-up): %w", p.name, err)
			}
		}
	}
	rounds = max(rounds, 1)
	order := slices.Clone(probes)
	for r := range rounds {
		for _, p := range order {
			share := p.n*(r+1)/rounds - p.n*r/rounds
			for range share {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				d, err := p.call(ctx)
				if err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				p.got = append(p.got, d)
			}
		}
		if reverse {
			slices.Reverse(order)
		}
	}
	return nil
}

// scale picks the full or the quick value.
func (e *env) scale(full, quick int) int {
	if e.quick {
		return quick
	}
	return full
}

// mb is bytes per second in MB/s (10^6 bytes).
func mb(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}
