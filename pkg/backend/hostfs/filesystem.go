package hostfs

import (
	"fmt"
	"os"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// Backend is a host directory served through the file engine. It
// implements backend.Backend; the embedded Engine provides every
// operation. Close it to release the directory handle.
type Backend struct {
	*fileops.Engine
	dir string
}

var _ backend.Backend = (*Backend)(nil)

// config collects the options.
type config struct {
	maxFileSize int64
	create      bool
	engine      []fileops.Option
}

// Option configures a Backend.
type Option func(*config)

// WithMaxFileSize caps the size of files that read returns text from and
// that grep searches, in bytes (0, the default, means no cap): a larger
// file is too_large for read and is skipped by grep (counted as
// unreadable). It mirrors deepagents' max_file_size_mb.
func WithMaxFileSize(n int64) Option {
	return func(c *config) { c.maxFileSize = n }
}

// WithCreate creates the directory (and its parents, mode 0755) when it
// does not exist.
func WithCreate() Option {
	return func(c *config) { c.create = true }
}

// WithEngineOptions passes options through to the engine (caps, budgets,
// deadlines; see package fileops).
func WithEngineOptions(opts ...fileops.Option) Option {
	return func(c *config) { c.engine = append(c.engine, opts...) }
}

// New returns the Filesystem backend of the host directory dir, which
// must exist (see WithCreate) and be a directory.
func New(dir string, opts ...Option) (*Backend, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("filesystem backend: %w", err)
		}
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("filesystem backend: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("filesystem backend: %s is not a directory", dir)
	}
	eopts := append([]fileops.Option{fileops.WithMaxFileSize(c.maxFileSize)}, c.engine...)
	e, err := fileops.New(dir, eopts...)
	if err != nil {
		return nil, fmt.Errorf("filesystem backend: %w", err)
	}
	return &Backend{Engine: e, dir: dir}, nil
}

// Dir returns the host directory the backend serves.
func (b *Backend) Dir() string { return b.dir }
