package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
	sqlitedrv "modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Options configure Open.
type Options struct {
	// BusyTimeout is how long a write waits for the database lock
	// (default 5 s).
	BusyTimeout time.Duration
	// CheckpointRetention is how many checkpoint records are kept per
	// thread (default agent.DefaultCheckpointRetention).
	CheckpointRetention int
	// AgentCheckpointRetention overrides CheckpointRetention for the
	// threads whose checkpoint is written by a run of the agent (the key;
	// "" = a run that named no agent): agents.<name>.retention.checkpoints_keep.
	AgentCheckpointRetention map[string]int
}

// Store is the SQLite thread store.
type Store struct {
	db        *sql.DB
	retention int
	// agentRetention is Options.AgentCheckpointRetention.
	agentRetention map[string]int
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
	s := &Store{db: db, retention: o.CheckpointRetention, agentRetention: maps.Clone(o.AgentCheckpointRetention)}
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

// classify marks SQLite's BUSY and LOCKED results with store.ErrBusy.
func classify(err error) error {
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
		return classify(err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return classify(err)
	}
	return classify(tx.Commit())
}
