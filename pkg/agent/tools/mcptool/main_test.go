package mcptool_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool/mcptest"
)

// TestMain doubles as the stdio MCP server: the tests start this binary
// with MCPTEST_SERVER=<mode>.
func TestMain(m *testing.M) {
	if mode := os.Getenv("MCPTEST_SERVER"); mode != "" {
		os.Exit(mcptest.Serve(mode))
	}
	goleak.VerifyTestMain(m)
}
