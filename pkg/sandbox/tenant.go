package sandbox

// LabelTenant records the tenant a sandbox belongs to (agentd forwards the
// tenant of the thread it works for). Sandboxes without it belong to
// DefaultTenant.
const LabelTenant = "plumb.tenant"

// DefaultTenant owns sandboxes created without a tenant (and those from
// before tenancy existed).
const DefaultTenant = "default"

// Owner returns the tenant of sandbox id, or a CodeNotFound error.
func (m *Manager) Owner(id string) (string, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return "", err
	}
	return m.snapshot(sb).Tenant, nil
}

// NotFound is the error for a sandbox this worker does not have, or that
// the caller may not see.
func (m *Manager) NotFound(id string) error {
	return errorf(CodeNotFound, "sandbox %s not found on worker %s", id, m.cfg.Worker)
}

// tenantOf is the stored tenant, DefaultTenant when none was recorded.
func tenantOf(s string) string {
	if s == "" {
		return DefaultTenant
	}
	return s
}

// reserve claims quota for one more sandbox t: the worker's, and for a
// create (tenant != ""; pool boxes belong to no tenant) the tenant's. The
// caller gives back what reserve took (unreserveTenant for the tenant's).
func (m *Manager) reserve(t Template, tenant string) error {
	mem := t.MemoryBytes
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errorf(CodeShuttingDown, "worker %s is shutting down", m.cfg.Worker)
	}
	if tenant != "" {
		if err := m.checkTenant(tenant, t); err != nil {
			return err
		}
	} else if m.evicting > 0 {
		return errorf(CodeQuota, "worker %s: a create is evicting pool boxes; the pool refills after it", m.cfg.Worker)
	}
	if n := len(m.sandboxes) - m.failed - m.hibernated + m.creating + m.pools.n - m.pools.failed; m.cfg.MaxSandboxes > 0 && n >= m.cfg.MaxSandboxes {
		e := errorf(CodeQuota, "worker %s already runs %d of %d sandboxes (max_sandboxes); delete or hibernate one, or try another worker", m.cfg.Worker, n, m.cfg.MaxSandboxes)
		e.Limit = LimitMaxSandboxes
		return e
	}
	if m.cfg.MaxMemoryBytes > 0 && m.reserved+mem > m.cfg.MaxMemoryBytes {
		e := errorf(CodeQuota, "worker %s memory quota: %d of %d bytes reserved (max_memory), %d more requested", m.cfg.Worker, m.reserved, m.cfg.MaxMemoryBytes, mem)
		e.Limit = LimitMaxMemory
		return e
	}
	m.creating++
	m.reserved += mem
	if tenant != "" {
		m.tenantNew[tenant] = m.tenantNew[tenant].add(t, 1)
	}
	return nil
}

// checkTenant refuses one more sandbox t for tenant over the policy's
// per-tenant limits. m.mu is held.
func (m *Manager) checkTenant(tenant string, t Template) error {
	return m.cfg.Policy.PerTenant.check(tenant, m.tenantUse(tenant), t)
}

// Limits a worker's CodeQuota error names (Error.Limit, the ErrorInfo
// metadata "limit"): sandboxd's configuration keys.
const (
	LimitMaxSandboxes = "max_sandboxes"
	LimitMaxMemory    = "max_memory"
)

// tenantUse is what tenant's sandboxes hold on this worker: its live ones
// (not failed, not being deleted: those gave their share back; not
// hibernated: those hold only storage) and its creates and wakes in
// progress. m.mu is held.
func (m *Manager) tenantUse(tenant string) tenantUse {
	u := m.tenantNew[tenant]
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		if !sb.released && !sb.member && sb.info.State != StateHibernated && sb.info.Tenant == tenant {
			u = u.add(sb.info.Settings, 1)
		}
		sb.mu.Unlock()
	}
	return u
}

// unreserveTenant gives back what reserve took from tenant's share for a
// create of t that has ended (its sandbox, if made, now counts itself).
// m.mu is held.
func (m *Manager) unreserveTenant(tenant string, t Template) {
	u := m.tenantNew[tenant].add(t, -1)
	if u.n == 0 {
		delete(m.tenantNew, tenant) // no float residue, no empty entries
		return
	}
	m.tenantNew[tenant] = u
}
