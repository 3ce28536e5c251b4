package postgres

import (
	"context"
	"strconv"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Retention = (*Store)(nil)

// tenantFilter is the WHERE clause (and its arguments, numbered from
// next) keeping tenant, or every tenant but except.
func tenantFilter(next int, tenant string, except []string) (string, []any) {
	if tenant != "" {
		return ` AND tenant = $` + strconv.Itoa(next), []any{tenant}
	}
	if len(except) == 0 {
		return "", nil
	}
	return ` AND NOT (tenant = ANY($` + strconv.Itoa(next) + `))`, []any{except}
}

// agentFilter is the WHERE clause (and its arguments, numbered from
// next) keeping the items whose agent (the SQL expression expr) is one of
// agents, and not one of except.
func agentFilter(next int, expr string, agents, except []string) (string, []any) {
	var where string
	var args []any
	if len(agents) > 0 {
		where += ` AND ` + expr + ` = ANY($` + strconv.Itoa(next) + `)`
		args = append(args, agents)
		next++
	}
	if len(except) > 0 {
		where += ` AND NOT (` + expr + ` = ANY($` + strconv.Itoa(next) + `))`
		args = append(args, except)
	}
	return where, args
}

// lastRunAgent is the agent of thread t's newest run ("" when it named
// none, or the thread has no run).
const lastRunAgent = `COALESCE((SELECT r.record::jsonb -> 'spec' ->> 'agent' FROM runs r WHERE r.thread_id = t.id ORDER BY r.ord DESC LIMIT 1), '')`

// IdleThreads implements store.Retention.
func (s *Store) IdleThreads(ctx context.Context, q store.IdleQuery) ([]string, error) {
	where, targs := tenantFilter(3, q.Tenant, q.Except)
	args := append([]any{store.Nanos(q.Before), store.BatchSize(q.Limit, 100)}, targs...)
	rows, err := s.pool.Query(ctx, `SELECT id FROM threads WHERE updated_at < $1`+where+` ORDER BY updated_at, id LIMIT $2`, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, classify(err)
		}
		ids = append(ids, id)
	}
	return ids, classify(rows.Err())
}

// DeleteFinishedDeliveries implements store.Retention.
func (s *Store) DeleteFinishedDeliveries(ctx context.Context, q store.ExpiredDeliveries) (int, error) {
	where, targs := tenantFilter(5, q.Tenant, q.Except)
	awhere, aargs := agentFilter(5+len(targs), "agent", q.Agents, q.ExceptAgents)
	where += awhere
	args := append([]any{string(store.DeliverySucceeded), string(store.DeliveryFailed), store.Nanos(q.Before), store.BatchSize(q.Limit, 500)}, targs...)
	args = append(args, aargs...)
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
		WHERE status IN ($1, $2) AND finished_at <> 0 AND finished_at < $3`+where+` ORDER BY finished_at LIMIT $4)`, args...)
	if err != nil {
		return 0, classify(err)
	}
	return int(tag.RowsAffected()), nil
}

// DeleteExpiredRunEvents implements store.Retention.
func (s *Store) DeleteExpiredRunEvents(ctx context.Context, q store.ExpiredDeliveries) (int, error) {
	where, targs := tenantFilter(3, q.Tenant, q.Except)
	awhere, aargs := agentFilter(3+len(targs), lastRunAgent, q.Agents, q.ExceptAgents)
	where += awhere
	args := append([]any{store.Nanos(q.Before), store.BatchSize(q.Limit, 100)}, targs...)
	args = append(args, aargs...)
	n := len(args)
	args = append(args, []string{string(agent.StatusRunning), string(agent.StatusInterrupted), string(agent.StatusQueued)})
	tag, err := s.pool.Exec(ctx, `DELETE FROM run_events WHERE thread_id IN (SELECT t.id FROM threads t
		WHERE t.updated_at < $1`+where+`
		AND EXISTS (SELECT 1 FROM run_events e WHERE e.thread_id = t.id)
		AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.id AND r.status = ANY($`+strconv.Itoa(n+1)+`))
		AND NOT EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = t.id AND NOT l.released)
		ORDER BY t.updated_at LIMIT $2)`, args...)
	if err != nil {
		return 0, classify(err)
	}
	return int(tag.RowsAffected()), nil
}
