package postgres

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/storetest"
)

// TestSkillsConformance runs the skills suite against a real PostgreSQL
// server.
func TestSkillsConformance(t *testing.T) {
	storetest.RunSkills(t, open(t, pgtest.New(t), Options{}))
}
