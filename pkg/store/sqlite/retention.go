package sqlite

import (
	"context"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Retention = (*Store)(nil)

// tenantFilter is the WHERE clause (and its arguments) keeping tenant, or
// every tenant but except.
func tenantFilter(tenant string, except []string) (string, []any) {
	if tenant != "" {
		return ` AND tenant = ?`, []any{tenant}
	}
	if len(except) == 0 {
		return "", nil
	}
	args := make([]any, len(except))
	for i, t := range except {
		args[i] = t
	}
	return ` AND tenant NOT IN (?` + strings.Repeat(`, ?`, len(except)-1) + `)`, args
}

// agentFilter is the WHERE clause (and its arguments) keeping the items
// whose agent (the SQL expression expr) is one of agents, and not one of
// except.
func agentFilter(expr string, agents, except []string) (string, []any) {
	var where string
	var args []any
	for _, set := range []struct {
		op    string
		names []string
	}{{" IN ", agents}, {" NOT IN ", except}} {
		if len(set.names) == 0 {
			continue
		}
		where += ` AND ` + expr + set.op + `(?` + strings.Repeat(`, ?`, len(set.names)-1) + `)`
		for _, n := range set.names {
			args = append(args, n)
		}
	}
	return where, args
}

// lastRunAgent is the agent of thread t's newest run ("" when it named
// none, or the thread has no run).
const lastRunAgent = `COALESCE((SELECT json_extract(r.record, '$.spec.agent') FROM runs r WHERE r.thread_id = t.id ORDER BY r.ord DESC LIMIT 1), '')`

// IdleThreads implements store.Retention.
func (s *Store) IdleThreads(ctx context.Context, q store.IdleQuery) ([]string, error) {
	where, targs := tenantFilter(q.Tenant, q.Except)
	args := append([]any{store.Nanos(q.Before)}, targs...)
	args = append(args, store.BatchSize(q.Limit, 100))
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM threads WHERE updated_at < ?`+where+` ORDER BY updated_at, id LIMIT ?`, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, classify(rows.Err())
}

// DeleteFinishedDeliveries implements store.Retention.
func (s *Store) DeleteFinishedDeliveries(ctx context.Context, q store.ExpiredDeliveries) (int, error) {
	where, targs := tenantFilter(q.Tenant, q.Except)
	awhere, aargs := agentFilter("agent", q.Agents, q.ExceptAgents)
	where += awhere
	args := append([]any{string(store.DeliverySucceeded), string(store.DeliveryFailed), store.Nanos(q.Before)}, targs...)
	args = append(args, aargs...)
	args = append(args, store.BatchSize(q.Limit, 500))
	res, err := s.db.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
		WHERE status IN (?, ?) AND finished_at <> 0 AND finished_at < ?`+where+` ORDER BY finished_at LIMIT ?)`, args...)
	if err != nil {
		return 0, classify(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// DeleteExpiredRunEvents implements store.Retention.
func (s *Store) DeleteExpiredRunEvents(ctx context.Context, q store.ExpiredDeliveries) (int, error) {
	where, targs := tenantFilter(q.Tenant, q.Except)
	awhere, aargs := agentFilter(lastRunAgent, q.Agents, q.ExceptAgents)
	where += awhere
	args := append([]any{store.Nanos(q.Before)}, targs...)
	args = append(args, aargs...)
	args = append(args, string(agent.StatusRunning), string(agent.StatusInterrupted), string(agent.StatusQueued), store.BatchSize(q.Limit, 100))
	res, err := s.db.ExecContext(ctx, `DELETE FROM run_events WHERE thread_id IN (SELECT t.id FROM threads t
		WHERE t.updated_at < ?`+where+`
		AND EXISTS (SELECT 1 FROM run_events e WHERE e.thread_id = t.id)
		AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.id AND r.status IN (?, ?, ?))
		AND NOT EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = t.id AND NOT l.released)
		ORDER BY t.updated_at LIMIT ?)`, args...)
	if err != nil {
		return 0, classify(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
