package agentd

import (
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestModelVisionFlag: models.<key>.vision reaches the runtime's model.
func TestModelVisionFlag(t *testing.T) {
	cfg, err := Parse([]byte(`models:
  eyes: {base_url: "http://127.0.0.1:1/v1", model: gpt-4.1, vision: true}
  text: {base_url: "http://127.0.0.1:1/v1", model: qwen3-8b-instruct}
  unset: {model: gpt-4o, vision: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	models, err := buildModels(cfg, func(string) string { return "" }, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"eyes": true, "text": false, "unset": true} {
		if got := models[key].Vision; got != want {
			t.Errorf("models.%s vision = %v, want %v", key, got, want)
		}
	}
}
