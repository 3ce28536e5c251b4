package agentd

import (
	"github.com/plumbhq/plumb/internal/tenant"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/egressapproval"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/composite"
	"github.com/plumbhq/plumb/pkg/backend/hostfs"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/backend/storefs"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/skills"
	"github.com/plumbhq/plumb/pkg/store"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ThreadBackends builds each thread's file backend: the configured default
// plus routes under one Composite. State parts are restored from and
// persisted with the thread's checkpoints; sandbox and store parts are
// opened on first use (a sandbox is created for the thread then, and
// reused on later runs).
type ThreadBackends struct {
	cfg     *Config
	threads threadRecords
	pool    *fleet.Pool
	files   *storefs.DB
	lg      *zap.Logger
	secrets *secrets.Vault
	// configSkills and skillStore are the sources of the threads'
	// skills (skills.go); both may be empty.
	configSkills configSkills
	skillStore   store.Skills
	// egress watches boxes during tool calls and hands grants to new
	// ones (nil: egress approval is off).
	egress *egressapproval.Service
	// lifetimes records when each thread sandbox starts and ends (nil:
	// the store keeps none): GetUsage's sandbox seconds.
	lifetimes store.SandboxLedger
	// snaps records the threads' workspace snapshots (nil: the store
	// keeps none, and agentd takes none; workspaces.go).
	snaps store.ThreadSnapshots
	// suspend holds the timers that suspend interrupted threads' boxes.
	suspend suspender

	mu   sync.Mutex
	fsys map[string]*hostfs.Backend // by host dir, shared
}

// threadRecords is what thread backends read and write of the thread store.
type threadRecords interface {
	Thread(ctx context.Context, id string) (agent.Thread, error)
	LoadThread(ctx context.Context, id string) (*agent.ThreadData, error)
	SetSandbox(ctx context.Context, threadID, sandboxID string) error
}

// newThreadBackends keeps the files of store routes in the SQLite file at
// dbPath.
func newThreadBackends(cfg *Config, dbPath string, threads threadRecords, lg *zap.Logger, dial ...grpc.DialOption) (*ThreadBackends, error) {
	tb := &ThreadBackends{cfg: cfg, threads: threads, lg: lg.Named("backends"), fsys: map[string]*hostfs.Backend{}}
	if cfg.Sandbox.Address != "" {
		targets, err := fleet.ParseTargets(cfg.Sandbox.Address)
		if err != nil {
			return nil, fmt.Errorf("sandbox.address: %w", err)
		}
		p, err := fleet.New(fleet.Config{
			Targets: targets, Refresh: cfg.Sandbox.RefreshInterval, Deadline: cfg.Sandbox.WorkerDeadline, Logger: lg,
		}, dial...)
		if err != nil {
			return nil, fmt.Errorf("sandbox.address: %w", err)
		}
		tb.pool = p
	}
	for _, r := range cfg.Backends.Routes {
		if r.Type == "store" && tb.files == nil {
			db, err := storefs.Open(dbPath)
			if err != nil {
				tb.Close()
				return nil, fmt.Errorf("store routes: %w", err)
			}
			tb.files = db
		}
	}
	return tb, nil
}

// Close releases connections and databases.
func (tb *ThreadBackends) Close() {
	tb.stopSuspends()
	if tb.pool != nil {
		tb.pool.Close()
	}
	if tb.files != nil {
		tb.files.Close()
	}
	tb.mu.Lock()
	for _, f := range tb.fsys {
		f.Close()
	}
	tb.mu.Unlock()
}

// threadSkills lists the config and tenant skills of a thread (nil when
// it has none, or the skills cannot be listed: a run never fails for
// them, and the failure is logged).
func (tb *ThreadBackends) threadSkills(ctx context.Context, threadID string) (*threadSkills, error) {
	if len(tb.configSkills) == 0 && tb.skillStore == nil {
		return nil, nil
	}
	th, err := tb.threads.Thread(ctx, threadID)
	if err != nil {
		tb.lg.Warn("skills of the thread unavailable", zap.String("thread-id", threadID), zap.Error(err))
		return nil, nil
	}
	ts, err := tb.skillsFor(ctx, th.Tenant)
	if err != nil {
		tb.lg.Warn("skills of the thread unavailable", zap.String("thread-id", threadID), zap.Error(err))
		return nil, nil
	}
	return ts, nil
}

// Build implements deep.BackendFunc. A store route whose namespace needs
// a label the thread lacks fails the request here, before the run starts.
func (tb *ThreadBackends) Build(ctx context.Context, threadID string, labels map[string]string, stored map[string]json.RawMessage) (deep.ThreadBackend, error) {
	states := &stateSet{parts: map[string]*state.Backend{}}
	ts, err := tb.threadSkills(ctx, threadID)
	if err != nil {
		return deep.ThreadBackend{}, err
	}
	part := func(kind, prefix, root string, tmpl []string) (backend.Backend, error) {
		switch kind {
		case "state":
			b := state.New()
			states.parts[prefix] = b
			return b, nil
		case "filesystem":
			return tb.filesystem(root)
		case "store":
			ns, err := storeNamespace(prefix, tmpl, labels)
			if err != nil {
				return nil, err
			}
			return &lazy{open: func(context.Context) (backend.Backend, error) { return storefs.NewBackend(tb.files, ns) }}, nil
		case "sandbox":
			return newLazySandbox(tb, threadID, deep.AgentOf(ctx), ts), nil
		}
		return nil, fmt.Errorf("backend type %q", kind)
	}
	def, err := part(tb.cfg.Backends.Default, "", tb.cfg.Backends.Root, nil)
	if err != nil {
		return deep.ThreadBackend{}, err
	}
	routes := map[string]backend.Backend{}
	for prefix, r := range tb.cfg.Backends.Routes {
		if routes[prefix], err = part(r.Type, prefix, r.Root, r.Namespace); err != nil {
			return deep.ThreadBackend{}, err
		}
	}
	if err := states.load(stored); err != nil {
		return deep.ThreadBackend{}, err
	}
	tbk := deep.ThreadBackend{Backend: def, FileChanges: states.changes}
	if ts != nil {
		if _, taken := routes[SkillsRoute]; taken {
			tb.lg.Warn("backends.routes has a "+SkillsRoute+" route: the config and tenant skills are not served", zap.String("thread-id", threadID))
		} else {
			routes[SkillsRoute] = &skillRoute{ts: ts}
			boxDir := ""
			if ls, ok := def.(*lazySandbox); ok {
				boxDir = vpath.Join(ls.home, BoxSkillsDir)
			}
			for _, s := range ts.infos {
				s.Path = SkillsRoute + s.Name + "/" + skills.FileName
				if boxDir != "" {
					s.BoxDir = vpath.Join(boxDir, s.Name)
				}
				tbk.Skills = append(tbk.Skills, s)
			}
		}
	}
	if len(routes) > 0 {
		c, err := composite.New(def, routes, tb.cfg.Backends.ArtifactsRoot)
		if err != nil {
			return deep.ThreadBackend{}, fmt.Errorf("backends.routes: %w", err)
		}
		tbk.Backend = c
	}
	return tbk, nil
}

func (tb *ThreadBackends) filesystem(root string) (*hostfs.Backend, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if f, ok := tb.fsys[root]; ok {
		return f, nil
	}
	f, err := hostfs.New(root)
	if err != nil {
		return nil, fmt.Errorf("filesystem backend %s: %w", root, err)
	}
	tb.fsys[root] = f
	return f, nil
}

// storeNamespace fills the {metadata.<key>} placeholders of a store
// route's namespace from the thread's labels. A missing or unusable label
// is the request's fault (docs/agent-core.md §10.1: INVALID_ARGUMENT).
func storeNamespace(prefix string, tmpl []string, labels map[string]string) ([]string, error) {
	ns := make([]string, len(tmpl))
	for i, c := range tmpl {
		key, ok := namespaceLabel(c)
		if !ok {
			ns[i] = c
			continue
		}
		v := labels[key]
		if v == "" {
			return nil, fmt.Errorf("%w: metadata key %q is required by backend route %s (its namespace is %s); set it in RunRequest.metadata",
				agent.ErrInvalidInput, key, prefix, strings.Join(tmpl, "/"))
		}
		if err := storefs.ValidateNamespace([]string{v}); err != nil {
			return nil, fmt.Errorf("%w: metadata.%s %q cannot name the namespace of backend route %s: %v", agent.ErrInvalidInput, key, v, prefix, err)
		}
		ns[i] = v
	}
	return ns, nil
}

// namespaceLabel returns the label key of a `{metadata.<key>}` namespace
// component.
func namespaceLabel(c string) (string, bool) {
	key, ok := strings.CutPrefix(c, "{metadata.")
	if !ok || !strings.HasSuffix(key, "}") {
		return "", false
	}
	return strings.TrimSuffix(key, "}"), true
}

// DeleteThread removes the thread's sandbox, if it has one (the
// DeleteThread RPC calls it before deleting the thread).
func (tb *ThreadBackends) DeleteThread(ctx context.Context, threadID string) error {
	th, err := tb.threads.Thread(ctx, threadID)
	if err != nil || tb.pool == nil {
		return nil
	}
	if th.SandboxID == "" {
		tb.deleteThreadSnapshots(tenant.With(ctx, tenant.Norm(th.Tenant)), threadID)
		return nil
	}
	ctx = tenant.With(ctx, tenant.Norm(th.Tenant)) // sandboxd checks it
	if err := tb.pool.Delete(ctx, th.SandboxID); err != nil {
		return fmt.Errorf("delete sandbox %s of thread %s: %w", th.SandboxID, threadID, err)
	}
	tb.sandboxEnded(ctx, threadID, th.SandboxID)
	tb.deleteThreadSnapshots(ctx, threadID)
	return nil
}

// sandboxStarted records that the thread's sandbox id started now.
func (tb *ThreadBackends) sandboxStarted(ctx context.Context, th agent.Thread, id string) {
	if tb.lifetimes == nil {
		return
	}
	if err := tb.lifetimes.SandboxStarted(ctx, store.SandboxSpan{ID: id, Tenant: th.Tenant, ThreadID: th.ID, Started: time.Now()}); err != nil {
		tb.lg.Warn("record a sandbox's start", zap.String("thread-id", th.ID), zap.String("sandbox-id", id), zap.Error(err))
	}
}

// sandboxEnded records that the thread's sandbox id ended now (deleted,
// or found gone).
func (tb *ThreadBackends) sandboxEnded(ctx context.Context, threadID, id string) {
	if tb.lifetimes == nil {
		return
	}
	if err := tb.lifetimes.SandboxEnded(ctx, id, time.Now()); err != nil {
		tb.lg.Warn("record a sandbox's end", zap.String("thread-id", threadID), zap.String("sandbox-id", id), zap.Error(err))
	}
}

// sandbox returns the thread's sandbox backend, creating the sandbox when
// the thread has none or its old one is gone (expired, failed or
// deleted). Replacing a sandbox leaves a notice for the call that needed
// it (backend.Notify): the model must know that the workspace is empty.
func (tb *ThreadBackends) sandbox(ctx context.Context, threadID, agentName string) (backend.Backend, error) {
	if tb.pool == nil {
		return nil, backend.Errorf(backend.CodeUnsupported, "", "no sandboxd is configured")
	}
	th, err := tb.threads.Thread(ctx, threadID)
	if err != nil {
		return nil, backend.Errorf(backend.CodeUnavailable, "", "thread %s: %v", threadID, err)
	}
	// The sandbox belongs to the thread's tenant; sandboxd learns it from
	// the plumb-tenant header (tenant.DialOptions).
	ctx = tenant.With(ctx, tenant.Norm(th.Tenant))
	old := th.SandboxID
	var snaps []store.ThreadSnapshot // read only when a box is to be made
	why := "had expired or was deleted"
	if old != "" {
		// Only the live owner may say the sandbox is gone: an
		// unreachable worker fails the call (naming the worker) and
		// never leads to a fresh sandbox behind the model's back. A
		// worker no longer part of the fleet is gone for good: with a
		// snapshot of the thread's workspace the box is restored from it
		// (on any worker: a shared store), without one the call fails.
		c, err := tb.pool.Client(ctx, old)
		if errors.Is(err, fleet.ErrUnknownWorker) {
			snaps = tb.withHibernation(ctx, threadID, old, tb.restorable(ctx, threadID))
		}
		switch {
		case errors.Is(err, fleet.ErrUnknownWorker) && len(snaps) > 0:
			why = fmt.Sprintf("was lost with its sandboxd worker %s, which is no longer part of the fleet", sandboxapi.WorkerOf(old))
		case err != nil:
			return nil, tb.lost(ctx, threadID, old, err)
		default:
			resp, gerr := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: old})
			switch {
			case gerr == nil && serves(resp.GetSandbox().GetState()):
				// A paused or hibernated box wakes on its next call
				// (docs/workspaces.md): it is the thread's, files and all.
				return tb.pool.Backend(ctx, old, sandboxclient.HomeOf(resp.GetSandbox()))
			case gerr == nil:
				// Failed or stopping: it will never serve again.
				if err := tb.pool.Delete(ctx, old); err != nil {
					tb.lg.Warn("delete the thread's dead sandbox", zap.String("thread-id", threadID), zap.String("sandbox-id", old), zap.Error(err))
				}
			case status.Code(gerr) != codes.NotFound:
				return nil, tb.lost(ctx, threadID, old, gerr)
			}
		}
		if snaps == nil {
			snaps = tb.restorable(ctx, threadID)
		}
		tb.lg.Info("thread's sandbox is gone; creating a new one", zap.String("thread-id", threadID), zap.String("sandbox-id", old),
			zap.String("worker", sandboxapi.WorkerOf(old)), zap.Int("snapshots", len(snaps)))
		tb.sandboxEnded(ctx, threadID, old)
	} else {
		snaps = tb.restorable(ctx, threadID) // a fork's first box
	}
	t := tb.cfg.Sandbox.Template
	req := &plumbv1.CreateSandboxRequest{
		Template: t.Template, Image: t.Image, WorkingDir: t.WorkingDir, Env: t.Env, Runtime: t.Runtime,
		Resources: &plumbv1.Resources{Cpus: t.CPUs, MemoryBytes: int64(t.Memory), Pids: t.Pids},
		Labels:    map[string]string{"thread-id": threadID},
		Volumes:   t.volumeMounts(),
	}
	switch t.Network {
	case "egress":
		req.Network = plumbv1.NetworkMode_NETWORK_MODE_EGRESS
	case "none":
		req.Network = plumbv1.NetworkMode_NETWORK_MODE_NONE
	}
	if t.TTL > 0 {
		req.Ttl = durationpb.New(t.TTL)
	}
	if req.EgressSecrets, err = tb.egressSecrets(ctx, th.Tenant); err != nil {
		return nil, err
	}
	sb, from, failed, err := tb.createFrom(ctx, req, snaps)
	if err != nil {
		return nil, backend.Errorf(backend.CodeUnavailable, "", "create a sandbox for this thread: %s", status.Convert(err).Message())
	}
	if err := tb.threads.SetSandbox(ctx, threadID, sb.GetId()); err != nil {
		_ = tb.pool.Delete(context.WithoutCancel(ctx), sb.GetId())
		return nil, backend.Errorf(backend.CodeUnavailable, "", "record sandbox of thread %s: %v", threadID, err)
	}
	tb.lg.Info("created sandbox for thread", zap.String("thread-id", threadID), zap.String("sandbox-id", sb.GetId()), zap.String("snapshot-id", from.SnapshotID))
	if from.SnapshotID != "" && from.CheckpointID == 0 && tb.snaps != nil {
		// A lost box's own hibernation snapshot: the thread's now, so
		// that its deletion cascades.
		if _, err := tb.snaps.AddThreadSnapshot(ctx, from); err != nil {
			tb.lg.Warn("record the hibernation snapshot a box was restored from", zap.String("snapshot-id", from.SnapshotID), zap.Error(err))
		}
	}
	tb.sandboxStarted(ctx, th, sb.GetId())
	if tb.egress != nil && sb.GetNetwork() == plumbv1.NetworkMode_NETWORK_MODE_EGRESS {
		tb.egress.GrantNewBox(ctx, th.Tenant, agentName, threadID, sb.GetId())
	}
	home := sandboxclient.HomeOf(sb)
	switch {
	case from.SnapshotID != "" && old == "":
		backend.Notify(ctx, forkNotice(home, from))
	case from.SnapshotID != "":
		backend.Notify(ctx, restoredNotice(home, from, why))
	case old != "" || len(failed) > 0:
		backend.Notify(ctx, resetNotice(home, failed))
	}
	return tb.pool.Backend(ctx, sb.GetId(), home)
}

// lost is the error of a thread whose sandbox's worker cannot answer
// (unreachable, or not part of the fleet): the message names the worker,
// a sandbox_lost event follows the call (backend.ReportLost), and the
// sandbox is kept for when the worker comes back.
func (tb *ThreadBackends) lost(ctx context.Context, threadID, id string, err error) error {
	code := backend.CodeUnavailable
	if status.Code(err) == codes.NotFound {
		code = backend.CodeFileNotFound
	}
	msg := status.Convert(err).Message()
	tb.lg.Warn("thread's sandbox worker cannot be reached", zap.String("thread-id", threadID), zap.String("sandbox-id", id),
		zap.String("worker", sandboxapi.WorkerOf(id)), zap.Error(err))
	backend.ReportLost(ctx, backend.WorkerLost{Worker: sandboxapi.WorkerOf(id), SandboxID: id, Message: msg})
	return backend.Errorf(code, "", "the sandbox of this thread (%s) cannot be reached on its sandboxd worker %s: %s",
		id, sandboxapi.WorkerOf(id), msg)
}

// resetNotice tells the model that the thread's sandbox was replaced.
// failed lists the thread's snapshots that did not restore (id: reason).
func resetNotice(home string, failed []string) string {
	n := fmt.Sprintf("Notice: this thread's sandbox had expired or was deleted, so a new sandbox was created for this call. "+
		"Its workspace (%s) was reset and is empty: files, installed packages and background processes from earlier calls are gone. "+
		"Recreate what you still need before relying on it.", home)
	if len(failed) > 0 {
		n += " The thread's workspace snapshots could not be restored (" + strings.Join(failed, "; ") + ")."
	}
	return n
}

// stateSet holds a thread's State backends: the default's (prefix "") and
// one per state route, persisted together under their full virtual paths.
type stateSet struct {
	parts map[string]*state.Backend // by route prefix; "" = default
	takes map[string]func() (map[string]json.RawMessage, error)
}

// owner returns the prefix whose State backend stores virtual path p.
func (s *stateSet) owner(p string) string {
	best := ""
	for prefix := range s.parts {
		if prefix != "" && strings.HasPrefix(p, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	return best
}

// load restores each part from the thread's stored files (keyed by full
// virtual path) and binds it for change tracking.
func (s *stateSet) load(stored map[string]json.RawMessage) error {
	local := map[string]map[string]json.RawMessage{}
	for prefix := range s.parts {
		local[prefix] = map[string]json.RawMessage{}
	}
	for p, doc := range stored {
		prefix := s.owner(p)
		docs, ok := local[prefix]
		if !ok {
			continue // stored under a route that is no longer a State route
		}
		if prefix != "" {
			p = "/" + strings.TrimPrefix(p, prefix)
		}
		docs[p] = doc
	}
	s.takes = map[string]func() (map[string]json.RawMessage, error){}
	for prefix, b := range s.parts {
		take, err := deep.BindState(b, local[prefix])
		if err != nil {
			return err
		}
		s.takes[prefix] = take
	}
	return nil
}

// changes merges every part's delta under full virtual paths.
func (s *stateSet) changes() (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	for prefix, take := range s.takes {
		docs, err := take()
		if err != nil {
			return nil, err
		}
		for p, doc := range docs {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[strings.TrimSuffix(prefix, "/")+p] = doc
		}
	}
	return out, nil
}

// lazy opens its backend on first use. With reopen set, a call that
// fails because the backend is gone (reopen reports it) opens a new one
// and runs again there; calls racing on the same gone backend open only
// one. The notices of an opening (backend.Notify) go to the call that
// caused it, to each racer, and, when that call has no collector (a
// middleware hook, not a tool call), to the next call that has one.
type lazy struct {
	open   func(context.Context) (backend.Backend, error)
	reopen func(error) bool // nil: never reopen
	// failed, if set, sees every failed call's error and backend.
	failed func(ctx context.Context, b backend.Backend, err error)

	mu      sync.Mutex
	b       backend.Backend
	gen     int      // bumped each time b is replaced
	notices []string // left by the last open
	pending []string // notices no caller has taken yet
}

// get returns the backend and its generation. It opens one when there is
// none yet or when the caller found generation stale gone (stale < 0:
// nothing was found gone).
func (l *lazy) get(ctx context.Context, stale int) (backend.Backend, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.b == nil || l.gen == stale:
		octx, notices := backend.WithNotices(ctx)
		b, err := l.open(octx)
		if err != nil {
			return nil, 0, err
		}
		l.b, l.notices = b, notices()
		l.gen++
		l.pend(l.notices)
	case stale >= 0: // another call replaced the gone backend
		l.pend(l.notices)
	}
	var kept []string
	for _, n := range l.pending {
		if !backend.Notify(ctx, n) {
			kept = append(kept, n)
		}
	}
	l.pending = kept
	return l.b, l.gen, nil
}

func (l *lazy) pend(notices []string) {
	for _, n := range notices {
		if !slices.Contains(l.pending, n) {
			l.pending = append(l.pending, n)
		}
	}
}

func call[T any](ctx context.Context, l *lazy, f func(backend.Backend) (T, error)) (T, error) {
	b, gen, err := l.get(ctx, -1)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(b)
	if err == nil || l.reopen == nil || !l.reopen(err) {
		if err != nil && l.failed != nil {
			l.failed(ctx, b, err)
		}
		return v, err
	}
	if b, _, err = l.get(ctx, gen); err != nil {
		var zero T
		return zero, err
	}
	v, err = f(b)
	if err != nil && l.failed != nil {
		l.failed(ctx, b, err)
	}
	return v, err
}

// Ls implements backend.Backend.
func (l *lazy) Ls(ctx context.Context, p string) (backend.LsResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.LsResult, error) { return b.Ls(ctx, p) })
}

// Read implements backend.Backend.
func (l *lazy) Read(ctx context.Context, r backend.ReadRequest) (backend.ReadResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.ReadResult, error) { return b.Read(ctx, r) })
}

// Write implements backend.Backend.
func (l *lazy) Write(ctx context.Context, p string, c []byte) (backend.WriteResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.WriteResult, error) { return b.Write(ctx, p, c) })
}

// Edit implements backend.Backend.
func (l *lazy) Edit(ctx context.Context, r backend.EditRequest) (backend.EditResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.EditResult, error) { return b.Edit(ctx, r) })
}

// Delete implements backend.Backend.
func (l *lazy) Delete(ctx context.Context, p string) (backend.DeleteResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.DeleteResult, error) { return b.Delete(ctx, p) })
}

// Grep implements backend.Backend.
func (l *lazy) Grep(ctx context.Context, r backend.GrepRequest) (backend.GrepResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.GrepResult, error) { return b.Grep(ctx, r) })
}

// Glob implements backend.Backend.
func (l *lazy) Glob(ctx context.Context, r backend.GlobRequest) (backend.GlobResult, error) {
	return call(ctx, l, func(b backend.Backend) (backend.GlobResult, error) { return b.Glob(ctx, r) })
}

// Upload implements backend.Backend.
func (l *lazy) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	return call(ctx, l, func(b backend.Backend) ([]backend.UploadResult, error) { return b.Upload(ctx, items) })
}

// Download implements backend.Backend.
func (l *lazy) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	return call(ctx, l, func(b backend.Backend) ([]backend.DownloadResult, error) { return b.Download(ctx, paths) })
}

// lazySandbox is the thread's sandbox, created on first use and again
// when it turns out to be gone (see ThreadBackends.sandbox). It always
// offers execute, and its home is the template's working dir.
type lazySandbox struct {
	*lazy
	home string
	tb   *ThreadBackends
	// threadID and agent (the run's primary agent) are what egress asks
	// are recorded for.
	threadID, agent string
}

func newLazySandbox(tb *ThreadBackends, threadID, agentName string, ts *threadSkills) *lazySandbox {
	home := tb.cfg.Sandbox.Template.WorkingDir
	if home == "" {
		home = "/workspace"
	}
	return &lazySandbox{
		lazy: &lazy{
			open: func(ctx context.Context) (backend.Backend, error) {
				b, err := tb.sandbox(ctx, threadID, agentName)
				if err == nil && ts != nil {
					// The box first needed in this run segment gets the
					// thread's skills (a new box, or one whose copy may be
					// older than a PutSkill).
					ts.copyInto(ctx, b, backend.Home(b), tb.lg.With(zap.String("thread-id", threadID)))
				}
				return b, err
			},
			reopen: func(err error) bool { return errors.Is(err, sandboxclient.ErrGone) },
			failed: func(ctx context.Context, b backend.Backend, err error) {
				// An unavailable call on a worker the pool sees down is
				// a lost worker, not a failure of the sandbox itself.
				sb, ok := b.(*sandboxclient.Backend)
				if !ok || backend.CodeOf(err) != backend.CodeUnavailable || !tb.pool.Down(sb.ID()) {
					return
				}
				backend.ReportLost(ctx, backend.WorkerLost{Worker: sandboxapi.WorkerOf(sb.ID()), SandboxID: sb.ID(), Message: err.Error()})
			},
		},
		home: home, tb: tb, threadID: threadID, agent: agentName,
	}
}

// watchEgress makes b's box ask a human about its connections off the
// allow-list while the tool call of ctx runs in it (egress approval on):
// the returned stop ends that. Without a tool call (a hook's command) or
// an egress box, nothing asks.
func (s *lazySandbox) watchEgress(ctx context.Context, b backend.Backend) (stop func()) {
	call := backend.EgressCallOf(ctx)
	sb, ok := b.(*sandboxclient.Backend)
	if s.tb.egress == nil || call == nil || !ok {
		return func() {}
	}
	th, err := s.tb.threads.Thread(ctx, s.threadID)
	if err != nil {
		return func() {}
	}
	return s.tb.egress.Watch(ctx, egressapproval.Spec{Tenant: th.Tenant, ThreadID: s.threadID, SandboxID: sb.ID(), Agent: s.agent, Call: call})
}

// Home implements backend.Homer.
func (s *lazySandbox) Home() string { return s.home }

// Execute implements backend.Executor.
func (s *lazySandbox) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return call(ctx, s.lazy, func(b backend.Backend) (backend.ExecuteResult, error) {
		ex, ok := b.(backend.Executor)
		if !ok {
			return backend.ExecuteResult{}, backend.Errorf(backend.CodeUnsupported, "", "the sandbox backend cannot execute")
		}
		defer s.watchEgress(ctx, b)()
		return ex.Execute(ctx, req)
	})
}

// ExecuteStream is Execute passing the output to onOutput while the
// command runs, when the sandbox backend can.
func (s *lazySandbox) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (backend.ExecuteResult, error) {
	return call(ctx, s.lazy, func(b backend.Backend) (backend.ExecuteResult, error) {
		if st, ok := b.(interface {
			ExecuteStream(context.Context, backend.ExecuteRequest, func([]byte) error) (backend.ExecuteResult, error)
		}); ok {
			defer s.watchEgress(ctx, b)()
			return st.ExecuteStream(ctx, req, onOutput)
		}
		ex, ok := b.(backend.Executor)
		if !ok {
			return backend.ExecuteResult{}, backend.Errorf(backend.CodeUnsupported, "", "the sandbox backend cannot execute")
		}
		return ex.Execute(ctx, req)
	})
}

var (
	_ backend.Backend  = (*lazySandbox)(nil)
	_ backend.Executor = (*lazySandbox)(nil)
	_ backend.Homer    = (*lazySandbox)(nil)
)

// StartProcess implements backend.ProcessStarter in the thread's sandbox
// (created or replaced as for any other call).
func (s *lazySandbox) StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error) {
	return call(ctx, s.lazy, func(b backend.Backend) (backend.Process, error) {
		ps, ok := b.(backend.ProcessStarter)
		if !ok {
			return nil, backend.Errorf(backend.CodeUnsupported, "", "the sandbox backend cannot start processes")
		}
		return ps.StartProcess(ctx, req)
	})
}

var _ backend.ProcessStarter = (*lazySandbox)(nil)

// egressSecrets resolves sandbox.template.egress_secrets for a tenant's
// box. The values go to sandboxd only; errors name secrets, never values.
func (tb *ThreadBackends) egressSecrets(ctx context.Context, tenantName string) ([]*plumbv1.EgressSecret, error) {
	rules := tb.cfg.Sandbox.Template.EgressSecrets
	if len(rules) == 0 {
		return nil, nil
	}
	if tb.secrets == nil {
		return nil, backend.Errorf(backend.CodeUnavailable, "", "egress secrets are configured but this agentd has no secret store")
	}
	var out []*plumbv1.EgressSecret
	for _, r := range rules {
		v, err := tb.secrets.Resolve(ctx, tenant.Norm(tenantName), r.Secret)
		if err != nil {
			return nil, backend.Errorf(backend.CodeUnavailable, "", "egress secret %q for this thread's sandbox: %v", r.Secret, err)
		}
		format := r.Format
		if format == "" {
			format = SecretValue
		}
		out = append(out, &plumbv1.EgressSecret{Name: r.Secret, Hosts: r.Hosts, Header: r.Header,
			Value: strings.Replace(format, SecretValue, string(v), 1), Secret: string(v)})
	}
	return out, nil
}

// serves reports whether a sandbox in state st still serves its thread:
// running, or suspended (the next call wakes it).
func serves(st plumbv1.SandboxState) bool {
	switch st {
	case plumbv1.SandboxState_SANDBOX_STATE_RUNNING, plumbv1.SandboxState_SANDBOX_STATE_PAUSED, plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED:
		return true
	}
	return false
}
