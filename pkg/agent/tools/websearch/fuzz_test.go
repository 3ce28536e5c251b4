package websearch_test

import (
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent/tools/websearch"
)

// FuzzParse: the provider decoders and Retry-After never panic, and what
// they accept renders as bounded JSON.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"query":"q","results":[{"title":"t","url":"https://x","content":"c","score":0.5}]}`,
		`{"results":[{"title":1}]}`, `{"results":null}`, `[]`, `<html>`, ``, `{"results":[{"content":"\ud800"}]}`,
		`120`, `Wed, 21 Oct 2015 07:28:00 GMT`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		websearch.ParseRetryAfter(string(b), time.Unix(0, 0))
		for _, parse := range []func([]byte) ([]websearch.Result, error){websearch.ParseTavily, websearch.ParseSearXNG} {
			rs, err := parse(b)
			if err != nil {
				continue
			}
			if out := websearch.Render(rs, 10, websearch.Limits{Total: 4000}); len(out) > 4000 {
				t.Fatalf("render gave %d bytes", len(out))
			}
		}
	})
}
