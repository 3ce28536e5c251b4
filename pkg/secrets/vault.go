package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// ErrInvalid wraps a rejected name or value (the message never holds the
// value).
var ErrInvalid = errors.New("invalid secret")

// Vault is the tenants' secret store: values are sealed before they reach
// the store and opened only by Resolve.
type Vault struct {
	store  store.Secrets
	sealer *Sealer
	now    func() time.Time
}

// NewVault returns a vault over st; sealer may hold no key (then Put and
// Resolve fail with ErrNoKey; List and Delete still work).
func NewVault(st store.Secrets, sealer *Sealer) *Vault {
	return &Vault{store: st, sealer: sealer, now: time.Now}
}

// Put stores value under name for tenant; it reports whether it created
// the secret.
func (v *Vault) Put(ctx context.Context, tenant, name string, value []byte) (store.Secret, bool, error) {
	if err := ValidName(name); err != nil {
		return store.Secret{}, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(value) == 0 || len(value) > MaxValueBytes {
		return store.Secret{}, false, fmt.Errorf("%w: the value is %d bytes; want 1..%d", ErrInvalid, len(value), MaxValueBytes)
	}
	for _, c := range value {
		if c == '\r' || c == '\n' || c == 0 {
			return store.Secret{}, false, fmt.Errorf("%w: the value holds a line break or NUL (it goes into an HTTP header)", ErrInvalid)
		}
	}
	sealed, err := v.sealer.Seal(tenant, name, value)
	if err != nil {
		return store.Secret{}, false, err
	}
	now := v.now().UTC()
	s := store.Secret{Tenant: tenant, Name: name, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	created, err := v.store.PutSecret(ctx, s)
	if err != nil {
		return store.Secret{}, false, err
	}
	if !created {
		if got, err := v.store.GetSecret(ctx, tenant, name); err == nil {
			s.CreatedAt = got.CreatedAt
		}
	}
	s.Sealed = nil
	return s, created, nil
}

// List lists a tenant's secrets, without values.
func (v *Vault) List(ctx context.Context, tenant string) ([]store.Secret, error) {
	return v.store.ListSecrets(ctx, tenant)
}

// Delete removes a tenant's secret (store.ErrSecretNotFound when it has
// none of that name).
func (v *Vault) Delete(ctx context.Context, tenant, name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return v.store.DeleteSecret(ctx, tenant, name)
}

// Resolve returns a tenant's secret value, for the egress proxy only.
func (v *Vault) Resolve(ctx context.Context, tenant, name string) ([]byte, error) {
	s, err := v.store.GetSecret(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	val, err := v.sealer.Open(tenant, name, s.Sealed)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return val, nil
}

// Sealer is the vault's sealer (nil for a nil vault): other records
// sealed with the secrets key (webhook signing keys) use it too.
func (v *Vault) Sealer() *Sealer {
	if v == nil {
		return nil
	}
	return v.sealer
}
