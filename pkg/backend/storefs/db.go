package storefs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/plumbhq/plumb/pkg/backend"
)

// DB is an open Store database: one SQLite file (WAL mode) holding the
// files of every namespace. It is safe for concurrent use, also by several
// processes on the same host (SQLite file locking, with a busy timeout).
type DB struct {
	db    *sql.DB
	stmts stmts
	// writer admits one write transaction of this process at a time.
	// Writers queue here, in order and abandoning the wait when their
	// context ends, instead of polling SQLite's lock: under load the busy
	// handler lets a waiter starve past any timeout, while a queue only
	// makes it wait its turn. The busy timeout is left for other processes
	// sharing the file.
	writer chan struct{}
}

// stmts are the backend's statements, prepared once per DB (database/sql
// then prepares each on a connection at most once): parsing SQL dominated
// the cost of small operations.
type stmts struct {
	stat, scan, get, insertFile, insertChunk *sql.Stmt
	deleteFile, deleteFileChunks             *sql.Stmt
	deleteRange, deleteRangeChunks           *sql.Stmt
}

// The statements' SQL. Every lookup and range goes through the
// (ns, path) index or the chunks' primary key; TestQueryPlans checks it.
const (
	sqlStat = `SELECT size, created_at, modified_at, id FROM store_files WHERE ns = ? AND path = ?`
	sqlScan = `SELECT path, size, created_at, modified_at, id FROM store_files
		WHERE ns = ? AND path >= ? AND path < ? ORDER BY path LIMIT ?`
	// One statement reads a file's metadata and its chunks, so it sees
	// one version of the file even while a writer replaces it.
	sqlGet = `SELECT f.size, f.encoding, f.created_at, f.modified_at, f.id, c.data
		FROM store_files f LEFT JOIN store_chunks c ON c.file_id = f.id
		WHERE f.ns = ? AND f.path = ? ORDER BY c.seq`
	sqlInsertFile        = `INSERT INTO store_files (ns, path, size, encoding, created_at, modified_at) VALUES (?, ?, ?, ?, ?, ?)`
	sqlInsertChunk       = `INSERT INTO store_chunks (file_id, seq, data) VALUES (?, ?, ?)`
	sqlDeleteFileChunks  = `DELETE FROM store_chunks WHERE file_id IN (SELECT id FROM store_files WHERE ns = ? AND path = ?)`
	sqlDeleteFile        = `DELETE FROM store_files WHERE ns = ? AND path = ?`
	sqlDeleteRangeChunks = `DELETE FROM store_chunks WHERE file_id IN
		(SELECT id FROM store_files WHERE ns = ? AND path >= ? AND path < ?)`
	sqlDeleteRange = `DELETE FROM store_files WHERE ns = ? AND path >= ? AND path < ?`
)

func (s *stmts) prepare(ctx context.Context, db *sql.DB) error {
	for dst, q := range map[**sql.Stmt]string{
		&s.stat: sqlStat, &s.scan: sqlScan, &s.get: sqlGet,
		&s.insertFile: sqlInsertFile, &s.insertChunk: sqlInsertChunk,
		&s.deleteFileChunks: sqlDeleteFileChunks, &s.deleteFile: sqlDeleteFile,
		&s.deleteRangeChunks: sqlDeleteRangeChunks, &s.deleteRange: sqlDeleteRange,
	} {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		*dst = st
	}
	return nil
}

// BusyTimeoutMS is how long a connection waits for SQLite's write lock
// held by another process before failing with "database is busy". Writers
// of one process queue in Go and never meet it.
const BusyTimeoutMS = 30000

// busyTimeoutMS is BusyTimeoutMS; tests lower it to show that writers of
// one process never depend on it.
var busyTimeoutMS = BusyTimeoutMS

// ChunkBytes is the size of the chunks file contents are stored in.
// Streaming reads hold one chunk at a time, so read and grep use memory
// proportional to it, never to the file.
const ChunkBytes = 256 << 10

// migrations are the schema steps; migrations[i] brings the schema from
// version i to i+1. Append only: never edit a released step.
//
// store_files holds one row of metadata per file; the unique index on
// (ns, path) serves every lookup and every prefix range. id is an
// AUTOINCREMENT rowid, never reused, and serves as the file's revision: a
// put deletes the old row and inserts a new one. store_chunks holds the
// content in ChunkBytes pieces numbered from 0; an empty file has none.
var migrations = []string{
	`CREATE TABLE store_files (
		id          INTEGER PRIMARY KEY AUTOINCREMENT,
		ns          TEXT    NOT NULL,
		path        TEXT    NOT NULL,
		size        INTEGER NOT NULL,
		encoding    TEXT    NOT NULL,
		created_at  TEXT    NOT NULL,
		modified_at TEXT    NOT NULL
	);
	CREATE UNIQUE INDEX store_files_ns_path ON store_files (ns, path);
	CREATE TABLE store_chunks (
		file_id INTEGER NOT NULL,
		seq     INTEGER NOT NULL,
		data    BLOB    NOT NULL,
		PRIMARY KEY (file_id, seq)
	);`,
}

// Open opens (creating if needed) the Store database at path and brings
// its schema up to date. path is a file name; ":memory:" and names with
// "?" are refused (every pooled connection must see the same database,
// and the driver reads "?" as the start of its parameters).
func Open(path string) (*DB, error) {
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("store: open %q: need a plain database file name", path)
	case strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("store: open %q: the file name must not contain '?'", path)
	}
	dsn := fmt.Sprintf("%s?_busy_timeout=%d&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate", path, busyTimeoutMS)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	d := &DB{db: db, writer: make(chan struct{}, 1)}
	ctx := context.Background()
	if err := d.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := d.stmts.prepare(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return d, nil
}

// Close closes the database. Backends using it fail afterwards.
func (d *DB) Close() error { return d.db.Close() }

// SchemaVersion returns the schema version the database is at.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM store_schema_version`).Scan(&v)
	return v, err
}

// migrate applies the missing migrations, each in its own IMMEDIATE
// transaction together with its version row, so concurrent Opens apply
// each step once.
func (d *DB) migrate(ctx context.Context) error {
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS store_schema_version (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("create version table: %w", err)
	}
	for {
		done, err := d.migrateStep(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (d *DB) migrateStep(ctx context.Context) (done bool, err error) {
	tx, release, err := d.beginWrite(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM store_schema_version`).Scan(&v); err != nil {
		return false, err
	}
	switch {
	case v > len(migrations):
		return false, fmt.Errorf("schema version %d is newer than this build knows (%d)", v, len(migrations))
	case v == len(migrations):
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migration %d: %w", v+1, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO store_schema_version (version) VALUES (?)`, v+1); err != nil {
		return false, fmt.Errorf("migration %d: %w", v+1, err)
	}
	return false, tx.Commit()
}

// beginWrite waits for this process's turn to write, then begins an
// IMMEDIATE transaction (the DSN's _txlock). release ends the turn; call it
// after the transaction commits or rolls back.
func (d *DB) beginWrite(ctx context.Context) (tx *sql.Tx, release func(), err error) {
	select {
	case d.writer <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release = func() { <-d.writer }
	tx, err = d.db.BeginTx(ctx, nil)
	if err != nil {
		release()
		return nil, nil, err
	}
	return tx, release, nil
}

// dbErr maps a database failure to a *backend.Error (the message is for
// the model; kvfs adds the path). Context errors pass through unchanged.
func dbErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return backend.Errorf(backend.CodeNoSpace, "", "the file store is full (%v)", err)
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return backend.Errorf(backend.CodeUnavailable, "", "the file store is busy; try again (%v)", err)
		case sqlite3.SQLITE_READONLY:
			return backend.Errorf(backend.CodePermissionDenied, "", "the file store is read-only (%v)", err)
		}
	}
	return backend.Errorf(backend.CodeInternal, "", "file store error: %v", err)
}
