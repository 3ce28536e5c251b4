package storetest

import (
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// RunSandboxLedger runs the store.SandboxLedger contract against a fresh
// store from newStore: spans are listed per tenant when they overlap the
// range, a second start or end changes nothing, an unknown end is not an
// error; SandboxSeconds clips them to the range, per thread.
func RunSandboxLedger(t *testing.T, newStore func(t *testing.T) store.SandboxLedger) {
	t.Helper()
	s := newStore(t)
	h := time.Hour
	for _, sp := range []store.SandboxSpan{
		{ID: "sbx-1", Tenant: "acme", ThreadID: "ta", Started: t0},
		{ID: "sbx-2", Tenant: "acme", ThreadID: "tb", Started: t0.Add(h)},
		{ID: "sbx-3", Tenant: "acme", ThreadID: "ta", Started: t0.Add(3 * h)},
		{ID: "sbx-9", Tenant: "zeta", ThreadID: "tz", Started: t0},
	} {
		if err := s.SandboxStarted(ctx(), sp); err != nil {
			t.Fatal(err)
		}
	}
	// A repeated start keeps the first.
	if err := s.SandboxStarted(ctx(), store.SandboxSpan{ID: "sbx-1", Tenant: "acme", ThreadID: "ta", Started: t0.Add(h)}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		id string
		at time.Time
	}{{"sbx-1", t0.Add(2 * h)}, {"sbx-1", t0.Add(5 * h)}, {"sbx-2", t0.Add(90 * time.Minute)}, {"nope", t0}} {
		if err := s.SandboxEnded(ctx(), e.id, e.at); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		from, to time.Time
		ids      int
		want     map[string]float64
	}{
		{"all", t0, t0.Add(4 * h), 3, map[string]float64{"": (2*h + 30*time.Minute + h).Seconds(), "ta": (3 * h).Seconds(), "tb": (30 * time.Minute).Seconds()}},
		{"clipped", t0.Add(h), t0.Add(3*h + 30*time.Minute), 3, map[string]float64{"": (h + 30*time.Minute + 30*time.Minute).Seconds(), "ta": (90 * time.Minute).Seconds(), "tb": (30 * time.Minute).Seconds()}},
		{"after the ended ones", t0.Add(2 * h), t0.Add(4 * h), 1, map[string]float64{"": h.Seconds(), "ta": h.Seconds()}},
		{"before any", t0.Add(-2 * h), t0, 0, map[string]float64{"": 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spans, err := s.SandboxSpans(ctx(), store.UsageQuery{Tenant: "acme", From: c.from, To: c.to})
			if err != nil || len(spans) != c.ids {
				t.Fatalf("SandboxSpans = %+v, %v; want %d", spans, err, c.ids)
			}
			got := store.SandboxSeconds(spans, c.from, c.to)
			if len(got) != len(c.want) {
				t.Fatalf("seconds = %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Fatalf("seconds = %v, want %v", got, c.want)
				}
			}
		})
	}
}
