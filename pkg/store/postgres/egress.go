package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.EgressRecords = (*Store)(nil)

func collectEgress(rows pgx.Rows, err error) ([]store.EgressRecord, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.EgressRecord
	for rows.Next() {
		r, err := store.ScanEgress(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, r)
	}
	return out, classify(rows.Err())
}

// AddEgressRequest implements store.EgressRecords.
func (s *Store) AddEgressRequest(ctx context.Context, r store.EgressRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO egress_requests (tenant, thread_id, request_id, agent, run_id, sandbox_id, host, port,
		tool_call_id, agent_path, created_at, status) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`,
		r.Tenant, r.ThreadID, r.RequestID, r.Agent, r.RunID, r.SandboxID, r.Host, r.Port, r.ToolCallID, r.AgentPath,
		store.Nanos(r.Created), string(store.EgressPending))
	return classify(err)
}

// EgressRequest implements store.EgressRecords.
func (s *Store) EgressRequest(ctx context.Context, threadID, requestID string) (store.EgressRecord, error) {
	r, err := store.ScanEgress(s.pool.QueryRow(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = $1 AND request_id = $2`, threadID, requestID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.EgressRecord{}, fmt.Errorf("egress request %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
	}
	return r, classify(err)
}

// DecideEgressRequest implements store.EgressRecords. The row is locked,
// so that two replicas deciding at once cannot both decide it.
func (s *Store) DecideEgressRequest(ctx context.Context, threadID, requestID string, d store.EgressDecision) (store.EgressRecord, error) {
	var out store.EgressRecord
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := store.ScanEgress(tx.QueryRow(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = $1 AND request_id = $2 FOR UPDATE`, threadID, requestID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("egress request %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
		}
		if err != nil {
			return err
		}
		if r.Status != store.EgressPending {
			return fmt.Errorf("egress request %s of thread %s is %s: %w", requestID, threadID, r.Status, store.ErrEgressDecided)
		}
		if _, err := tx.Exec(ctx, `UPDATE egress_requests SET status = $1, scope = $2, decided_by = $3, decided_at = $4, reason = $5
			WHERE thread_id = $6 AND request_id = $7`, string(d.Status), string(d.Scope), d.DecidedBy, store.Nanos(d.Decided), d.Reason, threadID, requestID); err != nil {
			return err
		}
		r.Status, r.Scope, r.DecidedBy, r.Decided, r.Reason = d.Status, d.Scope, d.DecidedBy, d.Decided, d.Reason
		out = r
		return nil
	})
	return out, err
}

// PendingEgress implements store.EgressRecords.
func (s *Store) PendingEgress(ctx context.Context, threadID string) ([]store.EgressRecord, error) {
	return collectEgress(s.pool.Query(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = $1 AND status = $2
		ORDER BY created_at, request_id`, threadID, string(store.EgressPending)))
}

// ListEgressGrants implements store.EgressRecords.
func (s *Store) ListEgressGrants(ctx context.Context, q store.EgressQuery) ([]store.EgressRecord, string, error) {
	args := []any{q.Tenant, string(store.EgressApproved)}
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	where := `tenant = $1 AND status = $2`
	if q.ThreadID != "" {
		where += ` AND thread_id = ` + arg(q.ThreadID)
	} else {
		where += ` AND agent = ` + arg(q.Agent)
	}
	if q.PageToken != "" {
		at, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		a := arg(at)
		where += ` AND (decided_at < ` + a + ` OR (decided_at = ` + a + ` AND request_id < ` + arg(id) + `))`
	}
	list, err := collectEgress(s.pool.Query(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE `+where+`
		ORDER BY decided_at DESC, request_id DESC LIMIT `+arg(q.PageSize+1), args...))
	if err != nil {
		return nil, "", err
	}
	page, next := store.EgressGrantPage(list, q.PageSize)
	return page, next, nil
}

// EgressGrants implements store.EgressRecords.
func (s *Store) EgressGrants(ctx context.Context, tenant, agent, threadID string) ([]store.EgressRecord, error) {
	return collectEgress(s.pool.Query(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE tenant = $1 AND status = $2 AND NOT revoked
		AND ((scope = $3 AND thread_id = $4) OR (scope = $5 AND agent = $6)) ORDER BY decided_at, request_id`,
		tenant, string(store.EgressApproved), string(store.EgressScopeThread), threadID, string(store.EgressScopeAgent), agent))
}

// RevokeEgressGrant implements store.EgressRecords.
func (s *Store) RevokeEgressGrant(ctx context.Context, threadID, requestID string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE egress_requests SET revoked = true WHERE thread_id = $1 AND request_id = $2 AND status = $3`,
		threadID, requestID, string(store.EgressApproved))
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("egress grant %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
	}
	return nil
}
