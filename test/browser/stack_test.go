package browser

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"google.golang.org/grpc"
)

var bins map[string]string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-browser")
	if err != nil {
		panic(err)
	}
	bins, err = daemontest.BuildCommands(dir, "agentd", "sandboxd", "sandbox-agent")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Tokens: two tenants of agentd, and agentd's own at sandboxd.
const (
	acmeToken     = "console-acme-token"
	otherToken    = "console-other-token"
	sandboxdToken = "console-sandboxd-token"
)

// stack is sandboxd + agentd with the demo model.
type stack struct {
	agentd *daemontest.Proc
	conn   *grpc.ClientConn // acme's
	other  *grpc.ClientConn // tenant other's
}

func start(t *testing.T) *stack {
	t.Helper()
	dir := t.TempDir()
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken))
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(fmt.Sprintf("acme %s\nother %s\n", acmeToken, otherToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version: 1
server: {shutdown_grace: 2s}
storage: {sqlite_path: %s}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30m}
backends:
  default: sandbox
  routes:
    /large_tool_results/: {type: state}
    /conversation_history/: {type: state}
`, filepath.Join(dir, "agentd.db"), sd.GRPCAddr)
	cfgPath := filepath.Join(dir, "agentd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// No model is configured, so --demo-model applies.
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	p := daemontest.Start(t, bins["agentd"], "--config", cfgPath, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-grace", "2s", "--demo-model",
		"--credentials-file", creds, "--sandboxd-token-file", filepath.Join(dir, "sandboxd.token"))
	return &stack{agentd: p, conn: daemontest.Dial(t, p.GRPCAddr, acmeToken), other: daemontest.Dial(t, p.GRPCAddr, otherToken)}
}
