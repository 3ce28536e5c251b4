package agentsvc

import (
	"context"
	"errors"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrUsageOff: agentd keeps no usage ledger (its store has none).
var ErrUsageOff = errors.New("usage is not available on this agentd")

var usageGroups = map[plumbv1.UsageGroupBy]store.UsageGroup{
	plumbv1.UsageGroupBy_USAGE_GROUP_BY_UNSPECIFIED: store.GroupNone,
	plumbv1.UsageGroupBy_USAGE_GROUP_BY_THREAD:      store.GroupThread,
	plumbv1.UsageGroupBy_USAGE_GROUP_BY_RUN:         store.GroupRun,
	plumbv1.UsageGroupBy_USAGE_GROUP_BY_DAY:         store.GroupDay,
}

// GetUsage sums the caller's tenant's usage ledger over a time range.
func (s *Service) GetUsage(ctx context.Context, req *plumbv1.GetUsageRequest) (*plumbv1.GetUsageResponse, error) {
	g, ok := usageGroups[req.GetGroupBy()]
	if !ok {
		return nil, Status(InvalidField("group_by", "unknown group_by %d", req.GetGroupBy()))
	}
	q := store.UsageQuery{Tenant: store.TenantOrDefault(tenant.From(ctx)), To: s.now()}
	if f := req.GetFrom(); f != nil {
		if err := f.CheckValid(); err != nil {
			return nil, Status(InvalidField("from", "from: %v", err))
		}
		q.From = f.AsTime()
	}
	if t := req.GetTo(); t != nil {
		if err := t.CheckValid(); err != nil {
			return nil, Status(InvalidField("to", "to: %v", err))
		}
		q.To = t.AsTime()
	}
	if !q.To.After(q.From) {
		return nil, Status(InvalidField("to", "to must be after from"))
	}
	if s.cfg.Ledger == nil {
		return nil, Status(ErrUsageOff)
	}
	rows, err := store.ReportUsage(ctx, s.cfg.Ledger, q, g)
	if err != nil {
		return nil, s.status("get usage", err)
	}
	resp := &plumbv1.GetUsageResponse{}
	for _, r := range rows {
		resp.Rows = append(resp.Rows, &plumbv1.UsageRow{Key: r.Key, ThreadId: r.ThreadID, Usage: agentconv.UsageToPB(r.Usage), ModelCalls: int64(r.Calls)})
	}
	if s.cfg.Sandboxes != nil {
		spans, err := s.cfg.Sandboxes.SandboxSpans(ctx, q)
		if err != nil {
			return nil, s.status("get sandbox seconds", err)
		}
		secs := store.SandboxSeconds(spans, q.From, q.To)
		resp.SandboxSeconds = secs[""]
		if g == store.GroupThread {
			for _, r := range resp.Rows {
				r.SandboxSeconds = secs[r.GetThreadId()]
			}
		}
	}
	if s.cfg.Storage != nil {
		b, err := s.cfg.Storage.StoredBytes(ctx, q.Tenant)
		if err != nil {
			return nil, s.status("get stored bytes", err)
		}
		resp.Stored = &plumbv1.StoredBytes{Threads: b.Threads, Messages: b.Messages, State: b.State, Files: b.Files, Runs: b.Runs}
	}
	return resp, nil
}
