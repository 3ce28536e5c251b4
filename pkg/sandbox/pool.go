package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap"
)

// LabelPool marks a container created for a warm pool; its value is the
// pool key (a hash of the template, the agent binary, the sandbox user and
// the worker's extra labels). A claimed box keeps it: container labels
// cannot change, so what the claim gave the box (owner, labels, TTL) lives
// in the worker's claim record (see claimStore).
const LabelPool = "plumb.pool"

// PoolConfig configures the warm pool of one template.
type PoolConfig struct {
	// Size is how many boxes the pool keeps created, started and greeted,
	// with their agent channel open (0 = no pool).
	Size int `yaml:"size"`
	// IdleLifetime is how long an unclaimed box is kept before it is
	// replaced by a fresh one (0 = DefaultPoolIdleLifetime).
	IdleLifetime time.Duration `yaml:"idle_lifetime"`
}

// Bounds of PoolConfig.
const (
	// MaxPoolSize bounds PoolConfig.Size.
	MaxPoolSize = 64
	// DefaultPoolIdleLifetime is the default PoolConfig.IdleLifetime.
	DefaultPoolIdleLifetime = time.Hour
)

// PoolState reports one warm pool.
type PoolState struct {
	// Template is the template the pool serves ("" = requests that name
	// no template: the worker's defaults).
	Template string
	// Size is the configured number of boxes.
	Size int
	// Ready counts boxes that can be claimed now.
	Ready int
	// Starting counts boxes being created, or greeted again after a
	// worker restart.
	Starting int
	// IdleLifetime is how long an unclaimed box is kept.
	IdleLifetime time.Duration
	// Hits counts creates served from the pool, Misses creates for the
	// pool's template and settings that found no ready box and started
	// one cold.
	Hits, Misses uint64
	// MemoryBytes is the memory reserved by the pool's boxes.
	MemoryBytes int64
}

// pool is the warm pool of one template; the Manager's mu guards it.
type pool struct {
	name     string
	size     int
	idle     time.Duration
	t        Template // the template resolved against the defaults
	key      string   // LabelPool of its boxes
	members  []*member
	creating int
	hits     uint64
	misses   uint64
}

// member is a box of a pool. warm: its agent was greeted by this worker
// and its channel is open (a re-adopted box is not warm until greeted).
type member struct {
	sb   *sandbox
	warm bool
}

// pools is the Manager's pool state; the Manager's mu guards it.
type pools struct {
	byName map[string]*pool
	// n counts members; failed, the members that failed (their quota is
	// released); mem, the memory of members that did not fail. Members
	// are counted in Manager.reserved and against MaxSandboxes, but not
	// in Usage (a claim turns one into a live sandbox at no extra cost).
	n      int
	failed int
	mem    int64
	claims *claimStore
	kick   chan struct{}
	stop   context.CancelFunc
	done   chan struct{}
}

// poolFor returns the pool a request may claim from: the pool of the
// template it names, when the request resolves to that pool's settings
// (anything but the TTL, which the claim sets).
func (ps *pools) poolFor(name string, t Template) *pool {
	p := ps.byName[name]
	if p == nil || !sameBox(p.t, t) {
		return nil
	}
	return p
}

// sameBox reports whether two resolved templates make the same container
// (the TTL is not part of a container). It compares every field, so a
// setting added to Template later takes part without a change here.
func sameBox(a, b Template) bool {
	a.TTL, b.TTL = 0, 0
	if len(a.Env) == 0 {
		a.Env = nil
	}
	if len(b.Env) == 0 {
		b.Env = nil
	}
	return reflect.DeepEqual(a, b)
}

// newPools resolves and checks the configured pools; their boxes need a
// state dir to record claims in.
func (m *Manager) newPools() (*pools, error) {
	ps := &pools{byName: map[string]*pool{}, kick: make(chan struct{}, 1)}
	agentSum := sha256.Sum256(m.cfg.Agent)
	for _, name := range sortedKeys(m.cfg.Pools) {
		pc := m.cfg.Pools[name]
		what := fmt.Sprintf("pool of template %q", name)
		if name == "" {
			what = "pool of the defaults"
		}
		switch {
		case pc.Size < 0 || pc.Size > MaxPoolSize:
			return nil, fmt.Errorf("%s: size %d out of range 0..%d", what, pc.Size, MaxPoolSize)
		case pc.IdleLifetime < 0:
			return nil, fmt.Errorf("%s: idle_lifetime %s must not be negative", what, pc.IdleLifetime)
		case pc.Size == 0:
			continue
		case m.cfg.StateDir == "":
			return nil, fmt.Errorf("%s: warm pools need a state dir, where the worker records what each claim gave its box", what)
		}
		t := m.cfg.Defaults
		if name != "" {
			base, ok := m.cfg.Templates[name]
			if !ok {
				return nil, fmt.Errorf("%s: no such template (known: %v)", what, sortedKeys(m.cfg.Templates))
			}
			t = base.Merge(m.cfg.Defaults)
		}
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		h := sha256.New()
		key := t
		key.TTL = 0
		// Applied after a claim, as the TTL: a change drains no pool.
		key.IdleSuspendAfter, key.HibernateAfter = 0, 0
		_ = json.NewEncoder(h).Encode(struct {
			Name, User, Agent string
			T                 Template
			Labels            map[string]string
		}{name, m.cfg.User, hex.EncodeToString(agentSum[:]), key, m.cfg.ExtraLabels})
		ps.byName[name] = &pool{
			name: name, size: pc.Size, idle: cmp(pc.IdleLifetime, DefaultPoolIdleLifetime), t: t,
			key: hex.EncodeToString(h.Sum(nil))[:16],
		}
	}
	return ps, nil
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Pools reports the warm pools, sorted by template name.
func (m *Manager) Pools() []PoolState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PoolState, 0, len(m.pools.byName))
	for _, name := range sortedKeys(m.pools.byName) {
		p := m.pools.byName[name]
		s := PoolState{Template: name, Size: p.size, Starting: p.creating, IdleLifetime: p.idle, Hits: p.hits, Misses: p.misses}
		for _, mb := range p.members {
			mb.sb.mu.Lock()
			if mb.sb.info.State == StateRunning {
				if mb.warm {
					s.Ready++
				} else {
					s.Starting++
				}
				s.MemoryBytes += mb.sb.info.Settings.MemoryBytes
			}
			mb.sb.mu.Unlock()
		}
		s.MemoryBytes += int64(p.creating) * p.t.MemoryBytes
		out = append(out, s)
	}
	return out
}

// claim hands out a warm box of the pool the request may use, or returns
// nil (a miss, or no pool for the request). The box gets the request's
// owner, labels and TTL, counted from now, and its claim is recorded
// before it is returned: a restarted worker re-adopts it as this sandbox,
// never as a pool box again. A box is claimed at most once, so its
// workspace has never been used.
func (m *Manager) claim(spec CreateSpec, t Template) (*sandbox, error) {
	m.mu.Lock()
	p := m.pools.poolFor(spec.Template, t)
	if p == nil {
		m.mu.Unlock()
		return nil, nil
	}
	if m.closed {
		m.mu.Unlock()
		return nil, errorf(CodeShuttingDown, "worker %s is shutting down", m.cfg.Worker)
	}
	// A claim is a create for the tenant: the same per-tenant limits, under
	// the same lock.
	if err := m.checkTenant(tenantOf(spec.Tenant), t); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	sb := m.takeMember(p, spec, t)
	if sb == nil {
		p.misses++
		m.mu.Unlock()
		m.kickPools()
		return nil, nil
	}
	m.sandboxes[sb.info.ID] = sb
	p.hits++
	m.mu.Unlock()
	time.AfterFunc(refillDelay, m.kickPools)
	if err := m.markClaimed(sb, claimOf(sb)); err != nil {
		// A box that is not pristine, or whose claim is not recorded
		// (it would look unclaimed after a restart), is not handed out:
		// the create starts a box cold.
		m.lg.Warn("claim a pool box; dropping the box", zap.String("sandbox-id", sb.info.ID), zap.Error(err))
		if err := m.Delete(context.Background(), sb.info.ID); err != nil {
			m.lg.Warn("drop a pool box", zap.String("sandbox-id", sb.info.ID), zap.Error(err))
		}
		m.mu.Lock()
		p.hits--
		p.misses++
		m.mu.Unlock()
		return nil, nil
	}
	return sb, nil
}

// takeMember takes a warm box out of pool p and gives it to spec's owner,
// labels and TTL (counted from now), or returns nil; m.mu is held.
func (m *Manager) takeMember(p *pool, spec CreateSpec, t Template) *sandbox {
	now := m.now()
	for i, mb := range p.members {
		if !mb.warm {
			continue
		}
		s := mb.sb
		s.mu.Lock()
		ok := s.info.State == StateRunning && s.ch != nil && !s.ch.broken()
		if ok {
			s.member = false
			s.info.Template, s.info.Tenant, s.info.Labels, s.info.Settings = spec.Template, tenantOf(spec.Tenant), maps.Clone(spec.Labels), t
			s.info.CreatedAt, s.info.LastUsedAt, s.info.ExpiresAt = now, now, now.Add(t.TTL)
		}
		s.mu.Unlock()
		if ok {
			p.members = slices.Delete(p.members, i, i+1)
			m.pools.n--
			m.pools.mem -= t.MemoryBytes
			return s
		}
	}
	return nil
}

// claimOf is the claim record of a box just taken from its pool.
func claimOf(sb *sandbox) claimRecord {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return claimRecord{Tenant: sb.info.Tenant, Labels: sb.info.Labels, TTL: sb.info.Settings.TTL, ClaimedAt: sb.info.CreatedAt}
}

// refillDelay is how long a claim waits before it wakes the pool loop to
// replace the box: the claimed box's first request, which usually follows
// at once (agentd creates a thread's box on its first tool call), runs
// before a cold create competes with it for the host's CPUs and engine
// (B4 on 2 cores: 23-25 ms with the refill started at once, 13-17 ms
// with it held back). The pool loop's own tick may refill sooner.
const refillDelay = 100 * time.Millisecond

// claimedSuffix ends the container name of every pool box ever claimed.
const claimedSuffix = "-claimed"

// markClaimed makes sure a claimed pool box never serves anyone else: it
// checks the box is pristine while it marks its container claimed by
// renaming it (labels cannot change on a running container; a name can,
// and the engine keeps it across worker restarts and whatever happens to
// the state dir), then records the claim. A box is handed out only when
// all three succeed; one that fails is deleted, renamed or not.
func (m *Manager) markClaimed(sb *sandbox, c claimRecord) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb.mu.Lock()
	id, cid := sb.info.ID, sb.info.ContainerID
	sb.mu.Unlock()
	renamed := make(chan error, 1)
	go func() {
		_, err := m.api.ContainerRename(ctx, cid, client.ContainerRenameOptions{NewName: id + claimedSuffix})
		renamed <- err
	}()
	perr := m.pristine(ctx, sb)
	if err := <-renamed; err != nil {
		return fmt.Errorf("mark the container claimed: %w", err)
	}
	if perr != nil {
		return perr
	}
	if err := m.pools.claims.add(id, c); err != nil {
		return fmt.Errorf("record the claim: %w", err)
	}
	return nil
}

// workspaceListing lists a box's workspace through its agent: the names,
// kinds, sizes, modes and modification times of its entries.
func (m *Manager) workspaceListing(ctx context.Context, sb *sandbox) (string, error) {
	ch, err := m.channel(ctx, sb)
	if err != nil {
		return "", err
	}
	sb.mu.Lock()
	home := sb.info.Settings.Home()
	sb.mu.Unlock()
	raw, err := ch.call(ctx, agentproto.OpLs, agentproto.PathArgs{Path: home}, nil)
	if err != nil {
		return "", fmt.Errorf("list the workspace: %w", err)
	}
	var res backend.LsResult
	if err := agentproto.UnmarshalResult(raw, &res); err != nil {
		return "", fmt.Errorf("list the workspace: %w", err)
	}
	out, _ := json.Marshal(res)
	return string(out), nil
}

// noteBaseline records a pool box's workspace listing when this worker
// first greets it (an image's files at the working dir are copied into a
// fresh workspace, so pristine is not always empty).
func (m *Manager) noteBaseline(ctx context.Context, sb *sandbox) error {
	l, err := m.workspaceListing(ctx, sb)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.baseline = l
	sb.mu.Unlock()
	return nil
}

// firstCommand runs `true` in a new pool box, so that the claimant's first
// command does not pay what a box's first command pays once: in B4 (a
// claim, then Execute) that Execute took 8-17 ms in a box that had run
// none, 3-7 ms in one that had. It changes nothing in the workspace, and
// its failure (an image without a shell) is not the box's.
func (m *Manager) firstCommand(ctx context.Context, sb *sandbox) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ch, err := m.channel(ctx, sb)
	if err != nil {
		return
	}
	_, _ = ch.call(ctx, agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "true"}}, nil)
}

// pristine checks that a pool box's workspace still lists as it did when
// this worker first greeted the box (empty, for an image with nothing at
// its working dir): a box whose workspace anyone touched is never handed
// out.
func (m *Manager) pristine(ctx context.Context, sb *sandbox) error {
	l, err := m.workspaceListing(ctx, sb)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	base := sb.baseline
	sb.mu.Unlock()
	if base == "" || l != base {
		return errors.New("its workspace is not as it was when the box was made")
	}
	return nil
}

// kickPools wakes the pool loop.
func (m *Manager) kickPools() {
	select {
	case m.pools.kick <- struct{}{}:
	default:
	}
}

// reserveOrEvict reserves quota for a create, evicting unclaimed pool
// boxes when the quota is full: pool boxes count toward the quotas, but
// they never keep a worker from serving a real request.
//
// While it evicts, the pool loop reserves nothing: the slot an eviction
// frees is the create's, not a refill's (else the create could lose it
// and fail over a quota the eviction had made room in).
func (m *Manager) reserveOrEvict(ctx context.Context, t Template, tenant string) error {
	err := m.reserve(t, tenant)
	if CodeOf(err) != CodeQuota || isTenantQuota(err) {
		return err
	}
	m.mu.Lock()
	m.evicting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.evicting--
		m.mu.Unlock()
		m.kickPools() // a refill held back may fit now
	}()
	for CodeOf(err) == CodeQuota && !isTenantQuota(err) && m.evict(ctx) {
		err = m.reserve(t, tenant)
	}
	return err
}

// evict removes the oldest unclaimed pool box, if there is one.
func (m *Manager) evict(ctx context.Context) bool {
	m.mu.Lock()
	var (
		oldest *pool
		at     time.Time
	)
	for _, p := range m.pools.byName {
		if len(p.members) == 0 {
			continue
		}
		created := p.members[0].sb.createdAt()
		if oldest == nil || created.Before(at) {
			oldest, at = p, created
		}
	}
	if oldest == nil {
		m.mu.Unlock()
		return false
	}
	mb := oldest.members[0]
	oldest.members = oldest.members[1:]
	m.pools.n--
	m.mu.Unlock()
	m.lg.Info("evicting a pool box for a create over the quota", zap.String("sandbox-id", mb.sb.info.ID), zap.String("template", oldest.name))
	m.dropMember(ctx, mb.sb)
	return true
}

func (sb *sandbox) createdAt() time.Time {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.info.CreatedAt
}

// dropMember removes a box already taken out of its pool's members.
func (m *Manager) dropMember(ctx context.Context, sb *sandbox) {
	cid := m.retire(sb)
	_ = m.removeContainer(ctx, cid, volumeName(sb.info.ID))
}

// retire marks sb deleted, closes its channel and gives back its quota
// (or, when it had failed and given it back already, forgets it was
// failed); it returns sb's container id.
func (m *Manager) retire(sb *sandbox) string {
	// m.mu first: the state a hibernated box leaves and the count of
	// hibernated boxes change together (wake, suspend).
	m.mu.Lock()
	sb.mu.Lock()
	hibernated := sb.info.State == StateHibernated
	sb.info.State = StateDeleting
	ch := sb.ch
	cid, mem, released, isMember := sb.info.ContainerID, sb.info.Settings.MemoryBytes, sb.released, sb.member
	sb.released = true
	sb.mu.Unlock()
	switch {
	case hibernated && !released:
		m.hibernated-- // it held no memory
	case isMember && released:
		m.pools.failed--
	case isMember:
		m.pools.mem -= mem
		m.reserved -= mem
	case released:
		m.failed--
	default:
		m.reserved -= mem
	}
	m.mu.Unlock()
	if ch != nil {
		ch.close()
	}
	return cid
}

// isMember reports whether id is a pool box; m.mu is held.
func (m *Manager) isMember(id string) bool {
	for _, p := range m.pools.byName {
		for _, mb := range p.members {
			if mb.sb.info.ID == id {
				return true
			}
		}
	}
	return false
}

// startPools starts the loop that keeps the pools full.
func (m *Manager) startPools() {
	if len(m.pools.byName) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.pools.stop, m.pools.done = cancel, make(chan struct{})
	go m.poolLoop(ctx)
}

// stopPools stops the pool loop and waits for it (a create in flight is
// cut short between engine calls and removes what it made). Its boxes
// stay, for Close to leave running and DeleteAll to remove.
func (m *Manager) stopPools() {
	if m.pools.stop == nil {
		return
	}
	m.pools.stop()
	<-m.pools.done
}

// poolLoop keeps the pools full: it runs a round at start, after every
// claim and every reap interval.
func (m *Manager) poolLoop(ctx context.Context) {
	defer close(m.pools.done)
	tick := time.NewTicker(m.cfg.ReapInterval)
	defer tick.Stop()
	for {
		m.tendPools(ctx)
		select {
		case <-ctx.Done():
			return
		case <-m.pools.kick:
		case <-tick.C:
		}
	}
}

// tendPools drops the pool boxes that died, failed, outlived their idle
// lifetime, run an image their template no longer resolves to (its base
// tag moved) or exceed their pool's size; greets re-adopted boxes; and then
// creates boxes one at a time until every pool is full. A pool whose
// create fails is left short until the next round.
func (m *Manager) tendPools(ctx context.Context) {
	images := m.poolImages(ctx)
	now := m.now()
	var drop, greet []*sandbox
	m.mu.Lock()
	for _, p := range m.pools.byName {
		keep := p.members[:0]
		for _, mb := range p.members {
			s := mb.sb
			s.mu.Lock()
			dead := s.info.State != StateRunning || mb.warm && (s.ch == nil || s.ch.broken())
			stale := !now.Before(s.info.CreatedAt.Add(p.idle)) || images[p] != "" && s.image != images[p]
			s.mu.Unlock()
			if dead || stale || len(keep) >= p.size {
				drop = append(drop, s)
				m.pools.n--
				continue
			}
			if !mb.warm {
				greet = append(greet, s)
			}
			keep = append(keep, mb)
		}
		clear(p.members[len(keep):])
		p.members = keep
	}
	m.mu.Unlock()
	for _, sb := range drop {
		m.lg.Info("replacing a pool box", zap.String("sandbox-id", sb.info.ID))
		m.dropMember(ctx, sb)
	}
	for _, sb := range greet {
		if ctx.Err() != nil {
			return
		}
		err := m.hello(ctx, sb)
		if err == nil {
			err = m.noteBaseline(ctx, sb)
		}
		if ctx.Err() != nil {
			return // stopping: the box stays for the next start
		}
		m.mu.Lock()
		for _, p := range m.pools.byName {
			for i, mb := range p.members {
				if mb.sb != sb {
					continue
				}
				if err == nil {
					mb.warm = true
				} else {
					p.members = slices.Delete(p.members, i, i+1)
					m.pools.n--
				}
				break
			}
		}
		m.mu.Unlock()
		if err != nil {
			m.lg.Info("a re-adopted pool box did not answer; replacing it", zap.String("sandbox-id", sb.info.ID), zap.Error(err))
			m.dropMember(ctx, sb)
		}
	}
	failed := map[*pool]bool{}
	for ctx.Err() == nil {
		p := m.shortPool(failed)
		if p == nil {
			return
		}
		if err := m.fillOne(ctx, p); err != nil {
			failed[p] = true
			if c := CodeOf(err); c == CodeQuota || c == CodeShuttingDown || ctx.Err() != nil {
				m.lg.Debug("pool not refilled", zap.String("template", p.name), zap.Error(err))
			} else {
				m.lg.Warn("pool not refilled", zap.String("template", p.name), zap.Error(err))
			}
		}
	}
}

// poolImages resolves each pool's template to the image a cold create
// would run now (deriving it if its base moved), so a claim never hands
// out a box of an older image. A pool whose image does not resolve is
// left out: its boxes are kept, and its refill reports the error.
func (m *Manager) poolImages(ctx context.Context) map[*pool]string {
	m.mu.Lock()
	ps := make([]*pool, 0, len(m.pools.byName))
	for _, p := range m.pools.byName {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	out := make(map[*pool]string, len(ps))
	for _, p := range ps {
		ictx, cancel := context.WithTimeout(ctx, engineTimeout)
		id, _, err := m.images.derive(ictx, p.t.Image, m.cfg.User, p.t.WorkingDir)
		cancel()
		if err == nil {
			out[p] = id
		}
		if err != nil && ctx.Err() == nil {
			m.lg.Debug("resolve a pool's image", zap.String("template", p.name), zap.Error(err))
		}
	}
	return out
}

// shortPool returns a pool with fewer boxes than its size (the emptiest
// first), skipping those in skip.
func (m *Manager) shortPool(skip map[*pool]bool) *pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *pool
	bestHave := 0
	for _, name := range sortedKeys(m.pools.byName) {
		p := m.pools.byName[name]
		have := len(p.members) + p.creating
		if skip[p] || have >= p.size {
			continue
		}
		if best == nil || have < bestHave {
			best, bestHave = p, have
		}
	}
	return best
}

// fillOne creates one box for p.
func (m *Manager) fillOne(ctx context.Context, p *pool) error {
	mem := p.t.MemoryBytes
	if err := m.reserve(p.t, ""); err != nil {
		return err
	}
	id := newID(m.cfg.Worker)
	m.mu.Lock()
	p.creating++
	m.pending[id] = true
	m.mu.Unlock()
	sb, err := m.start(ctx, id, CreateSpec{Template: p.name, pool: p.key}, p.t)
	if err == nil {
		if err = m.noteBaseline(ctx, sb); err != nil {
			m.discard(ctx, sb)
		} else {
			m.firstCommand(ctx, sb)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creating--
	p.creating--
	delete(m.pending, id)
	if err != nil {
		m.reserved -= mem
		return err
	}
	p.members = append(p.members, &member{sb: sb, warm: true})
	m.pools.n++
	m.pools.mem += mem
	m.lg.Info("pool box ready", zap.String("sandbox-id", id), zap.String("template", p.name))
	return nil
}

// removeMembers removes every pool box (DeleteAll, after stopPools).
func (m *Manager) removeMembers(ctx context.Context) {
	m.mu.Lock()
	var all []*sandbox
	for _, p := range m.pools.byName {
		for _, mb := range p.members {
			all = append(all, mb.sb)
		}
		p.members = nil
	}
	m.pools.n -= len(all)
	m.mu.Unlock()
	for _, sb := range all {
		m.dropMember(ctx, sb)
	}
}

// closeMembers closes the pool boxes' channels (Close: the boxes stay).
func (m *Manager) closeMembers() {
	m.mu.Lock()
	var all []*sandbox
	for _, p := range m.pools.byName {
		for _, mb := range p.members {
			all = append(all, mb.sb)
		}
	}
	m.mu.Unlock()
	for _, sb := range all {
		sb.mu.Lock()
		if sb.ch != nil {
			sb.ch.close()
		}
		sb.mu.Unlock()
	}
}

// adoptPooled re-adopts a container made for a pool: as the sandbox its
// claim made it when the claim is recorded; as a (not yet greeted) pool box
// when it still has the name it was created with (a claim renames it), and
// its pool still exists with the same key and has room; otherwise (claimed
// but unrecorded, the template or the agent changed, the pool is gone or
// smaller, or no state dir holds the claims) its container is removed. It runs before
// the manager serves anything, as adopt does.
func (m *Manager) adoptPooled(ctx context.Context, cid, image, id string, names []string, labels map[string]string, t Template, created time.Time, recorded map[string]time.Time) {
	if m.pools.claims == nil {
		m.lg.Warn("removing a pool box: no state dir holds the claims of pool boxes", zap.String("sandbox-id", id))
		_ = m.removeContainer(ctx, cid, volumeName(id))
		return
	}
	if c, ok := m.pools.claims.get(id); ok {
		t.TTL = c.TTL
		expires, ok := recorded[id]
		if !ok {
			expires = c.ClaimedAt.Add(c.TTL)
		}
		m.sandboxes[id] = &sandbox{info: Info{
			ID: id, Worker: m.cfg.Worker, ContainerID: cid, State: StateRunning, Template: labels[LabelTemplate], Tenant: tenantOf(c.Tenant),
			Settings: t, Labels: maps.Clone(c.Labels), CreatedAt: c.ClaimedAt, LastUsedAt: c.ClaimedAt, ExpiresAt: expires,
		}}
		if m.sandboxes[id].info.Labels == nil {
			m.sandboxes[id].info.Labels = map[string]string{}
		}
		m.reserved += t.MemoryBytes
		m.lg.Info("adopted sandbox claimed from a pool", zap.String("sandbox-id", id), zap.Time("expires-at", expires))
		return
	}
	if !slices.Equal(names, []string{"/" + id}) {
		// Renamed when it was claimed (or by someone else): whatever its
		// claim record says, it never joins a pool again.
		m.lg.Warn("removing a claimed pool box that has no claim record", zap.String("sandbox-id", id), zap.Strings("names", names))
		_ = m.removeContainer(ctx, cid, volumeName(id))
		return
	}
	name := labels[LabelTemplate]
	p := m.pools.byName[name]
	if p == nil || p.key != labels[LabelPool] || len(p.members) >= p.size {
		m.lg.Info("removing a box of an old or gone pool", zap.String("sandbox-id", id), zap.String("template", name))
		_ = m.removeContainer(ctx, cid, volumeName(id))
		return
	}
	sb := &sandbox{member: true, image: image, info: Info{
		ID: id, Worker: m.cfg.Worker, ContainerID: cid, State: StateRunning, Template: name, Tenant: DefaultTenant,
		Settings: p.t, Labels: map[string]string{}, CreatedAt: created, LastUsedAt: created, ExpiresAt: created.Add(p.t.TTL),
	}}
	p.members = append(p.members, &member{sb: sb})
	m.pools.n++
	m.pools.mem += p.t.MemoryBytes
	m.reserved += p.t.MemoryBytes
	m.lg.Info("adopted pool box", zap.String("sandbox-id", id), zap.String("template", name))
}

// claimsFile is the name of the claim record in Config.StateDir.
const claimsFile = "sandbox-claims.json"

// claimRecord is what a claim gave a pool box.
type claimRecord struct {
	Tenant    string            `json:"tenant"`
	Labels    map[string]string `json:"labels,omitempty"`
	TTL       time.Duration     `json:"ttl"`
	ClaimedAt time.Time         `json:"claimed_at"`
}

// claimStore keeps, in a small file of the worker's state dir, what each
// claim gave its pool box (container labels cannot change after create).
// A claim is written before its box is handed out, atomically (temp file
// and rename) but without fsync: only a crash of the host loses a write
// that did not reach the disk, and a host crash stops every box too (their
// containers have no restart policy), so the restarted worker removes
// them as stopped before it could mistake one for unclaimed.
type claimStore struct {
	store *jsonFile

	claims map[string]claimRecord // guarded by store.mu
}

func openClaims(dir string) (*claimStore, error) {
	s := &claimStore{store: &jsonFile{dir: dir, name: claimsFile}}
	var rec struct {
		Version int                    `json:"version"`
		Claims  map[string]claimRecord `json:"claims"`
	}
	found, err := s.store.load(&rec)
	if err != nil {
		return nil, fmt.Errorf("sandbox claim record: %w", err)
	}
	if found && rec.Version != 1 {
		return nil, fmt.Errorf("sandbox claim record: version %d, want 1", rec.Version)
	}
	s.claims = rec.Claims
	if s.claims == nil {
		s.claims = map[string]claimRecord{}
	}
	return s, nil
}

func (s *claimStore) get(id string) (claimRecord, bool) {
	if s == nil {
		return claimRecord{}, false
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	c, ok := s.claims[id]
	return c, ok
}

// add records a claim and writes the record.
func (s *claimStore) add(id string, c claimRecord) error {
	if s == nil {
		return errors.New("no state dir")
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	s.claims[id] = c
	if err := s.saveLocked(); err != nil {
		delete(s.claims, id)
		return err
	}
	return nil
}

// keep forgets the claims of every sandbox not in live, and writes the
// record when that changed it.
func (s *claimStore) keep(live func(id string) bool) error {
	if s == nil {
		return nil
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	n := len(s.claims)
	maps.DeleteFunc(s.claims, func(id string, _ claimRecord) bool { return !live(id) })
	if len(s.claims) == n {
		return nil
	}
	return s.saveLocked()
}

func (s *claimStore) saveLocked() error {
	return s.store.save(struct {
		Version int                    `json:"version"`
		Claims  map[string]claimRecord `json:"claims"`
	}{1, s.claims})
}

// forgetClaim drops a deleted sandbox's claim.
func (m *Manager) forgetClaim(id string) {
	if _, ok := m.pools.claims.get(id); !ok {
		return
	}
	if err := m.pools.claims.keep(func(x string) bool { return x != id }); err != nil {
		m.lg.Warn("record pool claims", zap.Error(err))
	}
}

// jsonFile is a small JSON record in the worker's state dir, replaced
// atomically (temp file and rename) on every save.
type jsonFile struct {
	dir, name string
	mu        sync.Mutex // serializes saves; claimStore also guards its map with it
}

// load decodes the record into v and reports whether there was one.
func (f *jsonFile) load(v any) (bool, error) {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return false, fmt.Errorf("sandbox state dir: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(f.dir, f.name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(data) > maxExpiryFile {
		return false, fmt.Errorf("%d bytes is over the %d-byte limit", len(data), maxExpiryFile)
	}
	return true, json.Unmarshal(data, v)
}

// save writes v as the record; f.mu is held.
func (f *jsonFile) save(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// No fsync: only a host crash loses the write, and that stops the
	// boxes too (see the claims record).
	return writeAtomic(filepath.Join(f.dir, f.name), data, false)
}
