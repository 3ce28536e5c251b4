package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
	sqlitedrv "modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// migrations are applied in order; schema_version holds how many ran.
var migrations = []string{
	`CREATE TABLE threads (
		id            TEXT PRIMARY KEY,
		created_at    INTEGER NOT NULL,
		updated_at    INTEGER NOT NULL,
		metadata      TEXT NOT NULL DEFAULT '{}',
		sandbox_id    TEXT NOT NULL DEFAULT '',
		message_count INTEGER NOT NULL DEFAULT 0,
		state         TEXT NOT NULL DEFAULT '{}',
		interrupt     TEXT
	);
	CREATE INDEX threads_updated ON threads (updated_at DESC, id DESC);
	CREATE TABLE thread_labels (
		thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		key       TEXT NOT NULL,
		value     TEXT NOT NULL,
		PRIMARY KEY (thread_id, key)
	) WITHOUT ROWID;
	CREATE INDEX thread_labels_kv ON thread_labels (key, value);
	CREATE TABLE messages (
		thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		idx       INTEGER NOT NULL,
		body      TEXT NOT NULL,
		PRIMARY KEY (thread_id, idx)
	) WITHOUT ROWID;
	CREATE TABLE runs (
		ord       INTEGER PRIMARY KEY AUTOINCREMENT,
		run_id    TEXT NOT NULL UNIQUE,
		thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		status    TEXT NOT NULL,
		record    TEXT NOT NULL
	);
	CREATE INDEX runs_thread ON runs (thread_id, ord);
	CREATE INDEX runs_status ON runs (status);
	CREATE TABLE checkpoints (
		id            INTEGER PRIMARY KEY AUTOINCREMENT,
		thread_id     TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id        TEXT NOT NULL,
		phase         TEXT NOT NULL,
		step          INTEGER NOT NULL,
		message_count INTEGER NOT NULL,
		created_at    INTEGER NOT NULL
	);
	CREATE INDEX checkpoints_thread ON checkpoints (thread_id, id);`,
	`CREATE TABLE thread_files (
		thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		path      TEXT NOT NULL,
		doc       TEXT NOT NULL,
		PRIMARY KEY (thread_id, path)
	) WITHOUT ROWID;`,
	// Tenancy: rows from before it belong to tenant "default".
	`ALTER TABLE threads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	CREATE INDEX threads_tenant ON threads (tenant, updated_at DESC, id DESC);`,
	// Leases of replicated agentd (store.Leases).
	`CREATE TABLE thread_leases (
		thread_id  TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
		holder     TEXT NOT NULL,
		epoch      INTEGER NOT NULL,
		expires_at INTEGER NOT NULL,
		released   INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID;`,
	// The run event log of replicated agentd (store.RunEvents).
	`CREATE TABLE run_events (
		thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id    TEXT NOT NULL,
		seq       INTEGER NOT NULL,
		start     INTEGER NOT NULL,
		terminal  INTEGER NOT NULL,
		body      BLOB NOT NULL,
		PRIMARY KEY (run_id, seq)
	) WITHOUT ROWID;
	CREATE INDEX run_events_thread ON run_events (thread_id, run_id);`,
	// Cancel requests of replicated agentd (store.Leases.RequestCancel).
	`ALTER TABLE thread_leases ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX thread_leases_cancel ON thread_leases (holder) WHERE cancel_requested;`,
	// Preview URLs (store.Previews).
	`CREATE TABLE previews (
		id         TEXT PRIMARY KEY,
		thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		tenant     TEXT NOT NULL,
		port       INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL,
		revoked    INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID;
	CREATE INDEX previews_thread ON previews (thread_id, expires_at);`,
}

// Options configure Open.
type Options struct {
	// BusyTimeout is how long a write waits for the database lock
	// (default 5 s).
	BusyTimeout time.Duration
	// CheckpointRetention is how many checkpoint records are kept per
	// thread (default agent.DefaultCheckpointRetention).
	CheckpointRetention int
}

// Store is the SQLite thread store.
type Store struct {
	db        *sql.DB
	retention int
}

var _ store.Threads = (*Store)(nil)

// Open opens (creating if needed) the database at path and migrates it.
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.CheckpointRetention <= 0 {
		o.CheckpointRetention = agent.DefaultCheckpointRetention
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(" + strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open thread store %s: %w", path, err)
	}
	// One writer at a time is what SQLite does anyway; a single connection
	// also keeps transactions from waiting on each other's locks.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, retention: o.CheckpointRetention}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open thread store %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this agentd (%d)", v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
			_, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?`, i+1)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// busy marks SQLite's BUSY and LOCKED results with store.ErrBusy.
func busy(err error) error {
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		if c := se.Code() & 0xff; c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED {
			return fmt.Errorf("%w: %v", store.ErrBusy, err)
		}
	}
	return err
}

func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return busy(err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return busy(err)
	}
	return busy(tx.Commit())
}

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
		d, _, err = s.load(ctx, tx, id, true)
		return err
	})
	return d, err
}

// load reads one thread; full adds the message log and checkpoints.
func (s *Store) load(ctx context.Context, q *sql.Tx, id string, full bool) (*agent.ThreadData, int, error) {
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
	rows, err := q.QueryContext(ctx, `SELECT record FROM runs WHERE thread_id = ? ORDER BY ord`, d.Thread.ID)
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

// SaveCheckpoint implements agent.Store: one transaction.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var count int
		var md string
		var updated int64
		err := tx.QueryRowContext(ctx, `SELECT message_count, metadata, updated_at FROM threads WHERE id = ?`, cp.ThreadID).Scan(&count, &md, &updated)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		if cp.Fence != nil {
			cur, err := leaseRow(ctx, tx, cp.ThreadID)
			if err != nil {
				return fmt.Errorf("checkpoint %s: lease: %w", cp.ThreadID, err)
			}
			if err := store.CheckFence(cp.ThreadID, cp.Fence, cur); err != nil {
				return err
			}
		}
		if cp.Base != count {
			return fmt.Errorf("checkpoint %s: base %d, stored %d messages: %w", cp.ThreadID, cp.Base, count, agent.ErrConflict)
		}
		for _, e := range cp.EditCalls {
			if err := editCall(ctx, tx, cp.ThreadID, e); err != nil {
				return err
			}
		}
		for i, m := range cp.Append {
			body, err := store.JSON(m)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO messages (thread_id, idx, body) VALUES (?, ?, ?)`, cp.ThreadID, count+i, body); err != nil {
				return fmt.Errorf("append message %d: %w", count+i, err)
			}
		}
		count += len(cp.Append)
		for p, doc := range cp.Files {
			var err error
			if doc == nil || string(doc) == "null" {
				_, err = tx.ExecContext(ctx, `DELETE FROM thread_files WHERE thread_id = ? AND path = ?`, cp.ThreadID, p)
			} else {
				_, err = tx.ExecContext(ctx, `INSERT INTO thread_files (thread_id, path, doc) VALUES (?, ?, ?)
					ON CONFLICT (thread_id, path) DO UPDATE SET doc = excluded.doc`, cp.ThreadID, p, string(doc))
			}
			if err != nil {
				return fmt.Errorf("state file %s: %w", p, err)
			}
		}
		if cp.Metadata != nil {
			var err error
			if md, err = store.MergeMetadata(md, cp.Metadata); err != nil {
				return err
			}
			if err := writeLabels(ctx, tx, cp.ThreadID, cp.Metadata); err != nil {
				return err
			}
		}
		st, err := store.JSON(store.State{Todos: cp.Todos, Summary: cp.Summary, Private: cp.Private, Pending: cp.Pending})
		if err != nil {
			return err
		}
		var intr any
		if cp.Interrupt != nil {
			b, err := store.JSON(cp.Interrupt)
			if err != nil {
				return err
			}
			intr = b
		}
		if n := store.Nanos(cp.CreatedAt); n > updated {
			updated = n
		}
		if _, err := tx.ExecContext(ctx, `UPDATE threads SET message_count = ?, metadata = ?, state = ?, interrupt = ?, updated_at = ? WHERE id = ?`,
			count, md, st, intr, updated, cp.ThreadID); err != nil {
			return err
		}
		if cp.Run.RunID != "" {
			rec, err := store.JSON(cp.Run)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO runs (run_id, thread_id, status, record) VALUES (?, ?, ?, ?)
				ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, record = excluded.record`,
				cp.Run.RunID, cp.ThreadID, string(cp.Run.Status), rec); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (thread_id, run_id, phase, step, message_count, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			cp.ThreadID, cp.Run.RunID, string(cp.Phase), cp.Step, count, store.Nanos(cp.CreatedAt)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE thread_id = ? AND id NOT IN
			(SELECT id FROM checkpoints WHERE thread_id = ? ORDER BY id DESC LIMIT ?)`, cp.ThreadID, cp.ThreadID, s.retention)
		return err
	})
}

// editCall rewrites the arguments of one stored tool call.
func editCall(ctx context.Context, tx *sql.Tx, threadID string, e agent.CallEdit) error {
	var body string
	err := tx.QueryRowContext(ctx, `SELECT body FROM messages WHERE thread_id = ? AND idx = ?`, threadID, e.MessageIndex).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("checkpoint %s: no message %d: %w", threadID, e.MessageIndex, agent.ErrConflict)
	}
	if err != nil {
		return err
	}
	nb, err := store.EditCall(body, e)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", threadID, err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE messages SET body = ? WHERE thread_id = ? AND idx = ?`, nb, threadID, e.MessageIndex)
	return err
}

// FailRunningRuns implements agent.Store.
func (s *Store) FailRunningRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT run_id, record FROM runs WHERE status = ?`, message)
}

// FailUnleasedRuns implements store.LeaseStore.
func (s *Store) FailUnleasedRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT r.run_id, r.record FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
		WHERE r.status = ? AND (l.thread_id IS NULL OR l.released)`, message)
}

// failRuns marks the runs query selects (its parameter is RUNNING) FAILED.
func (s *Store) failRuns(ctx context.Context, query, message string) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, string(agent.StatusRunning))
		if err != nil {
			return err
		}
		var recs []agent.RunRecord
		for rows.Next() {
			var id, rec string
			if err := rows.Scan(&id, &rec); err != nil {
				rows.Close()
				return err
			}
			var r agent.RunRecord
			if err := json.Unmarshal([]byte(rec), &r); err != nil {
				rows.Close()
				return err
			}
			recs = append(recs, r)
		}
		rows.Close()
		for _, r := range recs {
			r.Status = agent.StatusFailed
			r.Error = &agent.RunError{Code: agent.CodeInternal, Message: message}
			b, err := store.JSON(r)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, record = ? WHERE run_id = ?`, string(r.Status), b, r.RunID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
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
		where = append(where, `t.interrupt IS NULL AND (SELECT status FROM runs r WHERE r.thread_id = t.id ORDER BY ord DESC LIMIT 1) = ?`)
		args = append(args, string(agent.StatusRunning))
	case agent.ThreadIdle:
		where = append(where, `t.interrupt IS NULL AND COALESCE((SELECT status FROM runs r WHERE r.thread_id = t.id ORDER BY ord DESC LIMIT 1), '') != ?`)
		args = append(args, string(agent.StatusRunning))
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
			d, n, err := s.load(ctx, tx, k.id, false)
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

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, id, holder string, now time.Time, ttl time.Duration) (store.Lease, error) {
	var next store.Lease
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, id).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("lease of %s: %w", id, agent.ErrThreadNotFound)
		}
		cur, err := leaseRow(ctx, tx, id)
		if err != nil {
			return err
		}
		if next, err = store.NextLease(cur, id, holder, now, ttl); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO thread_leases (thread_id, holder, epoch, expires_at, released, cancel_requested) VALUES (?, ?, ?, ?, 0, ?)
			ON CONFLICT (thread_id) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at, released = 0,
				cancel_requested = excluded.cancel_requested`,
			id, next.Holder, next.Epoch, store.Nanos(next.Expires), next.CancelRequested)
		return err
	})
	return next, err
}

// leaseRow reads the thread's lease row (nil without one).
func leaseRow(ctx context.Context, tx *sql.Tx, id string) (*store.Lease, error) {
	l := store.Lease{ThreadID: id}
	var exp int64
	err := tx.QueryRowContext(ctx, `SELECT holder, epoch, expires_at, released, cancel_requested AND NOT released FROM thread_leases WHERE thread_id = ?`, id).
		Scan(&l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.Expires = time.Unix(0, exp)
	return &l, nil
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET expires_at = ? WHERE thread_id = ? AND holder = ? AND epoch = ? AND released = 0 AND expires_at > ?`,
		store.Nanos(now.Add(ttl)), l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	if err != nil {
		return l, busy(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return l, fmt.Errorf("renew lease of %s: %w", l.ThreadID, store.ErrLeaseLost)
	}
	l.Expires = now.Add(ttl)
	return l, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	_, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET released = 1 WHERE thread_id = ? AND holder = ? AND epoch = ?`, l.ThreadID, l.Holder, l.Epoch)
	return busy(err)
}

// HandOffLease implements store.Leases.
func (s *Store) HandOffLease(ctx context.Context, l store.Lease, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET expires_at = MIN(expires_at, ?) WHERE thread_id = ? AND holder = ? AND epoch = ? AND released = 0`,
		store.Nanos(now), l.ThreadID, l.Holder, l.Epoch)
	return busy(err)
}

// ExpiredLeases implements store.Leases.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]store.Lease, error) {
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE released = 0 AND expires_at <= ? ORDER BY expires_at, thread_id`, store.Nanos(now)))
}

// leaseColumns are the columns scanLeases reads, in order. A released
// lease carries no cancel request (the next acquisition resets the
// column).
const leaseColumns = `thread_id, holder, epoch, expires_at, released, cancel_requested AND NOT released`

// scanLeases reads rows of leaseColumns.
func scanLeases(rows *sql.Rows, err error) ([]store.Lease, error) {
	if err != nil {
		return nil, busy(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var exp int64
		if err := rows.Scan(&l.ThreadID, &l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested); err != nil {
			return nil, err
		}
		l.Expires = time.Unix(0, exp)
		out = append(out, l)
	}
	return out, busy(rows.Err())
}

// RequestCancel implements store.Leases.
func (s *Store) RequestCancel(ctx context.Context, id string) (*store.Lease, error) {
	ls, err := scanLeases(s.db.QueryContext(ctx, `UPDATE thread_leases SET cancel_requested = 1 WHERE thread_id = ? AND released = 0 RETURNING `+leaseColumns, id))
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	return &ls[0], nil
}

// CancelRequests implements store.Leases.
func (s *Store) CancelRequests(ctx context.Context, holder string) ([]store.Lease, error) {
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE holder = ? AND cancel_requested AND released = 0 ORDER BY thread_id`, holder))
}

// ThreadLeases implements store.Leases.
func (s *Store) ThreadLeases(ctx context.Context, ids []string) ([]store.Lease, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	marks := strings.Repeat(", ?", len(ids))[2:]
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE thread_id IN (`+marks+`) ORDER BY thread_id`, args...))
}

var _ store.LeaseStore = (*Store)(nil)

// AppendEvents implements store.RunEvents.
func (s *Store) AppendEvents(ctx context.Context, threadID string, f *agent.Fence, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, threadID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if f != nil {
			cur, err := leaseRow(ctx, tx, threadID)
			if err != nil {
				return fmt.Errorf("events of %s: lease: %w", threadID, err)
			}
			if err := store.CheckFence(threadID, f, cur); err != nil {
				return err
			}
		}
		keep := map[string]bool{}
		for _, e := range evs {
			keep[e.RunID] = true
		}
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT run_id FROM run_events WHERE thread_id = ?`, threadID)
		if err != nil {
			return err
		}
		var drop []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if !keep[id] {
				drop = append(drop, id)
			}
		}
		rows.Close()
		for _, id := range drop {
			if _, err := tx.ExecContext(ctx, `DELETE FROM run_events WHERE thread_id = ? AND run_id = ?`, threadID, id); err != nil {
				return err
			}
		}
		for _, e := range evs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO run_events (thread_id, run_id, seq, start, terminal, body) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (run_id, seq) DO NOTHING`, threadID, e.RunID, int64(e.Sequence), e.Start, e.Terminal, e.Body); err != nil {
				return fmt.Errorf("events of %s: %w", threadID, err)
			}
		}
		return nil
	})
}

// ReadEvents implements store.RunEvents.
func (s *Store) ReadEvents(ctx context.Context, threadID string, after uint64, limit int) (store.EventPage, error) {
	var page store.EventPage
	err := s.tx(ctx, func(tx *sql.Tx) error {
		page = store.EventPage{}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, threadID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		// The log holds one run: its events may be stored before its
		// record.
		err := tx.QueryRowContext(ctx, `SELECT run_id FROM run_events WHERE thread_id = ? LIMIT 1`, threadID).Scan(&page.RunID)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT run_id FROM runs WHERE thread_id = ? ORDER BY ord DESC LIMIT 1`, threadID).Scan(&page.RunID)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		var st string
		if err := tx.QueryRowContext(ctx, `SELECT status FROM runs WHERE run_id = ?`, page.RunID).Scan(&st); err == nil {
			page.Status = agent.RunStatus(st)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		from := int64(after)
		rows, err := tx.QueryContext(ctx, `SELECT seq, start, terminal, body FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, page.RunID, from, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		page.Events, err = store.ScanEvents(rows, page.RunID)
		return err
	})
	return page, err
}

// LastSequence implements store.RunEvents.
func (s *Store) LastSequence(ctx context.Context, runID string) (uint64, error) {
	var seq int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = ?`, runID).Scan(&seq); err != nil {
		return 0, busy(err)
	}
	return uint64(seq), nil
}
