package store

import (
	"context"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// QuotaCounts is what the per-tenant quotas (internal/quota) count in the
// shared store, so that every agentd replica sees the same numbers: the
// tenant's running runs, the runs asked for since a time, and the threads
// that hold a sandbox. The tokens a tenant spent come from the Ledger.
// Every implementation must pass storetest.RunQuotaCounts.
type QuotaCounts interface {
	// RunningRuns counts the runs of tenant's threads whose record is
	// RUNNING, leaving out the runs of thread except (a run on the same
	// thread is never concurrent with the one asked for).
	RunningRuns(ctx context.Context, tenant, except string) (int, error)
	// RunsSince counts the runs of tenant's threads created (asked for:
	// started, or queued) at or after since.
	RunsSince(ctx context.Context, tenant string, since time.Time) (int, error)
	// LiveSandboxes counts tenant's threads that hold a sandbox
	// (Thread.SandboxID set), thread except left out.
	LiveSandboxes(ctx context.Context, tenant, except string) (int, error)
}

// RunCreatedNanos is the runs table's created_at of rec: when the run was
// asked for (CreatedAt, else StartedAt), in Unix nanoseconds.
func RunCreatedNanos(rec agent.RunRecord) int64 {
	if !rec.CreatedAt.IsZero() {
		return Nanos(rec.CreatedAt)
	}
	if !rec.StartedAt.IsZero() {
		return Nanos(rec.StartedAt)
	}
	return 0
}
