package store

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/plumbhq/plumb/pkg/model"
)

// Ledger is the usage ledger: one row per model call (or per run segment),
// with its tenant, thread, run, model and token counts, summed over a time
// range for a tenant. It is what GetUsage reports and what the per-tenant
// token quotas count across replicas. Every implementation must pass
// storetest.RunLedger.
type Ledger interface {
	// RecordUsage appends one row to the ledger. A row without a tenant
	// is DefaultTenant's; At must be set.
	RecordUsage(ctx context.Context, e UsageEntry) error
	// UsageRows returns the ledger's rows of q.Tenant with From <= At < To
	// (a zero To is unbounded), summed per thread, run and UTC day; Report
	// groups them as the caller asks.
	UsageRows(ctx context.Context, q UsageQuery) ([]UsageRow, error)
}

// ErrBadUsageQuery: the query's range or grouping is invalid.
var ErrBadUsageQuery = errors.New("invalid usage query")

// UsageEntry is one row of the ledger.
type UsageEntry struct {
	// Tenant owns the thread.
	Tenant string
	// ThreadID and RunID name the run the tokens were spent in.
	ThreadID, RunID string
	// Model is the model name the call went to ("" when unknown).
	Model string
	// At is when the call ended.
	At time.Time
	// Usage is the call's token counts.
	Usage model.Usage
}

// UsageGroup is how a usage report groups its rows.
type UsageGroup string

// Groupings of a usage report.
const (
	// GroupNone sums the whole range into one row (key "").
	GroupNone UsageGroup = ""
	// GroupThread sums per thread (key: the thread id).
	GroupThread UsageGroup = "thread"
	// GroupRun sums per run (key: the run id).
	GroupRun UsageGroup = "run"
	// GroupDay sums per UTC day (key: YYYY-MM-DD).
	GroupDay UsageGroup = "day"
)

// UsageQuery selects a tenant's ledger rows in a time range.
type UsageQuery struct {
	// Tenant is whose rows are summed (required).
	Tenant string
	// From and To bound the range: From <= At < To; a zero To is open.
	From, To time.Time
}

// UsageRow is one group of a usage report.
type UsageRow struct {
	// Key names the group: a thread id, a run id, a day or "".
	Key string
	// ThreadID is the group's thread when the group has one thread.
	ThreadID string
	// Day is the UTC day the rows fell on (UsageRows only).
	Day time.Time
	// RunID is the group's run (UsageRows only, and GroupRun).
	RunID string
	// Usage is the summed token counts.
	Usage model.Usage
	// Calls is how many ledger rows the group sums.
	Calls int
}

// DayNanos is the length of a UTC day in nanoseconds, the ledger's day
// bucket.
const DayNanos = int64(24 * time.Hour)

// ValidUsageGroup reports whether g is a known grouping.
func ValidUsageGroup(g UsageGroup) bool {
	switch g {
	case GroupNone, GroupThread, GroupRun, GroupDay:
		return true
	}
	return false
}

// ReportUsage sums l's rows for q grouped by g, ordered by key (a report
// grouped by nothing has exactly one row, zero when the range is empty).
func ReportUsage(ctx context.Context, l Ledger, q UsageQuery, g UsageGroup) ([]UsageRow, error) {
	if !ValidUsageGroup(g) || q.Tenant == "" || (!q.To.IsZero() && !q.To.After(q.From)) {
		return nil, ErrBadUsageQuery
	}
	rows, err := l.UsageRows(ctx, q)
	if err != nil {
		return nil, err
	}
	return GroupUsage(rows, g), nil
}

// GroupUsage merges the per-thread, run and day rows of UsageRows by g.
func GroupUsage(rows []UsageRow, g UsageGroup) []UsageRow {
	byKey := map[string]*UsageRow{}
	var keys []string
	for _, r := range rows {
		var k, thread, run string
		switch g {
		case GroupThread:
			k, thread = r.ThreadID, r.ThreadID
		case GroupRun:
			k, thread, run = r.RunID, r.ThreadID, r.RunID
		case GroupDay:
			k = r.Day.UTC().Format(time.DateOnly)
		}
		cur, ok := byKey[k]
		if !ok {
			cur = &UsageRow{Key: k, ThreadID: thread, RunID: run}
			byKey[k] = cur
			keys = append(keys, k)
		}
		cur.Usage = cur.Usage.Add(r.Usage)
		cur.Calls += r.Calls
	}
	sort.Strings(keys)
	out := make([]UsageRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	return out
}

// TokensSince is the total tokens (prompt plus completion) the tenant's
// ledger holds from since on: what tokens_per_day counts.
func TokensSince(ctx context.Context, l Ledger, tenant string, since time.Time) (int, error) {
	rows, err := l.UsageRows(ctx, UsageQuery{Tenant: tenant, From: since})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rows {
		n += r.Usage.Prompt + r.Usage.Completion
	}
	return n, nil
}

// TenantOrDefault is tenant, or DefaultTenant when it is empty.
func TenantOrDefault(tenant string) string {
	if tenant == "" {
		return DefaultTenant
	}
	return tenant
}

// ToNanos is the ledger's upper bound for to: its nanoseconds, or the
// largest time when to is zero (an open range).
func ToNanos(to time.Time) int64 {
	if to.IsZero() {
		return 1<<63 - 1
	}
	return to.UnixNano()
}

// StorageMeter tells what a tenant stores: GetUsage reports it. Every
// implementation must pass storetest.RunStoredBytes.
type StorageMeter interface {
	// StoredBytes sums the stored encodings of tenant's threads.
	StoredBytes(ctx context.Context, tenant string) (StoredBytes, error)
}

// StoredBytes is what a tenant's threads hold in the store, in bytes of
// the stored encodings (indexes and the database's overhead not counted).
type StoredBytes struct {
	// Threads is how many threads the tenant has.
	Threads int64
	// Messages are the threads' messages.
	Messages int64
	// State is the threads' State and labels.
	State int64
	// Files are the files of the threads' State backends.
	Files int64
	// Runs are the run records and checkpoint records.
	Runs int64
}

// SandboxLedger records each thread sandbox's lifetime, so that GetUsage
// can report sandbox seconds: agentd marks a box started when it creates
// it for a thread and ended when it deletes it or finds it gone. Every
// implementation must pass storetest.RunSandboxLedger.
type SandboxLedger interface {
	// SandboxStarted records that sandbox id of tenant's thread started
	// at at (again: no change).
	SandboxStarted(ctx context.Context, s SandboxSpan) error
	// SandboxEnded records that sandbox id ended at at, unless its end
	// is already recorded; an unknown id is not an error.
	SandboxEnded(ctx context.Context, id string, at time.Time) error
	// SandboxSpans returns q.Tenant's sandboxes that lived during
	// [q.From, q.To) (started before To, not ended before From).
	SandboxSpans(ctx context.Context, q UsageQuery) ([]SandboxSpan, error)
}

// SandboxSpan is one sandbox's lifetime.
type SandboxSpan struct {
	ID, Tenant, ThreadID string
	// Started and Ended bound it; a zero Ended is still open.
	Started, Ended time.Time
}

// SandboxSeconds sums the spans' seconds within [from, to), an open span
// counting up to to (which must be set), per thread ("" key: the total).
func SandboxSeconds(spans []SandboxSpan, from, to time.Time) map[string]float64 {
	out := map[string]float64{"": 0}
	for _, s := range spans {
		start, end := s.Started, s.Ended
		if end.IsZero() || end.After(to) {
			end = to
		}
		if start.Before(from) {
			start = from
		}
		if d := end.Sub(start).Seconds(); d > 0 {
			out[s.ThreadID] += d
			out[""] += d
		}
	}
	return out
}

// ScanSandboxSpan reads one row of sandbox_id, tenant, thread_id,
// started_at, ended_at.
func ScanSandboxSpan(r Scanner) (SandboxSpan, error) {
	var (
		sp         SandboxSpan
		start, end int64
	)
	if err := r.Scan(&sp.ID, &sp.Tenant, &sp.ThreadID, &start, &end); err != nil {
		return sp, err
	}
	sp.Started = FromNanos(start)
	if end != 0 {
		sp.Ended = FromNanos(end)
	}
	return sp, nil
}
