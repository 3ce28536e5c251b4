package openai

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// Retries are logged with kebab-case keys and without prompt or completion
// contents.
func TestAttemptsAreLoggedWithoutContents(t *testing.T) {
	const secret = "the launch code is 0000"
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey,
		modeltest.HTTPError(503, nil, ""),
		modeltest.Drop(1, modeltest.Text("reply "+secret)),
		modeltest.Text("reply "+secret),
	)
	core, logs := observer.New(zapcore.DebugLevel)
	m, _ := newTestModel(t, srv, nil, WithLogger(zap.New(core)))

	req := userRequest(secret)
	req.Tools = []model.ToolDef{{Name: "echo", Description: secret}}
	if _, err := m.Generate(testContext(t), req, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}

	kebab := regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
	retries := 0
	for _, e := range logs.All() {
		if e.Message == "model attempt failed, retrying" {
			retries++
		}
		line := e.Message
		for k, v := range e.ContextMap() {
			if !kebab.MatchString(k) {
				t.Errorf("log key %q is not kebab-case", k)
			}
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		if strings.Contains(line, "launch code") {
			t.Errorf("log entry leaks contents: %s", line)
		}
	}
	if retries != 2 {
		t.Errorf("logged %d retries, want 2", retries)
	}
}
