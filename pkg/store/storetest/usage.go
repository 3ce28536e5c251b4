package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// RunLedger runs the store.Ledger contract against a fresh store from
// newStore: rows are summed per tenant only, within [From, To), by
// thread, run, UTC day or not at all, with the call count and every kind
// of token; an empty tenant is the default one.
func RunLedger(t *testing.T, newStore func(t *testing.T) store.Ledger) {
	t.Helper()
	s := newStore(t)
	day2 := t0.Add(24 * time.Hour)
	entries := []store.UsageEntry{
		{Tenant: "acme", ThreadID: "t1", RunID: "r1", Model: "m", At: t0, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15, Cached: 4, Reasoning: 2}},
		{Tenant: "acme", ThreadID: "t1", RunID: "r1", Model: "m", At: t0.Add(time.Second), Usage: model.Usage{Prompt: 20, Completion: 1, Total: 21}},
		{Tenant: "acme", ThreadID: "t1", RunID: "r2", Model: "m", At: day2, Usage: model.Usage{Prompt: 1, Completion: 1, Total: 2, Estimated: true}},
		{Tenant: "acme", ThreadID: "t2", RunID: "r3", Model: "n", At: day2.Add(time.Hour), Usage: model.Usage{Prompt: 100, Completion: 50, Total: 150}},
		{Tenant: "other", ThreadID: "t9", RunID: "r9", At: t0, Usage: model.Usage{Prompt: 1000, Total: 1000}},
		{ThreadID: "t8", RunID: "r8", At: t0, Usage: model.Usage{Prompt: 7, Total: 7}},
	}
	for _, e := range entries {
		if err := s.RecordUsage(ctx(), e); err != nil {
			t.Fatalf("record %+v: %v", e, err)
		}
	}
	type want struct {
		key    string
		usage  model.Usage
		calls  int
		thread string
	}
	cases := []struct {
		name  string
		q     store.UsageQuery
		group store.UsageGroup
		want  []want
		errIs error
	}{
		{name: "all", q: store.UsageQuery{Tenant: "acme"}, want: []want{{"", model.Usage{Prompt: 131, Completion: 57, Total: 188, Cached: 4, Reasoning: 2, Estimated: true}, 4, ""}}},
		{name: "by thread", q: store.UsageQuery{Tenant: "acme"}, group: store.GroupThread, want: []want{
			{"t1", model.Usage{Prompt: 31, Completion: 7, Total: 38, Cached: 4, Reasoning: 2, Estimated: true}, 3, "t1"},
			{"t2", model.Usage{Prompt: 100, Completion: 50, Total: 150}, 1, "t2"},
		}},
		{name: "by run", q: store.UsageQuery{Tenant: "acme"}, group: store.GroupRun, want: []want{
			{"r1", model.Usage{Prompt: 30, Completion: 6, Total: 36, Cached: 4, Reasoning: 2}, 2, "t1"},
			{"r2", model.Usage{Prompt: 1, Completion: 1, Total: 2, Estimated: true}, 1, "t1"},
			{"r3", model.Usage{Prompt: 100, Completion: 50, Total: 150}, 1, "t2"},
		}},
		{name: "by day", q: store.UsageQuery{Tenant: "acme"}, group: store.GroupDay, want: []want{
			{"2026-11-22", model.Usage{Prompt: 30, Completion: 6, Total: 36, Cached: 4, Reasoning: 2}, 2, ""},
			{"2026-11-23", model.Usage{Prompt: 101, Completion: 51, Total: 152, Estimated: true}, 2, ""},
		}},
		{name: "range is half open", q: store.UsageQuery{Tenant: "acme", From: t0.Add(time.Second), To: day2.Add(time.Hour)}, want: []want{
			{"", model.Usage{Prompt: 21, Completion: 2, Total: 23, Estimated: true}, 2, ""},
		}},
		{name: "empty range", q: store.UsageQuery{Tenant: "acme", From: day2.Add(2 * time.Hour)}, want: []want{}},
		{name: "other tenant", q: store.UsageQuery{Tenant: "other"}, group: store.GroupThread, want: []want{{"t9", model.Usage{Prompt: 1000, Total: 1000}, 1, "t9"}}},
		{name: "empty tenant is default", q: store.UsageQuery{Tenant: store.DefaultTenant}, group: store.GroupRun, want: []want{{"r8", model.Usage{Prompt: 7, Total: 7}, 1, "t8"}}},
		{name: "unknown tenant", q: store.UsageQuery{Tenant: "nobody"}, want: []want{}},
		{name: "bad group", q: store.UsageQuery{Tenant: "acme"}, group: "week", errIs: store.ErrBadUsageQuery},
		{name: "to before from", q: store.UsageQuery{Tenant: "acme", From: day2, To: t0}, errIs: store.ErrBadUsageQuery},
		{name: "no tenant", q: store.UsageQuery{}, errIs: store.ErrBadUsageQuery},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := store.ReportUsage(ctx(), s, tc.q, tc.group)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) {
					t.Fatalf("err = %v, want %v", err, tc.errIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("rows = %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].Key != w.key || got[i].Usage != w.usage || got[i].Calls != w.calls || got[i].ThreadID != w.thread {
					t.Errorf("row %d = %+v, want %+v", i, got[i], w)
				}
			}
		})
	}
	t.Run("TokensSince", func(t *testing.T) {
		n, err := store.TokensSince(ctx(), s, "acme", day2)
		if err != nil || n != 152 {
			t.Fatalf("tokens since day 2 = %d, %v; want 152", n, err)
		}
	})
}
