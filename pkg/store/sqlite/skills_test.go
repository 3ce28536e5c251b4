package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/store/storetest"
)

// TestSkillsConformance runs the skills suite against a real SQLite file.
func TestSkillsConformance(t *testing.T) {
	storetest.RunSkills(t, open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{}))
}
