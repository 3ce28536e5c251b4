package store

import (
	"context"
	"errors"
	"time"
)

// ErrSecretNotFound is returned for a secret the tenant does not have.
var ErrSecretNotFound = errors.New("secret not found")

// Secret is a stored secret. Sealed is the value as the caller sealed it
// (pkg/secrets): the store never sees a plaintext value.
type Secret struct {
	Tenant    string
	Name      string
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Secrets stores tenants' sealed secrets, keyed by (tenant, name). Both
// durable stores keep them in a table of the same shape.
type Secrets interface {
	// PutSecret creates or replaces a secret (CreatedAt is kept on
	// replace); it reports whether it created one.
	PutSecret(ctx context.Context, s Secret) (created bool, err error)
	// GetSecret returns one secret, or ErrSecretNotFound.
	GetSecret(ctx context.Context, tenant, name string) (Secret, error)
	// ListSecrets returns a tenant's secrets by name, without Sealed.
	ListSecrets(ctx context.Context, tenant string) ([]Secret, error)
	// DeleteSecret removes a secret, or returns ErrSecretNotFound.
	DeleteSecret(ctx context.Context, tenant, name string) error
}
