package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// TestKitGroup is the group name of the test_kit tools.
const TestKitGroup = "test_kit"

// TestKit holds the test_kit tools of docs/agent-core.md §11 and their shared
// counter.
type TestKit struct {
	count atomic.Int64
}

// NewTestKit returns a kit with its counter at zero.
func NewTestKit() *TestKit { return &TestKit{} }

// Count returns how often counter was called.
func (k *TestKit) Count() int { return int(k.count.Load()) }

// Tools returns sleep, echo, counter, big, fail and panic.
func (k *TestKit) Tools() []agent.Tool {
	return []agent.Tool{
		{
			Name:        "sleep",
			Description: "Wait for ms milliseconds, then answer \"slept <ms>ms\". Test tool.",
			Schema:      []byte(`{"type":"object","required":["ms"],"additionalProperties":false,"properties":{"ms":{"type":"integer","minimum":0}}}`),
			Func: func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
				var a struct{ Ms int }
				if err := req.DecodeArgs(&a); err != nil {
					return agent.ToolResult{}, err
				}
				t := time.NewTimer(time.Duration(a.Ms) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
					return agent.ToolResult{Content: fmt.Sprintf("slept %dms", a.Ms)}, nil
				case <-ctx.Done():
					return agent.ToolResult{}, ctx.Err()
				}
			},
		},
		{
			Name:        "echo",
			Description: "Answer text unchanged. Test tool.",
			Schema:      []byte(`{"type":"object","required":["text"],"additionalProperties":false,"properties":{"text":{"type":"string"}}}`),
			Func: func(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
				var a struct{ Text string }
				if err := req.DecodeArgs(&a); err != nil {
					return agent.ToolResult{}, err
				}
				return agent.ToolResult{Content: a.Text}, nil
			},
		},
		{
			Name:        "counter",
			Description: "Increment a process-wide counter and answer its new value. Test tool.",
			Schema:      []byte(`{"type":"object","additionalProperties":false,"properties":{}}`),
			Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
				return agent.ToolResult{Content: fmt.Sprint(k.count.Add(1))}, nil
			},
		},
		{
			Name:        "big",
			Description: "Answer lines lines of width characters each. Test tool.",
			Schema:      []byte(`{"type":"object","required":["lines","width"],"additionalProperties":false,"properties":{"lines":{"type":"integer","minimum":0,"maximum":1000000},"width":{"type":"integer","minimum":1,"maximum":100000}}}`),
			Func: func(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
				var a struct{ Lines, Width int }
				if err := req.DecodeArgs(&a); err != nil {
					return agent.ToolResult{}, err
				}
				return agent.ToolResult{Content: BigText(a.Lines, a.Width)}, nil
			},
		},
		{
			Name:        "fail",
			Description: "Fail with msg. Test tool.",
			Schema:      []byte(`{"type":"object","required":["msg"],"additionalProperties":false,"properties":{"msg":{"type":"string"}}}`),
			Func: func(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
				var a struct{ Msg string }
				if err := req.DecodeArgs(&a); err != nil {
					return agent.ToolResult{}, err
				}
				return agent.ToolResult{}, errors.New(a.Msg)
			},
		},
		{
			Name:        "panic",
			Description: "Panic. Test tool.",
			Schema:      []byte(`{"type":"object","additionalProperties":false,"properties":{}}`),
			Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
				panic("test_kit panic tool")
			},
		},
	}
}

// BigText is big's output: n lines "line <i> " padded with x to width
// characters, joined by LF.
func BigText(n, width int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteByte('\n')
		}
		line := fmt.Sprintf("line %d ", i)
		if len(line) > width {
			line = line[:width]
		}
		b.WriteString(line)
		b.WriteString(strings.Repeat("x", width-len(line)))
	}
	return b.String()
}
