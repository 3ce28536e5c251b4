package memory

import (
	"context"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/prompt"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name.
const Name = "memory"

// DefaultMaxFileBytes caps each memory file.
const DefaultMaxFileBytes = 64 << 10

// Config is middleware.memory.
type Config struct {
	// Paths are the memory files, in prompt order.
	Paths []string
	// MaxFileBytes caps each file; 0 means DefaultMaxFileBytes.
	MaxFileBytes int
	// Guidance replaces the section's default guidance text
	// (prompt.sections.memory); "" keeps the default.
	Guidance string
}

// Middleware is the memory middleware. Build one per agent context: the
// loaded files live in the instance for the run segment.
type Middleware struct {
	agent.BaseMiddleware
	cfg     Config
	section string
}

// New returns the middleware.
func New(cfg Config) *Middleware {
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	return &Middleware{cfg: cfg}
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// BeforeAgent loads the files. A missing file is skipped silently; any
// other failure is logged and the section says the file is unavailable.
func (m *Middleware) BeforeAgent(ctx context.Context, rc *agent.RunContext, _ *agent.State) error {
	m.section = ""
	b := rc.Backend
	if b == nil || len(m.cfg.Paths) == 0 {
		return nil
	}
	results, err := b.Download(ctx, m.cfg.Paths)
	if err != nil {
		rc.Logger.Warn("memory files unavailable", zap.Error(err))
		results = make([]backend.DownloadResult, len(m.cfg.Paths))
		for i, p := range m.cfg.Paths {
			results[i] = backend.DownloadResult{Path: p, Err: &backend.Error{Code: backend.CodeUnavailable, Message: err.Error()}}
		}
	}
	var files []prompt.MemoryFile
	for i, r := range results {
		p := m.cfg.Paths[min(i, len(m.cfg.Paths)-1)]
		if r.Err != nil {
			if r.Err.Code == backend.CodeFileNotFound {
				continue
			}
			rc.Logger.Warn("memory file unavailable", zap.String("path", p), zap.String("error-code", string(r.Err.Code)))
			files = append(files, prompt.MemoryFile{Path: p, Unavailable: true})
			continue
		}
		content := r.Content
		if len(content) > m.cfg.MaxFileBytes {
			cut := m.cfg.MaxFileBytes
			for cut > 0 && !utf8.RuneStart(content[cut]) {
				cut--
			}
			content = content[:cut]
			rc.Logger.Info("memory file capped", zap.String("path", p), zap.Int("max-file-bytes", m.cfg.MaxFileBytes))
		}
		files = append(files, prompt.MemoryFile{Path: p, Content: string(content)})
	}
	m.section = prompt.MemorySection(m.cfg.Guidance, files)
	return nil
}

// WrapModel appends the memory section to the system prompt.
func (m *Middleware) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		if m.section == "" {
			return next(ctx, req)
		}
		r := *req // edits affect this call only, even if an outer wrapper retries
		if r.System != "" {
			r.System += "\n\n"
		}
		r.System += m.section
		return next(ctx, &r)
	}
}
