package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.EgressRecords = (*Store)(nil)

func collectEgress(rows *sql.Rows, err error) ([]store.EgressRecord, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.EgressRecord
	for rows.Next() {
		r, err := store.ScanEgress(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, classify(rows.Err())
}

// AddEgressRequest implements store.EgressRecords.
func (s *Store) AddEgressRequest(ctx context.Context, r store.EgressRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO egress_requests (tenant, thread_id, request_id, agent, run_id, sandbox_id, host, port,
		tool_call_id, agent_path, created_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		r.Tenant, r.ThreadID, r.RequestID, r.Agent, r.RunID, r.SandboxID, r.Host, r.Port, r.ToolCallID, r.AgentPath,
		store.Nanos(r.Created), string(store.EgressPending))
	return classify(err)
}

// EgressRequest implements store.EgressRecords.
func (s *Store) EgressRequest(ctx context.Context, threadID, requestID string) (store.EgressRecord, error) {
	r, err := store.ScanEgress(s.db.QueryRowContext(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = ? AND request_id = ?`, threadID, requestID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.EgressRecord{}, fmt.Errorf("egress request %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
	}
	return r, classify(err)
}

// DecideEgressRequest implements store.EgressRecords.
func (s *Store) DecideEgressRequest(ctx context.Context, threadID, requestID string, d store.EgressDecision) (store.EgressRecord, error) {
	var out store.EgressRecord
	err := s.tx(ctx, func(tx *sql.Tx) error {
		r, err := store.ScanEgress(tx.QueryRowContext(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = ? AND request_id = ?`, threadID, requestID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("egress request %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
		}
		if err != nil {
			return err
		}
		if r.Status != store.EgressPending {
			return fmt.Errorf("egress request %s of thread %s is %s: %w", requestID, threadID, r.Status, store.ErrEgressDecided)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE egress_requests SET status = ?, scope = ?, decided_by = ?, decided_at = ?, reason = ?
			WHERE thread_id = ? AND request_id = ?`, string(d.Status), string(d.Scope), d.DecidedBy, store.Nanos(d.Decided), d.Reason, threadID, requestID); err != nil {
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
	return collectEgress(s.db.QueryContext(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE thread_id = ? AND status = ?
		ORDER BY created_at, request_id`, threadID, string(store.EgressPending)))
}

// ListEgressGrants implements store.EgressRecords.
func (s *Store) ListEgressGrants(ctx context.Context, q store.EgressQuery) ([]store.EgressRecord, string, error) {
	where, args := `tenant = ? AND status = ?`, []any{q.Tenant, string(store.EgressApproved)}
	if q.ThreadID != "" {
		where, args = where+` AND thread_id = ?`, append(args, q.ThreadID)
	} else {
		where, args = where+` AND agent = ?`, append(args, q.Agent)
	}
	if q.PageToken != "" {
		at, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where, args = where+` AND (decided_at < ? OR (decided_at = ? AND request_id < ?))`, append(args, at, at, id)
	}
	list, err := collectEgress(s.db.QueryContext(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE `+where+`
		ORDER BY decided_at DESC, request_id DESC LIMIT ?`, append(args, q.PageSize+1)...))
	if err != nil {
		return nil, "", err
	}
	page, next := store.EgressGrantPage(list, q.PageSize)
	return page, next, nil
}

// EgressGrants implements store.EgressRecords.
func (s *Store) EgressGrants(ctx context.Context, tenant, agent, threadID string) ([]store.EgressRecord, error) {
	return collectEgress(s.db.QueryContext(ctx, `SELECT `+store.EgressColumns+` FROM egress_requests WHERE tenant = ? AND status = ? AND NOT revoked
		AND ((scope = ? AND thread_id = ?) OR (scope = ? AND agent = ?)) ORDER BY decided_at, request_id`,
		tenant, string(store.EgressApproved), string(store.EgressScopeThread), threadID, string(store.EgressScopeAgent), agent))
}

// RevokeEgressGrant implements store.EgressRecords.
func (s *Store) RevokeEgressGrant(ctx context.Context, threadID, requestID string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE egress_requests SET revoked = 1 WHERE thread_id = ? AND request_id = ? AND status = ?`,
		threadID, requestID, string(store.EgressApproved))
	if err != nil {
		return classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("egress grant %s of thread %s: %w", requestID, threadID, store.ErrEgressNotFound)
	}
	return nil
}
