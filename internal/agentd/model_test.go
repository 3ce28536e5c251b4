package agentd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// TestUnconfiguredModelSaysSo: a model entry with neither a base URL nor
// a key lets agentd start, and a run on it fails with the documented
// MODEL_NOT_CONFIGURED (not MODEL_AUTH, which says a provider refused a
// key), not retryable, naming the variable to set.
func TestUnconfiguredModelSaysSo(t *testing.T) {
	cfg, err := Parse([]byte("version: 1\nstorage: {sqlite_path: " + filepath.Join(t.TempDir(), "agentd.db") +
		"}\nmodels:\n  bare: {api_key_env: BARE_KEY, model: m}\ndefaults: {model: bare}\n"))
	if err != nil {
		t.Fatal(err)
	}
	core, err := Build(context.Background(), cfg, Options{Env: func(string) string { return "" }, Logger: zaptest.NewLogger(t), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close() })
	var events []agent.Event
	res, err := core.Runtime.Run(t.Context(), agent.RunInput{Input: []string{"hi"}}, func(e agent.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agent.StatusFailed || res.Error == nil {
		t.Fatalf("run ended %s, error %+v", res.Status, res.Error)
	}
	if res.Error.Code != string(model.CodeNotConfigured) || res.Error.Retryable || !strings.Contains(res.Error.Message, "BARE_KEY") {
		t.Errorf("run error %+v, want MODEL_NOT_CONFIGURED naming BARE_KEY, not retryable", res.Error)
	}
	var sawError bool
	for _, e := range events {
		if re, ok := e.Payload.(agent.RunError); ok {
			sawError = re.Code == string(model.CodeNotConfigured)
		}
	}
	if !sawError {
		t.Errorf("no error event with MODEL_NOT_CONFIGURED in %+v", events)
	}
}
