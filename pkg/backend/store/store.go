package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

func (k *sqlKV) Get(ctx context.Context, key string) (kvfs.File, kvfs.Entry, bool, error) {
	var (
		f   kvfs.File
		enc string
	)
	e := kvfs.Entry{Key: key}
	err := k.stmt(ctx, k.db.stmts.get).QueryRowContext(ctx, k.ns, key).
		Scan(&e.Size, &enc, &e.CreatedAt, &e.ModifiedAt, &e.Rev, &f.Content)
	if errors.Is(err, sql.ErrNoRows) {
		return kvfs.File{}, kvfs.Entry{}, false, nil
	}
	if err != nil {
		return kvfs.File{}, kvfs.Entry{}, false, dbErr(err)
	}
	if f.Content == nil {
		f.Content = []byte{}
	}
	f.Encoding, f.CreatedAt, f.ModifiedAt = backend.Encoding(enc), e.CreatedAt, e.ModifiedAt
	return f, e, true, nil
}

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

// Update runs fn in an IMMEDIATE transaction (the DSN's _txlock), which
// takes SQLite's write lock at BEGIN: transactions never fail on a lock
// upgrade, they wait up to the busy timeout.
func (k *sqlKV) Update(ctx context.Context, fn func(kvfs.Tx) error) error {
	tx, err := k.db.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	if err := fn(&sqlTx{sqlKV{db: k.db, tx: tx, ns: k.ns}}); err != nil {
		tx.Rollback()
		return err
	}
	return dbErr(tx.Commit())
}

// sqlTx is the kvfs.Tx of Update.
type sqlTx struct{ sqlKV }

func (t *sqlTx) Put(ctx context.Context, key string, f kvfs.File) error {
	content := f.Content
	if content == nil {
		content = []byte{} // NOT NULL: an empty file is an empty blob
	}
	_, err := t.stmt(ctx, t.db.stmts.put).ExecContext(ctx,
		t.ns, key, len(content), string(f.Encoding), f.CreatedAt, f.ModifiedAt, content)
	return dbErr(err)
}

func (t *sqlTx) DeleteTree(ctx context.Context, key string) (int, error) {
	r1, err := t.stmt(ctx, t.db.stmts.deleteExact).ExecContext(ctx, t.ns, key)
	if err != nil {
		return 0, dbErr(err)
	}
	r2, err := t.stmt(ctx, t.db.stmts.deleteRange).ExecContext(ctx, t.ns, key+"/", key+"0")
	if err != nil {
		return 0, dbErr(err)
	}
	n1, _ := r1.RowsAffected()
	n2, _ := r2.RowsAffected()
	return int(n1 + n2), nil
}
