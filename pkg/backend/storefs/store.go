package storefs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state/kvfs"
)

// Namespace limits.
const (
	// MaxNamespaceDepth caps the number of namespace components.
	MaxNamespaceDepth = 16
	// MaxNamespaceComponentBytes caps one component (a 256-char metadata
	// value, the longest a route template can substitute, fits).
	MaxNamespaceComponentBytes = 1024
)

// ErrInvalidNamespace is wrapped by every namespace validation error.
var ErrInvalidNamespace = errors.New("store: invalid namespace")

// ValidateNamespace checks a namespace: 1 to MaxNamespaceDepth components,
// each non-empty, at most MaxNamespaceComponentBytes bytes of valid UTF-8,
// with no "/" and no control character. Errors wrap ErrInvalidNamespace
// and name the component by its 0-based index.
func ValidateNamespace(ns []string) error {
	switch {
	case len(ns) == 0:
		return fmt.Errorf("%w: no components", ErrInvalidNamespace)
	case len(ns) > MaxNamespaceDepth:
		return fmt.Errorf("%w: %d components, more than %d", ErrInvalidNamespace, len(ns), MaxNamespaceDepth)
	}
	for i, c := range ns {
		why := ""
		switch {
		case c == "":
			why = "is empty"
		case len(c) > MaxNamespaceComponentBytes:
			why = fmt.Sprintf("is longer than %d bytes", MaxNamespaceComponentBytes)
		case !utf8.ValidString(c):
			why = "is not valid UTF-8"
		case strings.ContainsRune(c, '/'):
			why = `contains "/"`
		case strings.ContainsFunc(c, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			why = "contains a control character"
		}
		if why != "" {
			return fmt.Errorf("%w: component %d %s", ErrInvalidNamespace, i, why)
		}
	}
	return nil
}

// Backend is the Store backend: the files of one namespace of a DB,
// persistent and shared by every Backend (in any thread or process) on the
// same namespace. It implements backend.Backend (not backend.Executor)
// with the same semantics as the State backend, and is safe for
// concurrent use.
type Backend struct {
	*kvfs.FS
	ns []string
}

var _ backend.Backend = (*Backend)(nil)

type options struct {
	now func() time.Time
	lim kvfs.Limits
}

// Option configures NewBackend.
type Option func(*options)

// WithClock sets the clock of created_at and modified_at (default
// time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLimits sets the configurable caps; zero fields keep the defaults.
func WithLimits(l kvfs.Limits) Option { return func(o *options) { o.lim = l } }

// NewBackend returns the backend of namespace ns in db. The namespace is
// validated (ValidateNamespace) and copied.
func NewBackend(db *DB, ns []string, opts ...Option) (*Backend, error) {
	if err := ValidateNamespace(ns); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// Components cannot contain "/", so the join is unambiguous.
	kv := &sqlKV{db: db, ns: strings.Join(ns, "/")}
	return &Backend{FS: kvfs.New(kv, o.now, o.lim), ns: slices.Clone(ns)}, nil
}

// Namespace returns a copy of the backend's namespace.
func (b *Backend) Namespace() []string { return slices.Clone(b.ns) }

// sqlKV is the kvfs.KV of one namespace. Outside Update it runs the DB's
// prepared statements on the pool; inside, tx is set and they run in it.
type sqlKV struct {
	db *DB
	tx *sql.Tx
	ns string
}

// stmt returns s bound to the transaction, if any.
func (k *sqlKV) stmt(ctx context.Context, s *sql.Stmt) *sql.Stmt {
	if k.tx != nil {
		return k.tx.StmtContext(ctx, s)
	}
	return s
}

func (k *sqlKV) Stat(ctx context.Context, key string) (kvfs.Entry, bool, error) {
	e := kvfs.Entry{Key: key}
	err := k.stmt(ctx, k.db.stmts.stat).QueryRowContext(ctx, k.ns, key).
		Scan(&e.Size, &e.CreatedAt, &e.ModifiedAt, &e.Rev)
	if errors.Is(err, sql.ErrNoRows) {
		return kvfs.Entry{}, false, nil
	}
	if err != nil {
		return kvfs.Entry{}, false, dbErr(err)
	}
	return e, true, nil
}

// Get reads the whole content (edit and download need it).
func (k *sqlKV) Get(ctx context.Context, key string) (kvfs.File, kvfs.Entry, bool, error) {
	r, e, enc, ok, err := k.open(ctx, key)
	if err != nil || !ok {
		return kvfs.File{}, kvfs.Entry{}, false, err
	}
	defer r.Close()
	content := make([]byte, 0, e.Size)
	for {
		chunk, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return kvfs.File{}, kvfs.Entry{}, false, err
		}
		content = append(content, chunk...)
	}
	if int64(len(content)) != e.Size {
		return kvfs.File{}, kvfs.Entry{}, false, dbErr(fmt.Errorf("file %s: %d bytes of content, %d recorded", key, len(content), e.Size))
	}
	return kvfs.File{Content: content, Encoding: enc, CreatedAt: e.CreatedAt, ModifiedAt: e.ModifiedAt}, e, true, nil
}

// Open streams the content chunk by chunk (kvfs.Streamer).
func (k *sqlKV) Open(ctx context.Context, key string) (io.ReadCloser, kvfs.Entry, bool, error) {
	r, e, _, ok, err := k.open(ctx, key)
	if err != nil || !ok {
		return nil, kvfs.Entry{}, false, err
	}
	return r, e, true, nil
}

// open runs the get statement and returns its cursor positioned on the
// first row, which carries the metadata and chunk 0 (NULL for an empty
// file).
func (k *sqlKV) open(ctx context.Context, key string) (*chunkReader, kvfs.Entry, backend.Encoding, bool, error) {
	rows, err := k.stmt(ctx, k.db.stmts.get).QueryContext(ctx, k.ns, key)
	if err != nil {
		return nil, kvfs.Entry{}, "", false, dbErr(err)
	}
	if !rows.Next() {
		err := rows.Err()
		rows.Close()
		return nil, kvfs.Entry{}, "", false, dbErr(err)
	}
	e := kvfs.Entry{Key: key}
	var enc string
	r := &chunkReader{rows: rows}
	if err := rows.Scan(&e.Size, &enc, &e.CreatedAt, &e.ModifiedAt, &e.Rev, &r.first); err != nil {
		rows.Close()
		return nil, kvfs.Entry{}, "", false, dbErr(err)
	}
	return r, e, backend.Encoding(enc), true, nil
}

// chunkReader reads a file's chunks from the get statement's cursor. The
// cursor keeps the statement's snapshot, so the chunks are those of the
// version whose metadata came with the first row. Chunks are scanned as
// sql.RawBytes (no copy by database/sql) and consumed before the cursor
// moves on.
type chunkReader struct {
	rows    *sql.Rows
	first   sql.RawBytes // the first row's chunk (nil for an empty file)
	started bool
	buf     []byte // what Read has not returned of the current chunk
}

// next returns the next chunk, or io.EOF. The chunk is valid until the
// following call.
func (r *chunkReader) next() ([]byte, error) {
	if !r.started {
		r.started = true
		if len(r.first) > 0 {
			return r.first, nil
		}
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return nil, dbErr(err)
		}
		return nil, io.EOF
	}
	var (
		size, rev             int64
		enc, created, modifed string
		chunk                 sql.RawBytes
	)
	if err := r.rows.Scan(&size, &enc, &created, &modifed, &rev, &chunk); err != nil {
		return nil, dbErr(err)
	}
	return chunk, nil
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		c, err := r.next()
		if err != nil {
			return 0, err
		}
		r.buf = c
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *chunkReader) Close() error { return r.rows.Close() }

// Scan is a range query on the (ns, path) index.
func (k *sqlKV) Scan(ctx context.Context, from, to string, limit int) ([]kvfs.Entry, error) {
	rows, err := k.stmt(ctx, k.db.stmts.scan).QueryContext(ctx, k.ns, from, to, limit)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []kvfs.Entry
	for rows.Next() {
		var e kvfs.Entry
		if err := rows.Scan(&e.Key, &e.Size, &e.CreatedAt, &e.ModifiedAt, &e.Rev); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, e)
	}
	return out, dbErr(rows.Err())
}

// Update runs fn in an IMMEDIATE transaction, which takes SQLite's write
// lock at BEGIN: transactions never fail on a lock upgrade. Writers of this
// process queue for their turn (DB.beginWrite), so concurrent writes wait
// rather than fail with "busy".
func (k *sqlKV) Update(ctx context.Context, fn func(kvfs.Tx) error) error {
	tx, release, err := k.db.beginWrite(ctx)
	if err != nil {
		return dbErr(err)
	}
	defer release()
	if err := fn(&sqlTx{sqlKV{db: k.db, tx: tx, ns: k.ns}}); err != nil {
		tx.Rollback()
		return err
	}
	return dbErr(tx.Commit())
}

// sqlTx is the kvfs.Tx of Update.
type sqlTx struct{ sqlKV }

// Put replaces the file's rows: the old metadata and chunks go, a new
// metadata row (with a new id, the revision) and its chunks come.
func (t *sqlTx) Put(ctx context.Context, key string, f kvfs.File) error {
	if _, err := t.deleteOne(ctx, key); err != nil {
		return err
	}
	res, err := t.stmt(ctx, t.db.stmts.insertFile).ExecContext(ctx,
		t.ns, key, len(f.Content), string(f.Encoding), f.CreatedAt, f.ModifiedAt)
	if err != nil {
		return dbErr(err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return dbErr(err)
	}
	ins := t.stmt(ctx, t.db.stmts.insertChunk)
	for seq, off := 0, 0; off < len(f.Content); seq, off = seq+1, off+ChunkBytes {
		if _, err := ins.ExecContext(ctx, id, seq, f.Content[off:min(off+ChunkBytes, len(f.Content))]); err != nil {
			return dbErr(err)
		}
	}
	return nil
}

// deleteOne removes the file key and its chunks.
func (t *sqlTx) deleteOne(ctx context.Context, key string) (int, error) {
	if _, err := t.stmt(ctx, t.db.stmts.deleteFileChunks).ExecContext(ctx, t.ns, key); err != nil {
		return 0, dbErr(err)
	}
	r, err := t.stmt(ctx, t.db.stmts.deleteFile).ExecContext(ctx, t.ns, key)
	if err != nil {
		return 0, dbErr(err)
	}
	n, err := r.RowsAffected()
	return int(n), dbErr(err)
}

// DeleteTree removes key and the range of keys under key+"/", chunks
// first.
func (t *sqlTx) DeleteTree(ctx context.Context, key string) (int, error) {
	n1, err := t.deleteOne(ctx, key)
	if err != nil {
		return 0, err
	}
	lo, hi := key+"/", key+"0"
	if _, err := t.stmt(ctx, t.db.stmts.deleteRangeChunks).ExecContext(ctx, t.ns, lo, hi); err != nil {
		return 0, dbErr(err)
	}
	r, err := t.stmt(ctx, t.db.stmts.deleteRange).ExecContext(ctx, t.ns, lo, hi)
	if err != nil {
		return 0, dbErr(err)
	}
	n2, err := r.RowsAffected()
	return n1 + int(n2), dbErr(err)
}
