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
