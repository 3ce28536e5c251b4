package agentd

import (
	"os"
	"testing"

	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
