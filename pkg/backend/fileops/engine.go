package fileops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Engine runs the file operations of docs/file-tools.md §4 on one directory tree. It
// implements backend.Backend and backend.Homer, and is safe for concurrent
// use: edits and writes to the same file are serialized by a per-path lock
// held in the Engine (docs/file-tools.md §4.4), so concurrent edits through one Engine never
// lose an update.
type Engine struct {
	root    *os.Root
	ownRoot bool
	cfg     config
	locks   pathLocks
	direct  *direct // the fast path of write and edit (direct_linux.go)
}

var (
	_ backend.Backend = (*Engine)(nil)
	_ backend.Homer   = (*Engine)(nil)
)

// config holds the options; zero values are replaced by defaults in
// newEngine.
type config struct {
	home        string
	skip        map[string]bool // canonical virtual dirs walks do not enter
	writable    []string
	maxFileSize int64
	mediaCap    int64
	writeCap    int64
	itemCap     int64
	opTimeout   time.Duration
	grepBudget  time.Duration
	globBudget  time.Duration
	sync        bool // fsync written files and their directory (WithSync)
}

// Option configures an Engine.
type Option func(*config) error

// WithHome sets the home dir returned by Home (default "/"). The path is
// normalized; it need not exist.
func WithHome(p string) Option {
	return func(c *config) error {
		n, err := vpath.Normalize(p)
		if err != nil {
			return fmt.Errorf("home dir: %w", err)
		}
		c.home = n
		return nil
	}
}

// PseudoFilesystems are the directories a sandbox engine rooted at "/"
// keeps its walks out of (docs/file-tools.md §1): WithSkipDirs(PseudoFilesystems()...).
func PseudoFilesystems() []string { return []string{"/proc", "/sys", "/dev"} }

// WithSkipDirs names directories (virtual paths) that ls still lists but
// that grep, glob and delete walks never enter when they meet them below
// their starting directory. A walk that starts inside one of them is not
// affected: the caller asked for it. Matching uses the directory's real
// path inside the root, so a symlinked alias does not get around it.
func WithSkipDirs(dirs ...string) Option {
	return func(c *config) error {
		for _, d := range dirs {
			n, err := vpath.Normalize(d)
			if err != nil {
				return fmt.Errorf("skip dir: %w", err)
			}
			if c.skip == nil {
				c.skip = make(map[string]bool)
			}
			c.skip[n] = true
		}
		return nil
	}
}

// WithWritableRoots names the writable directories of an otherwise
// read-only file system (a sandbox: "/workspace", "/tmp"). A write that
// fails with EROFS is then permission_denied with a message naming them, so
// the model knows where it can write.
func WithWritableRoots(dirs ...string) Option {
	return func(c *config) error {
		for _, d := range dirs {
			n, err := vpath.Normalize(d)
			if err != nil {
				return fmt.Errorf("writable root: %w", err)
			}
			c.writable = append(c.writable, n)
		}
		return nil
	}
}

// WithMaxFileSize caps the size of files that read returns text from and
// that grep searches (0, the default, means no cap; the Filesystem
// backend's max_file_size). A larger file is too_large for read, and is
// skipped by grep and counted in FilesUnreadable. Media keep their own cap
// (WithMediaCap); downloads are capped by WithItemCap only.
func WithMaxFileSize(n int64) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("max file size %d is negative", n)
		}
		c.maxFileSize = n
		return nil
	}
}

// WithMediaCap sets the media read cap (default backend.MediaCap).
func WithMediaCap(n int64) Option {
	return positive("media cap", n, func(c *config) { c.mediaCap = n })
}

// WithWriteCap sets the write and edit size cap (default backend.WriteCap).
func WithWriteCap(n int64) Option {
	return positive("write cap", n, func(c *config) { c.writeCap = n })
}

// WithItemCap sets the upload and download item cap (default
// backend.ItemCap).
func WithItemCap(n int64) Option { return positive("item cap", n, func(c *config) { c.itemCap = n }) }

// WithOpTimeout sets the deadline of operations other than grep and glob
// (default backend.FileOpTimeout; 0 disables it). An operation past it
// fails with timeout.
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("op timeout %v is negative", d)
		}
		c.opTimeout = d
		return nil
	}
}

// WithSync sets the durability of write, edit and upload (default true).
// Every write is atomic either way: the content goes to a temp file in the
// target's directory that is renamed over the target, so readers see the
// old or the new file, never a partial one, and a failed write leaves the
// old file. With sync true the temp file is fsynced before the rename and
// the directory after it, so the new content also survives a crash of the
// machine: what host-backed directories (the Filesystem backend) need. A
// sandbox's files die with its container, so the sandbox agent passes
// false and saves the two fsyncs (most of a small write's time).
func WithSync(sync bool) Option {
	return func(c *config) error {
		c.sync = sync
		return nil
	}
}

// WithBudgets sets the grep and glob time budgets (defaults
// backend.GrepBudget and backend.GlobBudget). Tests use it to exercise
// truncation by time.
func WithBudgets(grep, glob time.Duration) Option {
	return func(c *config) error {
		if grep <= 0 || glob <= 0 {
			return fmt.Errorf("budgets must be positive, got %v and %v", grep, glob)
		}
		c.grepBudget, c.globBudget = grep, glob
		return nil
	}
}

func positive(what string, n int64, set func(*config)) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%s %d is not positive", what, n)
		}
		set(c)
		return nil
	}
}

// New opens dir with os.OpenRoot and returns an Engine confined to it.
// Close releases the directory handle.
func New(dir string, opts ...Option) (*Engine, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("file engine: open root: %w", err)
	}
	e, err := newEngine(root, opts)
	if err != nil {
		root.Close()
		return nil, err
	}
	e.ownRoot = true
	return e, nil
}

// NewAt returns an Engine confined to an already open root. The caller
// keeps ownership of root: Close does not close it, and root must stay
// open while the Engine is used.
func NewAt(root *os.Root, opts ...Option) (*Engine, error) {
	if root == nil {
		return nil, errors.New("file engine: nil root")
	}
	return newEngine(root, opts)
}

func newEngine(root *os.Root, opts []Option) (*Engine, error) {
	c := config{
		home:       "/",
		mediaCap:   backend.MediaCap,
		writeCap:   backend.WriteCap,
		itemCap:    backend.ItemCap,
		opTimeout:  backend.FileOpTimeout,
		grepBudget: backend.GrepBudget,
		globBudget: backend.GlobBudget,
		sync:       true,
	}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("file engine: %w", err)
		}
	}
	e := &Engine{root: root, cfg: c}
	e.direct = openDirect(e, root)
	return e, nil
}

// Close releases the root directory handle if New opened it.
func (e *Engine) Close() error {
	e.direct.close()
	if e.ownRoot {
		return e.root.Close()
	}
	return nil
}

// Home returns the home dir (WithHome; "/" by default).
func (e *Engine) Home() string { return e.cfg.home }

// opContext applies the operation deadline.
func (e *Engine) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.cfg.opTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.cfg.opTimeout)
}

// fail maps an error of operation op on virtual path p to an *Error: a
// *backend.Error is kept (its Path set), anything else goes through
// backend.FromOS. EROFS names the writable roots when configured.
func (e *Engine) fail(op, p string, err error) *backend.Error {
	var be *backend.Error
	if errors.As(err, &be) {
		if be.Path == "" {
			be.Path = p
		}
		return be
	}
	be = backend.FromOS(op, p, err)
	if errors.Is(err, syscall.EROFS) {
		if len(e.cfg.writable) > 0 {
			be.Message += "; only " + strings.Join(e.cfg.writable, ", ") + " are writable, write there instead"
			be.WithDetail("writable_roots", strings.Join(e.cfg.writable, ","))
		}
	}
	return be
}

// skipped reports whether a walk must not enter the directory whose
// root-relative name is name.
func (e *Engine) skipped(name string) bool {
	return len(e.cfg.skip) > 0 && e.cfg.skip[virtual(name)]
}

// virtual turns a root-relative name ("." or "a/b") into its real virtual
// path ("/" or "/a/b").
func virtual(name string) string {
	if name == "." || name == "" {
		return "/"
	}
	return "/" + name
}

// joinName appends child to the root-relative directory name dir.
func joinName(dir, child string) string {
	if dir == "." || dir == "" {
		return child
	}
	return dir + "/" + child
}

// splitName returns the parent ("." at the top) and last component of a
// root-relative name.
func splitName(name string) (dir, base string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return ".", name
	}
	return name[:i], name[i+1:]
}
