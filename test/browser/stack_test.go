package browser

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	opsToken      = "console-ops-token" // an operator (tenant ops)
	sandboxdToken = "console-sandboxd-token"
)

// stack is sandboxd + agentd with the demo model.
type stack struct {
	agentd *daemontest.Proc
	conn   *grpc.ClientConn // acme's
	other  *grpc.ClientConn // tenant other's
	ops    *grpc.ClientConn // the operator's
}

// option adjusts the stack before it starts.
type option func(*stackConfig)

type stackConfig struct {
	// extraWorkers are more sandboxd addresses for agentd's fleet
	// (nothing need listen there).
	extraWorkers []string
	// seed writes into agentd's SQLite thread store before agentd starts.
	seed func(dbPath string)
	// modelURL, when set, is an OpenAI-compatible model (modeltest) that
	// agentd uses instead of the demo.
	modelURL string
}

func withModel(url string) option { return func(c *stackConfig) { c.modelURL = url } }

func withWorkers(addrs ...string) option {
	return func(c *stackConfig) { c.extraWorkers = append(c.extraWorkers, addrs...) }
}

func withSeed(f func(dbPath string)) option { return func(c *stackConfig) { c.seed = f } }

func start(t *testing.T, opts ...option) *stack {
	t.Helper()
	var sc stackConfig
	for _, o := range opts {
		o(&sc)
	}
	dir := t.TempDir()
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken))
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(fmt.Sprintf("acme %s\nother %s\nops %s operator\n", acmeToken, otherToken, opsToken)), 0o600); err != nil {
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
`, filepath.Join(dir, "agentd.db"), strings.Join(append([]string{sd.GRPCAddr}, sc.extraWorkers...), ","))
	if sc.modelURL != "" {
		t.Setenv("BROWSER_MODEL_KEY", "scripted")
		cfg += fmt.Sprintf(`models:
  scripted: {base_url: %s, api_key_env: BROWSER_MODEL_KEY, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
`, sc.modelURL)
	}
	cfgPath := filepath.Join(dir, "agentd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if sc.seed != nil {
		sc.seed(filepath.Join(dir, "agentd.db"))
	}
	// No model is configured, so --demo-model applies.
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	p := daemontest.Start(t, bins["agentd"], "--config", cfgPath, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-grace", "2s", "--demo-model",
		"--credentials-file", creds, "--sandboxd-token-file", filepath.Join(dir, "sandboxd.token"))
	return &stack{agentd: p, conn: daemontest.Dial(t, p.GRPCAddr, acmeToken), other: daemontest.Dial(t, p.GRPCAddr, otherToken),
		ops: daemontest.Dial(t, p.GRPCAddr, opsToken)}
}
