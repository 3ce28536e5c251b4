package agentd

import (
	"context"

	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/pkg/store"
)

// recordUsage is the run host's OnUsage: each model call becomes a row
// of the usage ledger, under the thread's tenant as stored (a taken-over
// run has no caller to name it).
func (a *Agentd) recordUsage(l store.Ledger) func(ctx context.Context, u runhost.UsageCall) error {
	return func(ctx context.Context, u runhost.UsageCall) error {
		t, err := a.Store.Thread(ctx, u.ThreadID)
		if err != nil {
			return err
		}
		return l.RecordUsage(ctx, store.UsageEntry{
			Tenant: store.TenantOf(t), ThreadID: u.ThreadID, RunID: u.RunID,
			Model: u.Report.Model, At: u.Time, Usage: u.Report.Call,
		})
	}
}
