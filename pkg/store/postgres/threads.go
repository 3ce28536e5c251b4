package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// CreateThread implements agent.Store.
func (s *Store) CreateThread(ctx context.Context, t agent.Thread) error {
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = t.CreatedAt
	}
	md := t.Metadata
	if md == nil {
		md = map[string]string{}
	}
	mdJSON, err := store.JSON(md)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO threads (id, created_at, updated_at, metadata, sandbox_id, tenant) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO NOTHING`, t.ID, store.Nanos(t.CreatedAt), store.Nanos(t.UpdatedAt), mdJSON, t.SandboxID, store.TenantOf(t))
		if err != nil {
			return fmt.Errorf("create thread %s: %w", t.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("create thread %s: %w", t.ID, agent.ErrConflict)
		}
		return writeLabels(ctx, tx, t.ID, md)
	})
}

func writeLabels(ctx context.Context, tx pgx.Tx, id string, md map[string]string) error {
	if len(md) == 0 {
		return nil
	}
	keys := make([]string, 0, len(md))
	values := make([]string, 0, len(md))
	for k, v := range md {
		keys, values = append(keys, k), append(values, v)
	}
	_, err := tx.Exec(ctx, `INSERT INTO thread_labels (thread_id, key, value) SELECT $1, * FROM unnest($2::text[], $3::text[])
		ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value`, id, keys, values)
	if err != nil {
		return fmt.Errorf("labels of %s: %w", id, err)
	}
	return nil
}

// LoadThread implements agent.Store.
func (s *Store) LoadThread(ctx context.Context, id string) (*agent.ThreadData, error) {
	var d *agent.ThreadData
	err := s.read(ctx, func(tx pgx.Tx) error {
		var (
			count int
			err   error
		)
		d, count, err = loadThread(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := loadRuns(ctx, tx, map[string]*agent.ThreadData{id: d}); err != nil {
			return err
		}
		if err := loadMessages(ctx, tx, d, count); err != nil {
			return err
		}
		if err := loadCheckpoints(ctx, tx, d); err != nil {
			return err
		}
		return loadFiles(ctx, tx, d)
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// threadColumns are what scanThread reads.
const threadColumns = `t.id, t.created_at, t.updated_at, t.metadata, t.sandbox_id, t.message_count, t.state, t.interrupt, t.tenant`

// scanThread decodes one row of threadColumns and returns the thread with
// its state and the length of its log.
func scanThread(row pgx.Row) (*agent.ThreadData, int, error) {
	var (
		d                agent.ThreadData
		created, updated int64
		md, st           string
		intr             *string
		count            int
	)
	if err := row.Scan(&d.Thread.ID, &created, &updated, &md, &d.Thread.SandboxID, &count, &st, &intr, &d.Thread.Tenant); err != nil {
		return nil, 0, err
	}
	id := d.Thread.ID
	d.Thread.CreatedAt, d.Thread.UpdatedAt = store.FromNanos(created), store.FromNanos(updated)
	if err := json.Unmarshal([]byte(md), &d.Thread.Metadata); err != nil {
		return nil, 0, fmt.Errorf("thread %s: metadata: %w", id, err)
	}
	var sv store.State
	if err := json.Unmarshal([]byte(st), &sv); err != nil {
		return nil, 0, fmt.Errorf("thread %s: state: %w", id, err)
	}
	d.Todos, d.Summary, d.Private, d.Pending = sv.Todos, sv.Summary, sv.Private, sv.Pending
	if intr != nil {
		d.Interrupt = new(agent.PendingInterrupt)
		if err := json.Unmarshal([]byte(*intr), d.Interrupt); err != nil {
			return nil, 0, fmt.Errorf("thread %s: interrupt: %w", id, err)
		}
	}
	return &d, count, nil
}

// querier is a transaction or the pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func loadThread(ctx context.Context, q querier, id string) (*agent.ThreadData, int, error) {
	d, count, err := scanThread(q.QueryRow(ctx, `SELECT `+threadColumns+` FROM threads t WHERE t.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fmt.Errorf("load thread %s: %w", id, agent.ErrThreadNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load thread %s: %w", id, err)
	}
	return d, count, nil
}

// loadRuns sets the last run and the usage summed over all runs of each
// thread in byID.
func loadRuns(ctx context.Context, tx pgx.Tx, byID map[string]*agent.ThreadData) error {
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, `SELECT thread_id, record FROM runs WHERE thread_id = ANY($1) AND status <> $2 ORDER BY ord`, ids, string(agent.StatusQueued))
	if err != nil {
		return fmt.Errorf("run records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, rec string
		if err := rows.Scan(&id, &rec); err != nil {
			return fmt.Errorf("run records: %w", err)
		}
		r := new(agent.RunRecord)
		if err := json.Unmarshal([]byte(rec), r); err != nil {
			return fmt.Errorf("thread %s: run record: %w", id, err)
		}
		d := byID[id]
		d.Usage = d.Usage.Add(r.Usage)
		d.LastRun = r
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("run records: %w", err)
	}
	return nil
}

func loadMessages(ctx context.Context, tx pgx.Tx, d *agent.ThreadData, count int) error {
	rows, err := tx.Query(ctx, `SELECT idx, body FROM messages WHERE thread_id = $1 ORDER BY idx`, d.Thread.ID)
	if err != nil {
		return fmt.Errorf("thread %s: messages: %w", d.Thread.ID, err)
	}
	defer rows.Close()
	d.Messages = make([]agent.Message, 0, count)
	for rows.Next() {
		var (
			idx  int
			body string
		)
		if err := rows.Scan(&idx, &body); err != nil {
			return fmt.Errorf("thread %s: messages: %w", d.Thread.ID, err)
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
		return fmt.Errorf("thread %s: messages: %w", d.Thread.ID, err)
	}
	if len(d.Messages) != count {
		return fmt.Errorf("thread %s: %d messages stored, %d recorded", d.Thread.ID, len(d.Messages), count)
	}
	return nil
}

func loadCheckpoints(ctx context.Context, tx pgx.Tx, d *agent.ThreadData) error {
	rows, err := tx.Query(ctx, `SELECT id, run_id, phase, step, message_count, created_at FROM checkpoints WHERE thread_id = $1 ORDER BY id`, d.Thread.ID)
	if err != nil {
		return fmt.Errorf("thread %s: checkpoints: %w", d.Thread.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			c       agent.CheckpointInfo
			created int64
		)
		if err := rows.Scan(&c.ID, &c.RunID, &c.Phase, &c.Step, &c.MessageCount, &created); err != nil {
			return fmt.Errorf("thread %s: checkpoints: %w", d.Thread.ID, err)
		}
		c.CreatedAt = store.FromNanos(created)
		d.Checkpoints = append(d.Checkpoints, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("thread %s: checkpoints: %w", d.Thread.ID, err)
	}
	return nil
}

func loadFiles(ctx context.Context, tx pgx.Tx, d *agent.ThreadData) error {
	rows, err := tx.Query(ctx, `SELECT path, doc FROM thread_files WHERE thread_id = $1`, d.Thread.ID)
	if err != nil {
		return fmt.Errorf("thread %s: state files: %w", d.Thread.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var p, doc string
		if err := rows.Scan(&p, &doc); err != nil {
			return fmt.Errorf("thread %s: state files: %w", d.Thread.ID, err)
		}
		if d.Files == nil {
			d.Files = map[string]json.RawMessage{}
		}
		d.Files[p] = json.RawMessage(doc)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("thread %s: state files: %w", d.Thread.ID, err)
	}
	return nil
}

// SetSandbox implements store.Threads.
func (s *Store) SetSandbox(ctx context.Context, threadID, sandboxID string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE threads SET sandbox_id = $1 WHERE id = $2`, sandboxID, threadID)
	if err != nil {
		return classify(fmt.Errorf("set sandbox of %s: %w", threadID, err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set sandbox of %s: %w", threadID, agent.ErrThreadNotFound)
	}
	return nil
}

// DeleteThread implements store.Threads.
func (s *Store) DeleteThread(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		// Its workspace snapshots no other thread names go to the
		// deletion queue (store.ThreadSnapshots) with the thread.
		if err := queueUnshared(ctx, tx, id, time.Now(), "true"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM threads WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("delete thread %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
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
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.PageToken != "" {
		u, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `(t.updated_at, t.id) < (`+arg(u)+`, `+arg(id)+`)`)
	}
	if q.Tenant != "" {
		where = append(where, `t.tenant = `+arg(q.Tenant))
	}
	for k, v := range q.Labels {
		where = append(where, `EXISTS (SELECT 1 FROM thread_labels l WHERE l.thread_id = t.id AND l.key = `+arg(k)+` AND l.value = `+arg(v)+`)`)
	}
	const lastStatus = `(SELECT status FROM runs r WHERE r.thread_id = t.id AND r.status <> 'QUEUED' ORDER BY ord DESC LIMIT 1)`
	switch q.Status {
	case agent.ThreadInterrupted:
		where = append(where, `t.interrupt IS NOT NULL`)
	case agent.ThreadRunning:
		where = append(where, `t.interrupt IS NULL AND `+lastStatus+` = `+arg(string(agent.StatusRunning)))
	case agent.ThreadIdle:
		where = append(where, `t.interrupt IS NULL AND `+lastStatus+` IS DISTINCT FROM `+arg(string(agent.StatusRunning)))
	}
	query := `SELECT ` + threadColumns + ` FROM threads t`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY t.updated_at DESC, t.id DESC LIMIT ` + arg(size+1)

	var (
		out  []store.ThreadInfo
		next string
	)
	err := s.read(ctx, func(tx pgx.Tx) error {
		out, next = nil, ""
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		defer rows.Close()
		byID := map[string]*agent.ThreadData{}
		for rows.Next() {
			d, n, err := scanThread(rows)
			if err != nil {
				return fmt.Errorf("list threads: %w", err)
			}
			out = append(out, store.ThreadInfo{ThreadData: d, MessageCount: n})
			byID[d.Thread.ID] = d
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		if len(out) > size {
			delete(byID, out[size].Thread.ID)
			out = out[:size]
			last := out[size-1].Thread
			next = store.EncodePageToken(store.Nanos(last.UpdatedAt), last.ID)
		}
		if len(byID) == 0 {
			return nil
		}
		return loadRuns(ctx, tx, byID)
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// Thread implements store.Threads.
func (s *Store) Thread(ctx context.Context, id string) (agent.Thread, error) {
	d, _, err := loadThread(ctx, s.pool, id)
	if err != nil {
		return agent.Thread{}, classify(err)
	}
	return d.Thread, nil
}

// MessageRange implements store.MessageRanger.
func (s *Store) MessageRange(ctx context.Context, id string, first, limit int) (store.MessageRange, error) {
	var out store.MessageRange
	err := s.read(ctx, func(tx pgx.Tx) error {
		out = store.MessageRange{}
		err := tx.QueryRow(ctx, `SELECT message_count, tenant FROM threads WHERE id = $1`, id).Scan(&out.Total, &out.Tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("load thread %s: %w", id, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("load thread %s: %w", id, err)
		}
		if first >= out.Total || limit <= 0 {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT idx, body FROM messages WHERE thread_id = $1 AND idx >= $2 ORDER BY idx LIMIT $3`, id, first, limit)
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
