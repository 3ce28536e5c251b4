package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// CreateThread implements agent.Store.
func (s *Store) CreateThread(ctx context.Context, t agent.Thread) error {
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = t.CreatedAt
	}
	md, err := store.JSON(nonNil(t.Metadata))
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO threads (id, created_at, updated_at, metadata, sandbox_id, tenant) VALUES (?, ?, ?, ?, ?, ?)`,
			t.ID, store.Nanos(t.CreatedAt), store.Nanos(t.UpdatedAt), md, t.SandboxID, store.TenantOf(t))
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE") || strings.Contains(err.Error(), "PRIMARY KEY") {
				return fmt.Errorf("create thread %s: %w", t.ID, agent.ErrConflict)
			}
			return fmt.Errorf("create thread %s: %w", t.ID, err)
		}
		return writeLabels(ctx, tx, t.ID, t.Metadata)
	})
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func writeLabels(ctx context.Context, tx *sql.Tx, id string, md map[string]string) error {
	for k, v := range md {
		if _, err := tx.ExecContext(ctx, `INSERT INTO thread_labels (thread_id, key, value) VALUES (?, ?, ?)
			ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value`, id, k, v); err != nil {
			return err
		}
	}
	return nil
}

// LoadThread implements agent.Store.
func (s *Store) LoadThread(ctx context.Context, id string) (*agent.ThreadData, error) {
	var d *agent.ThreadData
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		d, _, err = s.loadThread(ctx, tx, id, true)
		return err
	})
	return d, err
}

// loadThread reads one thread; full adds the message log and checkpoints.
func (s *Store) loadThread(ctx context.Context, q *sql.Tx, id string, full bool) (*agent.ThreadData, int, error) {
	var (
		created, updated int64
		md, st           string
		intr             sql.NullString
		count            int
		d                agent.ThreadData
	)
	err := q.QueryRowContext(ctx, `SELECT created_at, updated_at, metadata, sandbox_id, message_count, state, interrupt, tenant FROM threads WHERE id = ?`, id).
		Scan(&created, &updated, &md, &d.Thread.SandboxID, &count, &st, &intr, &d.Thread.Tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("load thread %s: %w", id, agent.ErrThreadNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load thread %s: %w", id, err)
	}
	d.Thread.ID, d.Thread.CreatedAt, d.Thread.UpdatedAt = id, store.FromNanos(created), store.FromNanos(updated)
	if err := json.Unmarshal([]byte(md), &d.Thread.Metadata); err != nil {
		return nil, 0, fmt.Errorf("load thread %s: metadata: %w", id, err)
	}
	var sv store.State
	if err := json.Unmarshal([]byte(st), &sv); err != nil {
		return nil, 0, fmt.Errorf("load thread %s: state: %w", id, err)
	}
	d.Todos, d.Summary, d.Private, d.Pending = sv.Todos, sv.Summary, sv.Private, sv.Pending
	if intr.Valid {
		d.Interrupt = new(agent.PendingInterrupt)
		if err := json.Unmarshal([]byte(intr.String), d.Interrupt); err != nil {
			return nil, 0, fmt.Errorf("load thread %s: interrupt: %w", id, err)
		}
	}
	if err := s.loadRuns(ctx, q, &d); err != nil {
		return nil, 0, err
	}
	if full {
		if err := loadMessages(ctx, q, &d, count); err != nil {
			return nil, 0, err
		}
		if err := loadCheckpoints(ctx, q, &d); err != nil {
			return nil, 0, err
		}
		if err := loadFiles(ctx, q, &d); err != nil {
			return nil, 0, err
		}
	}
	return &d, count, nil
}

func (s *Store) loadRuns(ctx context.Context, q *sql.Tx, d *agent.ThreadData) error {
	rows, err := q.QueryContext(ctx, `SELECT record FROM runs WHERE thread_id = ? AND status != ? ORDER BY ord`, d.Thread.ID, string(agent.StatusQueued))
	if err != nil {
		return err
	}
	defer rows.Close()
	var last *agent.RunRecord
	var usage model.Usage
	for rows.Next() {
		var rec string
		if err := rows.Scan(&rec); err != nil {
			return err
		}
		r := new(agent.RunRecord)
		if err := json.Unmarshal([]byte(rec), r); err != nil {
			return fmt.Errorf("run record: %w", err)
		}
		usage = usage.Add(r.Usage)
		last = r
	}
	d.LastRun, d.Usage = last, usage
	return rows.Err()
}

func loadMessages(ctx context.Context, q *sql.Tx, d *agent.ThreadData, count int) error {
	rows, err := q.QueryContext(ctx, `SELECT idx, body FROM messages WHERE thread_id = ? ORDER BY idx`, d.Thread.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	d.Messages = make([]agent.Message, 0, count)
	for rows.Next() {
		var idx int
		var body string
		if err := rows.Scan(&idx, &body); err != nil {
			return err
		}
		if idx != len(d.Messages) {
			return fmt.Errorf("thread %s: message log has a gap at %d", d.Thread.ID, len(d.Messages))
		}
		var m agent.Message
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return fmt.Errorf("thread %s: message %d: %w", d.Thread.ID, idx, err)
		}
		d.Messages = append(d.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(d.Messages) != count {
		return fmt.Errorf("thread %s: %d messages stored, %d recorded", d.Thread.ID, len(d.Messages), count)
	}
	return nil
}

func loadFiles(ctx context.Context, q *sql.Tx, d *agent.ThreadData) error {
	rows, err := q.QueryContext(ctx, `SELECT path, doc FROM thread_files WHERE thread_id = ? ORDER BY path`, d.Thread.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p, doc string
		if err := rows.Scan(&p, &doc); err != nil {
			return err
		}
		if d.Files == nil {
			d.Files = map[string]json.RawMessage{}
		}
		d.Files[p] = json.RawMessage(doc)
	}
	return rows.Err()
}

func loadCheckpoints(ctx context.Context, q *sql.Tx, d *agent.ThreadData) error {
	rows, err := q.QueryContext(ctx, `SELECT id, run_id, phase, step, message_count, created_at FROM checkpoints WHERE thread_id = ? ORDER BY id`, d.Thread.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c agent.CheckpointInfo
		var created int64
		if err := rows.Scan(&c.ID, &c.RunID, &c.Phase, &c.Step, &c.MessageCount, &created); err != nil {
			return err
		}
		c.CreatedAt = store.FromNanos(created)
		d.Checkpoints = append(d.Checkpoints, c)
	}
	return rows.Err()
}

// SetSandbox implements store.Threads.
func (s *Store) SetSandbox(ctx context.Context, threadID, sandboxID string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE threads SET sandbox_id = ? WHERE id = ?`, sandboxID, threadID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set sandbox of %s: %w", threadID, agent.ErrThreadNotFound)
	}
	return nil
}

// DeleteThread implements store.Threads.
func (s *Store) DeleteThread(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		// Its workspace snapshots no other thread names go to the
		// deletion queue (store.ThreadSnapshots) with the thread.
		if err := queueUnshared(ctx, tx, id, time.Now(), "true"); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM threads WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("delete thread %s: %w", id, agent.ErrThreadNotFound)
		}
		return nil
	})
}

// ListThreads implements store.Threads.
func (s *Store) ListThreads(ctx context.Context, q store.ListQuery) ([]store.ThreadInfo, string, error) {
	size := q.Size()
	var (
		where []string
		args  []any
	)
	if q.PageToken != "" {
		u, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `(t.updated_at < ? OR (t.updated_at = ? AND t.id < ?))`)
		args = append(args, u, u, id)
	}
	if q.Tenant != "" {
		where = append(where, `t.tenant = ?`)
		args = append(args, q.Tenant)
	}
	for k, v := range q.Labels {
		where = append(where, `EXISTS (SELECT 1 FROM thread_labels l WHERE l.thread_id = t.id AND l.key = ? AND l.value = ?)`)
		args = append(args, k, v)
	}
	switch q.Status {
	case agent.ThreadInterrupted:
		where = append(where, `t.interrupt IS NOT NULL`)
	case agent.ThreadRunning:
		where = append(where, `t.interrupt IS NULL AND (SELECT status FROM runs r WHERE r.thread_id = t.id AND r.status != ? ORDER BY ord DESC LIMIT 1) = ?`)
		args = append(args, string(agent.StatusQueued), string(agent.StatusRunning))
	case agent.ThreadIdle:
		where = append(where, `t.interrupt IS NULL AND COALESCE((SELECT status FROM runs r WHERE r.thread_id = t.id AND r.status != ? ORDER BY ord DESC LIMIT 1), '') != ?`)
		args = append(args, string(agent.StatusQueued), string(agent.StatusRunning))
	}
	query := `SELECT t.id, t.updated_at FROM threads t`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY t.updated_at DESC, t.id DESC LIMIT ?`
	args = append(args, size+1)

	var out []store.ThreadInfo
	next := ""
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		type key struct {
			id string
			u  int64
		}
		var keys []key
		for rows.Next() {
			var k key
			if err := rows.Scan(&k.id, &k.u); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(keys) > size {
			keys = keys[:size]
			last := keys[size-1]
			next = store.EncodePageToken(last.u, last.id)
		}
		for _, k := range keys {
			d, n, err := s.loadThread(ctx, tx, k.id, false)
			if err != nil {
				return err
			}
			out = append(out, store.ThreadInfo{ThreadData: d, MessageCount: n})
		}
		return nil
	})
	return out, next, err
}

// Thread implements store.Threads.
func (s *Store) Thread(ctx context.Context, id string) (agent.Thread, error) {
	var (
		t                agent.Thread
		created, updated int64
		md               string
	)
	err := s.db.QueryRowContext(ctx, `SELECT created_at, updated_at, metadata, sandbox_id, tenant FROM threads WHERE id = ?`, id).
		Scan(&created, &updated, &md, &t.SandboxID, &t.Tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("thread %s: %w", id, agent.ErrThreadNotFound)
	}
	if err != nil {
		return t, err
	}
	t.ID, t.CreatedAt, t.UpdatedAt = id, store.FromNanos(created), store.FromNanos(updated)
	if err := json.Unmarshal([]byte(md), &t.Metadata); err != nil {
		return t, fmt.Errorf("thread %s: metadata: %w", id, err)
	}
	return t, nil
}

// MessageRange implements store.MessageRanger.
func (s *Store) MessageRange(ctx context.Context, id string, first, limit int) (store.MessageRange, error) {
	var out store.MessageRange
	err := s.tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT message_count, tenant FROM threads WHERE id = ?`, id).Scan(&out.Total, &out.Tenant)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("load thread %s: %w", id, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("load thread %s: %w", id, err)
		}
		if first >= out.Total || limit <= 0 {
			return nil
		}
		rows, err := tx.QueryContext(ctx, `SELECT idx, body FROM messages WHERE thread_id = ? AND idx >= ? ORDER BY idx LIMIT ?`, id, first, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				idx  int
				body string
				m    agent.Message
			)
			if err := rows.Scan(&idx, &body); err != nil {
				return err
			}
			if idx != first+len(out.Messages) {
				return fmt.Errorf("thread %s: message log has a gap at %d", id, first+len(out.Messages))
			}
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				return fmt.Errorf("thread %s: message %d: %w", id, idx, err)
			}
			out.Messages = append(out.Messages, m)
		}
		return rows.Err()
	})
	return out, err
}
