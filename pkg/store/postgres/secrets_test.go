package postgres

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/secretstest"
)

// TestSecretsConformance runs the secrets suite against a real PostgreSQL
// server.
func TestSecretsConformance(t *testing.T) {
	secretstest.Run(t, open(t, pgtest.New(t), Options{}))
}
