package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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

// "plumb"

// Options configure Open.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock another
	// transaction holds (PostgreSQL's lock_timeout; default 5 s).
	BusyTimeout time.Duration
	// CheckpointRetention is how many checkpoint records are kept per
	// thread (default agent.DefaultCheckpointRetention).
	CheckpointRetention int
	// AgentCheckpointRetention overrides CheckpointRetention for the
	// threads whose checkpoint is written by a run of the agent (the key;
	// "" = a run that named no agent): agents.<name>.retention.checkpoints_keep.
	AgentCheckpointRetention map[string]int
}

// Store is the PostgreSQL thread store.
type Store struct {
	pool      *pgxpool.Pool
	retention int
	// agentRetention is Options.AgentCheckpointRetention.
	agentRetention map[string]int
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
	s := &Store{pool: pool, retention: o.CheckpointRetention, agentRetention: maps.Clone(o.AgentCheckpointRetention)}
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
