package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// fakeUsage answers GetUsage and records the request.
type fakeUsage struct {
	plumbv1.UnimplementedAgentServiceServer
	mu  sync.Mutex
	req *plumbv1.GetUsageRequest
}

func (f *fakeUsage) GetUsage(_ context.Context, r *plumbv1.GetUsageRequest) (*plumbv1.GetUsageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.req = r
	return &plumbv1.GetUsageResponse{Rows: []*plumbv1.UsageRow{{Key: "2026-12-01", ModelCalls: 3,
		Usage: &plumbv1.TokenUsage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, CachedTokens: 40, ReasoningTokens: 5}}},
		SandboxSeconds: 1800.4, Stored: &plumbv1.StoredBytes{Threads: 2, Messages: 1000, State: 20, Files: 300, Runs: 80}}, nil
}

func TestUsageCommand(t *testing.T) {
	f := &fakeUsage{}
	addr := serve(t, f)
	tests := []struct {
		name  string
		args  []string
		out   string
		err   string
		check func(t *testing.T)
	}{
		{name: "by day", args: []string{"usage", "--by", "day", "--from", "2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z"},
			out: "2026-12-01  3      100     20          40      5          120\nsandbox seconds: 1800\nstored now: 2 threads, 1400 bytes (messages 1000, state 20, files 300, runs 80)\n", check: func(t *testing.T) {
				if f.req.GetGroupBy() != plumbv1.UsageGroupBy_USAGE_GROUP_BY_DAY || f.req.GetFrom().AsTime().Day() != 1 || f.req.GetTo().AsTime().Day() != 2 {
					t.Fatalf("request %v", f.req)
				}
			}},
		{name: "bad group", args: []string{"usage", "--by", "week"}, err: "--by"},
		{name: "bad from", args: []string{"usage", "--from", "yesterday"}, err: "--from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{}
			err := c.run(t.Context(), addr, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !strings.Contains(c.out.String(), tc.out) {
				t.Fatalf("out %q, err %v; want %q", c.out.String(), err, tc.out)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			tc.check(t)
		})
	}
}
