package filesystem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name.
const Name = "filesystem"

// Defaults of middleware.filesystem (docs/agent-core.md §3.2 #2).
const (
	DefaultEvictChars            = 80000
	DefaultPreviewLines          = 5
	DefaultPreviewLineChars      = 1000
	DefaultEvictUserMessageChars = 200000
	DefaultGrepMaxCount          = 1000
	DefaultExecuteMaxTimeout     = 3600 * time.Second
	DefaultExecuteTimeout        = 120 * time.Second
	// ResultCap caps every text result of the file tools.
	ResultCap = 80000
	// trackedReads is how many recently read files are checked for
	// outside modification.
	trackedReads = 50
)

// DefaultEvictExempt are the tools whose results are never evicted.
func DefaultEvictExempt() []string {
	return []string{"ls", "glob", "grep", "read_file", "edit_file", "write_file", "delete"}
}

// Config is middleware.filesystem plus the agent's preset.
type Config struct {
	// EvictToolResultChars is the eviction threshold (0 = 80,000).
	EvictToolResultChars int
	// EvictExempt lists tools never evicted (nil = DefaultEvictExempt).
	EvictExempt []string
	// PreviewLines and PreviewLineChars shape the eviction preview.
	PreviewLines, PreviewLineChars int
	// EvictUserMessageChars is the user-message offload threshold
	// (0 = 200,000).
	EvictUserMessageChars int
	// GrepMaxCount is grep's default max_count (0 = 1000).
	GrepMaxCount int
	// ExecuteMaxTimeout caps execute's timeout (0 = 3600s).
	ExecuteMaxTimeout time.Duration
	// ExecuteDefaultTimeout is used when the model sends no timeout
	// (0 = 120s).
	ExecuteDefaultTimeout time.Duration
	// GrepLiteralOnly removes grep's regex option (tools.grep.regex:
	// false): patterns are always literal text.
	GrepLiteralOnly bool
	// ArtifactsRoot is backends.artifacts_root ("" = "/").
	ArtifactsRoot string
	// Preset is the agent's permission preset ("" = full).
	Preset tools.Preset
	// Vision is set when the context's model accepts images: read_file of
	// an image then attaches it to the result instead of a placeholder.
	Vision bool
}

func (c Config) withDefaults() Config {
	if c.EvictToolResultChars <= 0 {
		c.EvictToolResultChars = DefaultEvictChars
	}
	if c.EvictExempt == nil {
		c.EvictExempt = DefaultEvictExempt()
	}
	if c.PreviewLines <= 0 {
		c.PreviewLines = DefaultPreviewLines
	}
	if c.PreviewLineChars <= 0 {
		c.PreviewLineChars = DefaultPreviewLineChars
	}
	if c.EvictUserMessageChars <= 0 {
		c.EvictUserMessageChars = DefaultEvictUserMessageChars
	}
	if c.GrepMaxCount <= 0 {
		c.GrepMaxCount = DefaultGrepMaxCount
	}
	if c.ExecuteMaxTimeout <= 0 {
		c.ExecuteMaxTimeout = DefaultExecuteMaxTimeout
	}
	if c.ExecuteDefaultTimeout <= 0 {
		c.ExecuteDefaultTimeout = DefaultExecuteTimeout
	}
	if c.ArtifactsRoot == "" {
		c.ArtifactsRoot = "/"
	}
	if c.Preset == "" {
		c.Preset = tools.PresetFull
	}
	return c
}

// Middleware is the filesystem middleware of one agent context.
type Middleware struct {
	agent.BaseMiddleware
	cfg Config
	b   backend.Backend
	mu  sync.Mutex // serializes read-modify-write of the private state
}

// New returns the middleware over b.
func New(b backend.Backend, cfg Config) *Middleware {
	return &Middleware{cfg: cfg.withDefaults(), b: b}
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// private is the middleware's scratch state (persisted with the context).
type private struct {
	// Reads are the stamps of recently read files, oldest first.
	Reads []stamp `json:"reads,omitempty"`
	// Offloaded maps log indexes of offloaded user messages to paths.
	Offloaded map[int]string `json:"offloaded,omitempty"`
}

type stamp struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	Gone       bool   `json:"gone,omitempty"`
}

func (m *Middleware) load(st *agent.State) private {
	var p private
	if _, err := st.Private(Name, &p); err != nil {
		return private{}
	}
	return p
}

func (m *Middleware) update(st *agent.State, f func(*private)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.load(st)
	f(&p)
	_ = st.SetPrivate(Name, p) // private is plain data; encoding cannot fail
}

// stat finds p's entry by listing its directory (backends have no stat).
func (m *Middleware) stat(ctx context.Context, p string) (stamp, bool) {
	res, err := m.b.Ls(ctx, vpath.Dir(p))
	if err != nil {
		return stamp{Path: p, Gone: true}, backend.CodeOf(err) == backend.CodeFileNotFound || backend.CodeOf(err) == backend.CodeNotADirectory
	}
	for _, e := range res.Entries {
		if e.Path == p {
			return stamp{Path: p, Size: e.Size, ModifiedAt: e.ModifiedAt}, true
		}
	}
	return stamp{Path: p, Gone: true}, !res.Truncated
}

// noteRead records the stamp of a file this context just read or wrote.
func (m *Middleware) noteRead(ctx context.Context, st *agent.State, p string, onlyIfTracked bool) {
	s, ok := m.stat(ctx, p)
	if !ok {
		return
	}
	m.update(st, func(pv *private) {
		i := slices.IndexFunc(pv.Reads, func(r stamp) bool { return r.Path == p })
		if i < 0 && onlyIfTracked {
			return
		}
		if i >= 0 {
			pv.Reads = slices.Delete(pv.Reads, i, i+1)
		}
		pv.Reads = append(pv.Reads, s)
		if n := len(pv.Reads) - trackedReads; n > 0 {
			pv.Reads = slices.Delete(pv.Reads, 0, n)
		}
	})
}

// WrapModel offloads huge user messages in the request copy, keeps images
// from a model without vision, and, after the model asked for tools,
// checks the files this context read for outside changes (the
// file_modified reminder, once per step).
func (m *Middleware) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		r := *req
		r.Messages = m.offloadUserMessages(ctx, req)
		if !m.cfg.Vision {
			r.Messages = withoutImages(r.Messages)
		}
		resp, err := next(ctx, &r)
		if err != nil || len(resp.Message.ToolCalls) == 0 {
			return resp, err
		}
		m.checkModified(ctx, req.Run, req.State)
		return resp, nil
	}
}

func (m *Middleware) checkModified(ctx context.Context, rc *agent.RunContext, st *agent.State) {
	reads := m.load(st).Reads
	var changed []string
	fresh := make(map[string]stamp)
	for _, r := range reads {
		if r.Gone {
			continue
		}
		s, ok := m.stat(ctx, r.Path)
		if !ok {
			continue
		}
		if s.Gone || s.Size != r.Size || s.ModifiedAt != r.ModifiedAt {
			what := r.Path
			if s.Gone {
				what += " (deleted)"
			}
			changed = append(changed, what)
			fresh[r.Path] = s
		}
	}
	if len(changed) == 0 {
		return
	}
	m.update(st, func(pv *private) {
		for i, r := range pv.Reads {
			if s, ok := fresh[r.Path]; ok {
				pv.Reads[i] = s
			}
		}
	})
	rc.Remind("file_modified", fmt.Sprintf("These files changed since you last read them (modified by the user, a subagent, or a command): %s. Read them again before editing them; edits based on the old content will fail or undo those changes.", strings.Join(changed, ", ")))
}

func (m *Middleware) offloadUserMessages(ctx context.Context, req *agent.ModelRequest) []model.Message {
	limit := m.cfg.EvictUserMessageChars
	big := false
	for _, msg := range req.Messages {
		if msg.Role == model.RoleUser && len(msg.Content) > limit && utf8.RuneCountInString(msg.Content) > limit {
			big = true
			break
		}
	}
	if !big {
		return req.Messages
	}
	view := req.State.Effective()
	out := slices.Clone(req.Messages)
	for i, msg := range out {
		if msg.Role != model.RoleUser || len(msg.Content) <= limit || utf8.RuneCountInString(msg.Content) <= limit || i >= len(view) {
			continue
		}
		index := view[i].Index
		p := m.load(req.State).Offloaded[index]
		if p == "" {
			p = vpath.Join(m.cfg.ArtifactsRoot, fmt.Sprintf("conversation_history/%s_message_%d.md", sanitizeID(req.Run.ThreadID), index))
			if _, err := m.b.Write(ctx, p, []byte(msg.Content)); err != nil {
				req.Run.Logger.Warn("offload of a large user message failed")
				continue
			}
			m.update(req.State, func(pv *private) {
				if pv.Offloaded == nil {
					pv.Offloaded = make(map[int]string)
				}
				pv.Offloaded[index] = p
			})
		}
		out[i].Content = fmt.Sprintf("[This message is %d characters long, too long to include here. Its full text was saved to %s; read it with read_file (offset, limit) as needed. Its beginning:]\n\n%s",
			utf8.RuneCountInString(msg.Content), p, m.headPreview(msg.Content))
	}
	return out
}

// noImageNote replaces the images of a message sent to a model without
// vision (an image read while the thread used a vision-capable model).
const noImageNote = "\n\n[The image is not shown: this model does not accept images.]"

// withoutImages returns msgs with every image replaced by noImageNote.
func withoutImages(msgs []model.Message) []model.Message {
	if !slices.ContainsFunc(msgs, func(m model.Message) bool { return len(m.Images) > 0 }) {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		if len(out[i].Images) > 0 {
			out[i].Images = nil
			out[i].Content += noImageNote
		}
	}
	return out
}

func (m *Middleware) headPreview(s string) string {
	lines := strings.SplitN(s, "\n", m.cfg.PreviewLines+1)
	if len(lines) > m.cfg.PreviewLines {
		lines = lines[:m.cfg.PreviewLines]
	}
	for i, l := range lines {
		lines[i] = cutChars(l, m.cfg.PreviewLineChars)
	}
	return strings.Join(lines, "\n")
}

// WrapTool evicts large results of non-exempt tools, and appends what the
// backend had to say about the call (backend.Notify: a sandbox that was
// replaced and whose workspace is empty) to its result, after eviction so
// that it stays in view. A call that could not reach its sandbox's worker
// (backend.ReportLost) is followed by a sandbox_lost event naming it.
func (m *Middleware) WrapTool(next agent.ToolHandler) agent.ToolHandler {
	return func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
		ctx, notices := backend.WithNotices(ctx)
		ctx, lost := backend.WithLostWorkers(ctx)
		ctx = backend.WithEgressCall(ctx, egressCall(req))
		res, err := next(ctx, req)
		for _, l := range lost() {
			req.EmitAfterResult(agent.SandboxLost{Worker: l.Worker, SandboxID: l.SandboxID, Message: l.Message})
		}
		if err != nil {
			return res, err
		}
		if !slices.Contains(m.cfg.EvictExempt, req.Call.Name) {
			res = Evict(ctx, m.b, req.Call, res, EvictOptions{
				Threshold: m.cfg.EvictToolResultChars, ArtifactsRoot: m.cfg.ArtifactsRoot,
				PreviewLines: m.cfg.PreviewLines, PreviewLineChars: m.cfg.PreviewLineChars,
			})
		}
		for _, n := range notices() {
			res.Content += "\n\n[" + n + "]"
		}
		return res, nil
	}
}

// egressCall lets a sandbox backend report the connections its box holds
// for a human's decision while req runs, as events of req's agent context.
func egressCall(req *agent.ToolRequest) backend.EgressCall {
	c := backend.EgressCall{ToolCallID: req.Call.ID}
	if req.Run == nil {
		c.Report = func(backend.EgressEvent) {}
		return c
	}
	rc := req.Run
	c.AgentPath, c.RunID = rc.AgentPath, rc.RunID
	c.Report = func(e backend.EgressEvent) {
		if !e.Closed {
			rc.Emit(agent.EgressRequested{RequestID: e.RequestID, Host: e.Host, Port: e.Port, ToolCallID: req.Call.ID, Agent: e.Agent, SandboxID: e.SandboxID})
			return
		}
		rc.Emit(agent.EgressDecided{RequestID: e.RequestID, Host: e.Host, Port: e.Port, Allowed: e.Allowed, Scope: e.Scope,
			DecidedBy: e.DecidedBy, Reason: e.Reason, ToolCallID: req.Call.ID})
	}
	return c
}

func cutChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
