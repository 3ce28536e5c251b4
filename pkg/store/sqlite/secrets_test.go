package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/store/secretstest"
)

// TestSecretsConformance runs the secrets suite against a real SQLite file.
func TestSecretsConformance(t *testing.T) {
	secretstest.Run(t, open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{}))
}
