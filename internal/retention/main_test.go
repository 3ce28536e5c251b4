package retention_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgMain{m}) }

// pgMain runs the tests and then stops the PostgreSQL server of pgtest,
// if one was started.
type pgMain struct{ m *testing.M }

func (p pgMain) Run() int { return pgtest.Main(p.m) }
