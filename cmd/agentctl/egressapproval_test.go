package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeEgress records the egress decisions agentctl sends.
type fakeEgress struct {
	plumbv1.UnimplementedAgentServiceServer
	mu      sync.Mutex
	decided []*plumbv1.DecideThreadEgressRequest
	revoked []string
}

func (f *fakeEgress) GetThread(_ context.Context, r *plumbv1.GetThreadRequest) (*plumbv1.GetThreadResponse, error) {
	return &plumbv1.GetThreadResponse{Thread: &plumbv1.Thread{Id: r.GetThreadId(), PendingEgress: []*plumbv1.EgressAsk{
		{RequestId: "rq1", Host: "api.example.com", Port: 443, ToolCallId: "call_1", AgentPath: "main", CreateTime: timestamppb.New(time.Unix(1700000000, 0))},
	}}}, nil
}

func (f *fakeEgress) DecideThreadEgress(_ context.Context, r *plumbv1.DecideThreadEgressRequest) (*plumbv1.DecideThreadEgressResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.GetRequestId() != "rq1" {
		return nil, status.Error(codes.NotFound, "egress request not found")
	}
	f.decided = append(f.decided, r)
	if r.GetDecision() != plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE {
		return &plumbv1.DecideThreadEgressResponse{}, nil
	}
	return &plumbv1.DecideThreadEgressResponse{Grant: &plumbv1.EgressGrant{RequestId: "rq1", Host: "api.example.com", Port: 443, Scope: r.GetScope()}}, nil
}

func (f *fakeEgress) ListEgressGrants(_ context.Context, r *plumbv1.ListEgressGrantsRequest) (*plumbv1.ListEgressGrantsResponse, error) {
	g := &plumbv1.EgressGrant{ThreadId: "th1", RequestId: "rq1", Host: "api.example.com", Port: 443, ToolCallId: "call_1", ApprovedBy: "acme",
		Scope: plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT, ApproveTime: timestamppb.New(time.Unix(1700000000, 0))}
	if r.GetPageToken() == "" {
		return &plumbv1.ListEgressGrantsResponse{Grants: []*plumbv1.EgressGrant{g}, NextPageToken: "p2"}, nil
	}
	g2 := &plumbv1.EgressGrant{ThreadId: "th1", RequestId: "rq0", Host: "example.org", Port: 80, Revoked: true}
	return &plumbv1.ListEgressGrantsResponse{Grants: []*plumbv1.EgressGrant{g2}}, nil
}

func (f *fakeEgress) RevokeEgressGrant(_ context.Context, r *plumbv1.RevokeEgressGrantRequest) (*plumbv1.RevokeEgressGrantResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, r.GetThreadId()+"/"+r.GetRequestId())
	return &plumbv1.RevokeEgressGrantResponse{}, nil
}

func TestEgressCommands(t *testing.T) {
	f := &fakeEgress{}
	addr := serve(t, f)
	ctx := t.Context()
	tests := []struct {
		name     string
		args     []string
		out, err string
	}{
		{name: "pending", args: []string{"egress", "pending", "th1"}, out: "api.example.com:443"},
		{name: "approve", args: []string{"egress", "decide", "th1", "rq1", "approve", "--scope", "agent"}, out: "approved api.example.com:443 for the agent (request rq1)\n"},
		{name: "reject", args: []string{"egress", "decide", "th1", "rq1", "reject", "--reason", "no"}, out: "rejected request rq1\n"},
		{name: "bad scope", args: []string{"egress", "decide", "th1", "rq1", "approve", "--scope", "forever"}, err: "want run, thread or agent"},
		{name: "bad decision", args: []string{"egress", "decide", "th1", "rq1", "maybe"}, err: "want approve or reject"},
		{name: "unknown request", args: []string{"egress", "decide", "th1", "rq9", "approve"}, err: "not found"},
		{name: "grants, every page", args: []string{"egress", "grants", "--agent", "main"}, out: "example.org:80"},
		{name: "revoke", args: []string{"egress", "revoke", "th1", "rq1"}, out: "rq1\n"},
		{name: "revoke without request", args: []string{"egress", "revoke", "th1"}, err: "want THREAD_ID REQUEST_ID"},
		{name: "no verb", args: []string{"egress"}, err: "no egress command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{}
			err := c.run(ctx, addr, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(c.out.String(), tc.out) {
				t.Fatalf("out = %q, want %q", c.out.String(), tc.out)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.decided) != 2 || f.decided[0].GetScope() != plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT ||
		f.decided[1].GetDecision() != plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_REJECT || f.decided[1].GetReason() != "no" {
		t.Fatalf("decisions %v", f.decided)
	}
	if len(f.revoked) != 1 || f.revoked[0] != "th1/rq1" {
		t.Fatalf("revoked %v", f.revoked)
	}
}
