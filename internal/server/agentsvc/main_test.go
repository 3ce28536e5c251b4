package agentsvc_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

// pgMain runs the tests through pgtest.Main, which stops the PostgreSQL
// server of the tests that use one.
type pgMain struct{ m *testing.M }

func (p pgMain) Run() int { return pgtest.Main(p.m) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgMain{m})
}
