package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// migrations are applied in order; schema_version holds how many ran.
// Times are Unix nanoseconds (as in the SQLite store: exact round trips and
// the same page tokens); ids compare bytewise (COLLATE "C") whatever the
// database's locale, so pages come in the same order everywhere.
var migrations = []string{
	`CREATE TABLE threads (
		id            TEXT COLLATE "C" PRIMARY KEY,
		created_at    BIGINT NOT NULL,
		updated_at    BIGINT NOT NULL,
		metadata      TEXT NOT NULL DEFAULT '{}',
		sandbox_id    TEXT NOT NULL DEFAULT '',
		message_count INTEGER NOT NULL DEFAULT 0,
		state         TEXT NOT NULL DEFAULT '{}',
		interrupt     TEXT
	);
	CREATE INDEX threads_updated ON threads (updated_at DESC, id DESC);
	CREATE TABLE thread_labels (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		key       TEXT NOT NULL,
		value     TEXT NOT NULL,
		PRIMARY KEY (thread_id, key)
	);
	CREATE INDEX thread_labels_kv ON thread_labels (key, value);
	CREATE TABLE messages (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		idx       INTEGER NOT NULL,
		body      TEXT NOT NULL,
		PRIMARY KEY (thread_id, idx)
	);
	CREATE TABLE runs (
		ord       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		run_id    TEXT NOT NULL UNIQUE,
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		status    TEXT NOT NULL,
		record    TEXT NOT NULL
	);
	CREATE INDEX runs_thread ON runs (thread_id, ord);
	CREATE INDEX runs_status ON runs (status);
	CREATE TABLE checkpoints (
		id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		thread_id     TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id        TEXT NOT NULL,
		phase         TEXT NOT NULL,
		step          INTEGER NOT NULL,
		message_count INTEGER NOT NULL,
		created_at    BIGINT NOT NULL
	);
	CREATE INDEX checkpoints_thread ON checkpoints (thread_id, id);
	CREATE TABLE thread_files (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		path      TEXT NOT NULL,
		doc       TEXT NOT NULL,
		PRIMARY KEY (thread_id, path)
	);`,
	// Tenancy: rows from before it belong to tenant "default".
	`ALTER TABLE threads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	CREATE INDEX threads_tenant ON threads (tenant, updated_at DESC, id DESC);`,
	// Leases of replicated agentd (store.Leases).
	`CREATE TABLE thread_leases (
		thread_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
		holder     TEXT NOT NULL,
		epoch      BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		released   BOOLEAN NOT NULL DEFAULT false
	);`,
	// The run event log of replicated agentd (store.RunEvents).
	`CREATE TABLE run_events (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id    TEXT COLLATE "C" NOT NULL,
		seq       BIGINT NOT NULL,
		start     BOOLEAN NOT NULL,
		terminal  BOOLEAN NOT NULL,
		body      BYTEA NOT NULL,
		PRIMARY KEY (run_id, seq)
	);
	CREATE INDEX run_events_thread ON run_events (thread_id, run_id);`,
	// Cancel requests of replicated agentd (store.Leases.RequestCancel).
	`ALTER TABLE thread_leases ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT false;
	CREATE INDEX thread_leases_cancel ON thread_leases (holder) WHERE cancel_requested;`,
	// Preview URLs (store.Previews).
	`CREATE TABLE previews (
		id         TEXT COLLATE "C" PRIMARY KEY,
		thread_id  TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		tenant     TEXT NOT NULL,
		port       INTEGER NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		revoked    BOOLEAN NOT NULL DEFAULT false
	);
	CREATE INDEX previews_thread ON previews (thread_id, expires_at);`,
}

// migrateLock is the key of the advisory lock migrations run under.
const migrateLock = 0x706c756d62 // "plumb"

// Options configure Open.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock another
	// transaction holds (PostgreSQL's lock_timeout; default 5 s).
	BusyTimeout time.Duration
	// CheckpointRetention is how many checkpoint records are kept per
	// thread (default agent.DefaultCheckpointRetention).
	CheckpointRetention int
}

// Store is the PostgreSQL thread store.
type Store struct {
	pool      *pgxpool.Pool
	retention int
}

var _ store.Threads = (*Store)(nil)

// defaultConnectTimeout bounds a connection attempt when the DSN sets no
// connect_timeout, so an unreachable server stops agentd at start instead
// of hanging it.
const defaultConnectTimeout = 10 * time.Second

// Open connects to the database named by dsn (a PostgreSQL URL or
// key=value string; pool settings such as pool_max_conns are honoured) and
// migrates it. Its errors name the server by Describe, never with the
// password, and fit on one line.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.CheckpointRetention <= 0 {
		o.CheckpointRetention = agent.DefaultCheckpointRetention
	}
	cfg, err := parse(dsn)
	if err != nil {
		return nil, err
	}
	name := describe(cfg.ConnConfig)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(o.BusyTimeout.Milliseconds(), 1), 10)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "agentd" // pg_stat_activity tells agentd's sessions apart
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open thread store %s: %w", name, oneLine(err))
	}
	s := &Store{pool: pool, retention: o.CheckpointRetention}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open thread store %s: %w", name, oneLine(err))
	}
	return s, nil
}

// Describe names the server and database of dsn without its password
// (postgres://user@host:port/database), for logs and errors; a DSN that
// does not parse is described by why.
func Describe(dsn string) string {
	cfg, err := parse(dsn)
	if err != nil {
		return err.Error()
	}
	return describe(cfg.ConnConfig)
}

// parse parses dsn. pgx's parse errors quote the DSN (its password
// redaction is best effort) and so may the errors they wrap: only pgx's
// own short reason ("invalid port") is kept.
func parse(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err == nil {
		return cfg, nil
	}
	reason := "not a PostgreSQL URL or key=value string"
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// The message is "cannot parse `<dsn>`: <reason>[ (<wrapped>)]".
		msg := pe.Error()
		if inner := errors.Unwrap(pe); inner != nil {
			msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
		}
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			reason = msg[i+len("`: "):]
		}
	}
	return nil, fmt.Errorf("invalid PostgreSQL DSN: %s", reason)
}

func describe(c *pgx.ConnConfig) string {
	host := c.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
	} else {
		host = url.PathEscape(host) + ":" + strconv.Itoa(int(c.Port))
	}
	return "postgres://" + url.PathEscape(c.User) + "@" + host + "/" + url.PathEscape(c.Database)
}

// oneLine keeps err's chain but prints it on one line: pgx spreads the
// attempts of one connection over several.
func oneLine(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return flatErr{err}
}

type flatErr struct{ err error }

func (e flatErr) Error() string {
	return strings.Join(strings.Fields(strings.ReplaceAll(e.err.Error(), "\n", " ")), " ")
}
func (e flatErr) Unwrap() error { return e.err }

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// migrate applies the missing migrations in one transaction, holding an
// advisory lock so that concurrent openers wait for the first and then
// find the schema current.
func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Waiting for another opener's migration is not being busy.
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
			return err
		}
		var v int
		err := tx.QueryRow(ctx, `SELECT version FROM schema_version`).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("database schema version %d is newer than this agentd (%d)", v, len(migrations))
		}
		for i := v; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE schema_version SET version = $1`, len(migrations))
		return err
	})
}

// retryLater tells the PostgreSQL errors (SQLSTATE class or code) that
// mean "retry later".
func retryLater(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "53300": // serialization failure, deadlock, lock timeout, too many connections
		return true
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") // connection exception; server stopping or starting
}

// classify marks what retrying later can cure (lock timeouts,
// serialization failures, deadlocks, a server that cannot be reached or
// went away) with store.ErrBusy, and values PostgreSQL cannot hold (a NUL
// in a label: class 22, data exception) with agent.ErrInvalidInput. A
// cancelled context stays what it is. A checkpoint retried after its
// commit was lost with the connection meets its own Base: ErrConflict.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case retryLater(pe.Code):
			return fmt.Errorf("%w: %w", store.ErrBusy, oneLine(err))
		case strings.HasPrefix(pe.Code, "22"):
			return fmt.Errorf("%w: %w", agent.ErrInvalidInput, err)
		}
		return err
	}
	var (
		ce *pgconn.ConnectError
		ne net.Error
	)
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", store.ErrBusy, oneLine(err))
	}
	return err
}

// tx runs f in a READ COMMITTED transaction; writers lock the rows they
// depend on.
func (s *Store) tx(ctx context.Context, f func(pgx.Tx) error) error {
	return classify(pgx.BeginFunc(ctx, s.pool, f))
}

// read runs f in a read-only REPEATABLE READ transaction: every statement
// sees the same committed state.
func (s *Store) read(ctx context.Context, f func(pgx.Tx) error) error {
	return classify(pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, f))
}

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
	rows, err := tx.Query(ctx, `SELECT thread_id, record FROM runs WHERE thread_id = ANY($1) ORDER BY ord`, ids)
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

// SaveCheckpoint implements agent.Store: one transaction, holding the
// thread's row lock from the Base check to the commit.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var (
			count   int
			md      string
			updated int64
		)
		err := tx.QueryRow(ctx, `SELECT message_count, metadata, updated_at FROM threads WHERE id = $1 FOR UPDATE`, cp.ThreadID).Scan(&count, &md, &updated)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
		}
		// The thread's row lock also holds off AcquireLease, so the fence
		// checked here is the lease when the commit lands.
		if err := checkFence(ctx, tx, cp); err != nil {
			return err
		}
		if cp.Base != count {
			return fmt.Errorf("checkpoint %s: base %d, stored %d messages: %w", cp.ThreadID, cp.Base, count, agent.ErrConflict)
		}
		// Edits run one by one: two may touch the same message.
		for _, e := range cp.EditCalls {
			var body string
			err := tx.QueryRow(ctx, `SELECT body FROM messages WHERE thread_id = $1 AND idx = $2`, cp.ThreadID, e.MessageIndex).Scan(&body)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("checkpoint %s: no message %d: %w", cp.ThreadID, e.MessageIndex, agent.ErrConflict)
			}
			if err != nil {
				return fmt.Errorf("checkpoint %s: message %d: %w", cp.ThreadID, e.MessageIndex, err)
			}
			nb, err := store.EditCall(body, e)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE messages SET body = $1 WHERE thread_id = $2 AND idx = $3`, nb, cp.ThreadID, e.MessageIndex); err != nil {
				return fmt.Errorf("checkpoint %s: message %d: %w", cp.ThreadID, e.MessageIndex, err)
			}
		}
		// The rest goes to the server in one round trip.
		var b pgx.Batch
		if len(cp.Append) > 0 {
			idx := make([]int32, len(cp.Append))
			bodies := make([]string, len(cp.Append))
			for i, m := range cp.Append {
				if bodies[i], err = store.JSON(m); err != nil {
					return err
				}
				idx[i] = int32(count + i)
			}
			b.Queue(`INSERT INTO messages (thread_id, idx, body) SELECT $1, * FROM unnest($2::integer[], $3::text[])`, cp.ThreadID, idx, bodies)
		}
		count += len(cp.Append)
		for p, doc := range cp.Files {
			if doc == nil || string(doc) == "null" {
				b.Queue(`DELETE FROM thread_files WHERE thread_id = $1 AND path = $2`, cp.ThreadID, p)
			} else {
				b.Queue(`INSERT INTO thread_files (thread_id, path, doc) VALUES ($1, $2, $3)
					ON CONFLICT (thread_id, path) DO UPDATE SET doc = excluded.doc`, cp.ThreadID, p, string(doc))
			}
		}
		if cp.Metadata != nil {
			if md, err = store.MergeMetadata(md, cp.Metadata); err != nil {
				return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
			}
			if err := writeLabels(ctx, tx, cp.ThreadID, cp.Metadata); err != nil {
				return err
			}
		}
		st, err := store.JSON(store.State{Todos: cp.Todos, Summary: cp.Summary, Private: cp.Private, Pending: cp.Pending})
		if err != nil {
			return err
		}
		var intr *string
		if cp.Interrupt != nil {
			js, err := store.JSON(cp.Interrupt)
			if err != nil {
				return err
			}
			intr = &js
		}
		updated = max(updated, store.Nanos(cp.CreatedAt))
		b.Queue(`UPDATE threads SET message_count = $1, metadata = $2, state = $3, interrupt = $4, updated_at = $5 WHERE id = $6`,
			count, md, st, intr, updated, cp.ThreadID)
		if cp.Run.RunID != "" {
			rec, err := store.JSON(cp.Run)
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO runs (run_id, thread_id, status, record) VALUES ($1, $2, $3, $4)
				ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, record = excluded.record`,
				cp.Run.RunID, cp.ThreadID, string(cp.Run.Status), rec)
		}
		b.Queue(`INSERT INTO checkpoints (thread_id, run_id, phase, step, message_count, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			cp.ThreadID, cp.Run.RunID, string(cp.Phase), cp.Step, count, store.Nanos(cp.CreatedAt))
		b.Queue(`DELETE FROM checkpoints WHERE thread_id = $1 AND id NOT IN
			(SELECT id FROM checkpoints WHERE thread_id = $1 ORDER BY id DESC LIMIT $2)`, cp.ThreadID, s.retention)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
		}
		return nil
	})
}

// checkFence refuses cp when its fence is not the thread's lease.
func checkFence(ctx context.Context, tx pgx.Tx, cp *agent.Checkpoint) error {
	if cp.Fence == nil {
		return nil
	}
	cur, err := leaseRow(ctx, tx, cp.ThreadID)
	if err != nil {
		return fmt.Errorf("checkpoint %s: lease: %w", cp.ThreadID, err)
	}
	return store.CheckFence(cp.ThreadID, cp.Fence, cur)
}

// leaseRow reads the thread's lease row (nil without one).
func leaseRow(ctx context.Context, q querier, id string) (*store.Lease, error) {
	l := store.Lease{ThreadID: id}
	var exp int64
	err := q.QueryRow(ctx, `SELECT holder, epoch, expires_at, released, cancel_requested AND NOT released FROM thread_leases WHERE thread_id = $1`, id).
		Scan(&l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.Expires = time.Unix(0, exp)
	return &l, nil
}

// FailRunningRuns implements agent.Store.
func (s *Store) FailRunningRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT record FROM runs WHERE status = $1 FOR UPDATE`, message)
}

// FailUnleasedRuns implements store.LeaseStore.
func (s *Store) FailUnleasedRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT r.record FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
		WHERE r.status = $1 AND (l.thread_id IS NULL OR l.released) FOR UPDATE OF r`, message)
}

// failRuns marks the runs query selects (its $1 is RUNNING) FAILED.
func (s *Store) failRuns(ctx context.Context, query, message string) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, string(agent.StatusRunning))
		if err != nil {
			return fmt.Errorf("running runs: %w", err)
		}
		recs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("running runs: %w", err)
		}
		var b pgx.Batch
		for _, rec := range recs {
			var r agent.RunRecord
			if err := json.Unmarshal([]byte(rec), &r); err != nil {
				return fmt.Errorf("run record: %w", err)
			}
			r.Status = agent.StatusFailed
			r.Error = &agent.RunError{Code: agent.CodeInternal, Message: message}
			js, err := store.JSON(r)
			if err != nil {
				return err
			}
			b.Queue(`UPDATE runs SET status = $1, record = $2 WHERE run_id = $3`, string(r.Status), js, r.RunID)
		}
		n = len(recs)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("fail running runs: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
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
	tag, err := s.pool.Exec(ctx, `DELETE FROM threads WHERE id = $1`, id)
	if err != nil {
		return classify(fmt.Errorf("delete thread %s: %w", id, err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete thread %s: %w", id, agent.ErrThreadNotFound)
	}
	return nil
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
	const lastStatus = `(SELECT status FROM runs r WHERE r.thread_id = t.id ORDER BY ord DESC LIMIT 1)`
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

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases. The thread's row is locked for the
// decision, so concurrent acquisitions by two replicas serialize.
func (s *Store) AcquireLease(ctx context.Context, id, holder string, now time.Time, ttl time.Duration) (store.Lease, error) {
	var next store.Lease
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("lease of %s: %w", id, agent.ErrThreadNotFound)
		} else if err != nil {
			return err
		}
		cur, err := leaseRow(ctx, tx, id)
		if err != nil {
			return err
		}
		if next, err = store.NextLease(cur, id, holder, now, ttl); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO thread_leases (thread_id, holder, epoch, expires_at, released, cancel_requested) VALUES ($1, $2, $3, $4, false, $5)
			ON CONFLICT (thread_id) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at, released = false,
				cancel_requested = excluded.cancel_requested`,
			id, next.Holder, next.Epoch, store.Nanos(next.Expires), next.CancelRequested)
		return err
	})
	return next, err
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE thread_leases SET expires_at = $1 WHERE thread_id = $2 AND holder = $3 AND epoch = $4 AND NOT released AND expires_at > $5`,
		store.Nanos(now.Add(ttl)), l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	if err != nil {
		return l, classify(err)
	}
	if tag.RowsAffected() == 0 {
		return l, fmt.Errorf("renew lease of %s: %w", l.ThreadID, store.ErrLeaseLost)
	}
	l.Expires = now.Add(ttl)
	return l, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE thread_leases SET released = true WHERE thread_id = $1 AND holder = $2 AND epoch = $3`, l.ThreadID, l.Holder, l.Epoch)
	return classify(err)
}

// HandOffLease implements store.Leases.
func (s *Store) HandOffLease(ctx context.Context, l store.Lease, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE thread_leases SET expires_at = LEAST(expires_at, $4) WHERE thread_id = $1 AND holder = $2 AND epoch = $3 AND NOT released`,
		l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	return classify(err)
}

// ExpiredLeases implements store.Leases.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]store.Lease, error) {
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE NOT released AND expires_at <= $1 ORDER BY expires_at, thread_id`, store.Nanos(now)))
}

// leaseColumns are the columns scanLeases reads, in order. A released
// lease carries no cancel request (the next acquisition resets the
// column).
const leaseColumns = `thread_id, holder, epoch, expires_at, released, cancel_requested AND NOT released`

// scanLeases reads rows of leaseColumns.
func scanLeases(rows pgx.Rows, err error) ([]store.Lease, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var exp int64
		if err := rows.Scan(&l.ThreadID, &l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested); err != nil {
			return nil, classify(err)
		}
		l.Expires = time.Unix(0, exp)
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

// RequestCancel implements store.Leases.
func (s *Store) RequestCancel(ctx context.Context, id string) (*store.Lease, error) {
	ls, err := scanLeases(s.pool.Query(ctx, `UPDATE thread_leases SET cancel_requested = true WHERE thread_id = $1 AND NOT released RETURNING `+leaseColumns, id))
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	return &ls[0], nil
}

// CancelRequests implements store.Leases.
func (s *Store) CancelRequests(ctx context.Context, holder string) ([]store.Lease, error) {
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE holder = $1 AND cancel_requested AND NOT released ORDER BY thread_id`, holder))
}

// ThreadLeases implements store.Leases.
func (s *Store) ThreadLeases(ctx context.Context, ids []string) ([]store.Lease, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE thread_id = ANY($1::text[]) ORDER BY thread_id`, ids))
}

var _ store.LeaseStore = (*Store)(nil)

// AppendEvents implements store.RunEvents. The thread's row is share-locked
// so that no AcquireLease can slip between the fence check and the commit.
func (s *Store) AppendEvents(ctx context.Context, threadID string, f *agent.Fence, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR SHARE`, threadID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("events of %s: %w", threadID, err)
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
		n := len(evs)
		runs, seqs := make([]string, n), make([]int64, n)
		starts, terms := make([]bool, n), make([]bool, n)
		bodies := make([][]byte, n)
		for i, e := range evs {
			runs[i], seqs[i], starts[i], terms[i], bodies[i] = e.RunID, int64(e.Sequence), e.Start, e.Terminal, e.Body
		}
		var b pgx.Batch
		b.Queue(`DELETE FROM run_events WHERE thread_id = $1 AND run_id <> ALL($2::text[])`, threadID, runs)
		b.Queue(`INSERT INTO run_events (thread_id, run_id, seq, start, terminal, body)
			SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::boolean[], $5::boolean[], $6::bytea[])
			ON CONFLICT (run_id, seq) DO NOTHING`, threadID, runs, seqs, starts, terms, bodies)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("events of %s: %w", threadID, err)
		}
		return nil
	})
}

// ReadEvents implements store.RunEvents.
func (s *Store) ReadEvents(ctx context.Context, threadID string, after uint64, limit int) (store.EventPage, error) {
	var page store.EventPage
	err := s.read(ctx, func(tx pgx.Tx) error {
		page = store.EventPage{}
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1`, threadID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		// The log holds one run: its events may be stored before its
		// record.
		err = tx.QueryRow(ctx, `SELECT run_id FROM run_events WHERE thread_id = $1 LIMIT 1`, threadID).Scan(&page.RunID)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `SELECT run_id FROM runs WHERE thread_id = $1 ORDER BY ord DESC LIMIT 1`, threadID).Scan(&page.RunID)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		var st string
		if err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1`, page.RunID).Scan(&st); err == nil {
			page.Status = agent.RunStatus(st)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		from := int64(after)
		rows, err := tx.Query(ctx, `SELECT seq, start, terminal, body FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, page.RunID, from, limit)
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
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = $1`, runID).Scan(&seq); err != nil {
		return 0, classify(err)
	}
	return uint64(seq), nil
}
