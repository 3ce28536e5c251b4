package agent

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/model"
)

// outputEvents runs write against an OutputStream and returns the
// ToolOutput events it emitted.
func outputEvents(t *testing.T, write func(o *OutputStream)) []ToolOutput {
	t.Helper()
	var mu sync.Mutex
	var out []ToolOutput
	rc := &RunContext{RunID: "r", ThreadID: "t", AgentPath: "main", shared: &runShared{clock: realClock{}, sink: func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, e.Payload.(ToolOutput))
	}}}
	o := newOutputStream(rc, model.ToolCall{ID: "c1", Name: "execute"})
	write(o)
	o.Close()
	_, _ = o.Write([]byte("after close"))
	mu.Lock()
	defer mu.Unlock()
	return out
}

// TestOutputStream: whatever the timing of the flushes, the events carry
// the output in order, never split inside a character, invalid bytes
// replaced; past the cap the last event says truncated and nothing
// follows, not even after Close.
func TestOutputStream(t *testing.T) {
	evs := outputEvents(t, func(o *OutputStream) {
		for _, p := range []string{"a", "\xc3", "\xa9b\n", "\xe2\x82", "\xac", "\xff\n", "\xe2\x82"} {
			_, _ = o.Write([]byte(p))
		}
	})
	var got strings.Builder
	for _, e := range evs {
		if !utf8.ValidString(e.Text) || e.ID != "c1" || e.Name != "execute" || e.Truncated {
			t.Errorf("event %+v", e)
		}
		got.WriteString(e.Text)
	}
	if want := "aéb\n€\uFFFD\n\uFFFD"; got.String() != want {
		t.Errorf("streamed %q, want %q", got.String(), want)
	}

	evs = outputEvents(t, func(o *OutputStream) {
		chunk := []byte(strings.Repeat("x", 1000))
		for range StreamOutputCap/1000 + 20 {
			_, _ = o.Write(chunk)
		}
	})
	n := 0
	for i, e := range evs {
		n += len(e.Text)
		if e.Truncated != (i == len(evs)-1) {
			t.Errorf("event %d of %d: truncated=%v", i, len(evs), e.Truncated)
		}
	}
	if n != StreamOutputCap {
		t.Errorf("streamed %d bytes, want the cap %d", n, StreamOutputCap)
	}
}
