package agentsvc

import (
	"context"
	"crypto/x509"
	"errors"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/timestamppb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/egressapproval"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/store"
)

// Egress is the egress approval service the egress RPCs adapt
// (*egressapproval.Service). Its methods act for the context's tenant:
// another tenant's thread is agent.ErrThreadNotFound.
type Egress interface {
	Decide(ctx context.Context, d egressapproval.Decision) (store.EgressRecord, error)
	Pending(ctx context.Context, threadID string) ([]store.EgressRecord, error)
	List(ctx context.Context, q store.EgressQuery) ([]store.EgressRecord, string, error)
	Revoke(ctx context.Context, threadID, requestID string) error
}

// Page sizes of ListEgressGrants.
const (
	defaultEgressPage = 50
	maxEgressPage     = 500
)

// DecideThreadEgress implements plumbv1.AgentServiceServer.
func (s *Service) DecideThreadEgress(ctx context.Context, req *plumbv1.DecideThreadEgressRequest) (*plumbv1.DecideThreadEgressResponse, error) {
	var vs violations
	if req.GetThreadId() == "" {
		vs.add("thread_id", "thread_id is required")
	}
	if id := req.GetRequestId(); id == "" || len(id) > 64 {
		vs.add("request_id", "request_id is required (at most 64 bytes)")
	}
	d := egressapproval.Decision{ThreadID: req.GetThreadId(), RequestID: req.GetRequestId(), Reason: req.GetReason(), By: caller(ctx)}
	switch req.GetDecision() {
	case plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE:
		d.Allow = true
	case plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_REJECT:
		if req.GetScope() != plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_UNSPECIFIED {
			vs.add("scope", "a rejection has no scope")
		}
	default:
		vs.add("decision", "decision must be APPROVE or REJECT")
	}
	switch req.GetScope() {
	case plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_UNSPECIFIED, plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_RUN:
		d.Scope = store.EgressScopeRun
	case plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_THREAD:
		d.Scope = store.EgressScopeThread
	case plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT:
		d.Scope = store.EgressScopeAgent
	default:
		vs.add("scope", "unknown scope")
	}
	if len(req.GetReason()) > egressapproval.MaxReason {
		vs.add("reason", "reason is longer than 1024 bytes")
	}
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	if s.cfg.Egress == nil {
		return nil, Status(egressapproval.ErrOff)
	}
	r, err := s.cfg.Egress.Decide(ctx, d)
	if err != nil {
		return nil, s.status("decide egress", err)
	}
	out := &plumbv1.DecideThreadEgressResponse{}
	if r.Status == store.EgressApproved {
		out.Grant = egressGrantToPB(r)
	}
	return out, nil
}

// ListEgressGrants implements plumbv1.AgentServiceServer.
func (s *Service) ListEgressGrants(ctx context.Context, req *plumbv1.ListEgressGrantsRequest) (*plumbv1.ListEgressGrantsResponse, error) {
	var vs violations
	if (req.GetThreadId() == "") == (req.GetAgent() == "") {
		vs.add("thread_id", "name a thread_id or an agent (exactly one)")
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		vs.add("page_size", "page_size must not be negative")
	case size == 0:
		size = defaultEgressPage
	case size > maxEgressPage:
		size = maxEgressPage
	}
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	if s.cfg.Egress == nil {
		return nil, Status(egressapproval.ErrOff)
	}
	list, next, err := s.cfg.Egress.List(ctx, store.EgressQuery{ThreadID: req.GetThreadId(), Agent: req.GetAgent(), PageSize: size, PageToken: req.GetPageToken()})
	if errors.Is(err, store.ErrBadPageToken) {
		err = InvalidField("page_token", "page_token was not issued by this server")
	}
	if err != nil {
		return nil, s.status("list egress grants", err)
	}
	out := &plumbv1.ListEgressGrantsResponse{NextPageToken: next}
	for _, r := range list {
		out.Grants = append(out.Grants, egressGrantToPB(r))
	}
	return out, nil
}

// RevokeEgressGrant implements plumbv1.AgentServiceServer.
func (s *Service) RevokeEgressGrant(ctx context.Context, req *plumbv1.RevokeEgressGrantRequest) (*plumbv1.RevokeEgressGrantResponse, error) {
	var vs violations
	if req.GetThreadId() == "" {
		vs.add("thread_id", "thread_id is required")
	}
	if req.GetRequestId() == "" {
		vs.add("request_id", "request_id is required")
	}
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	if s.cfg.Egress == nil {
		return nil, Status(egressapproval.ErrOff)
	}
	if err := s.cfg.Egress.Revoke(ctx, req.GetThreadId(), req.GetRequestId()); err != nil {
		return nil, s.status("revoke egress grant", err)
	}
	return &plumbv1.RevokeEgressGrantResponse{}, nil
}

// pendingEgress fills th.pending_egress (egress approval on).
func (s *Service) pendingEgress(ctx context.Context, th *plumbv1.Thread) error {
	if s.cfg.Egress == nil {
		return nil
	}
	list, err := s.cfg.Egress.Pending(ctx, th.GetId())
	if err != nil {
		return err
	}
	for _, r := range list {
		th.PendingEgress = append(th.PendingEgress, &plumbv1.EgressAsk{
			RequestId: r.RequestID, Host: r.Host, Port: uint32(r.Port), //nolint:gosec // 1-65535
			ToolCallId: r.ToolCallID, AgentPath: r.AgentPath, RunId: r.RunID, SandboxId: r.SandboxID,
			CreateTime: timestamppb.New(r.Created), Agent: r.Agent,
		})
	}
	return nil
}

func egressGrantToPB(r store.EgressRecord) *plumbv1.EgressGrant {
	g := &plumbv1.EgressGrant{
		ThreadId: r.ThreadID, RequestId: r.RequestID, Agent: r.Agent, Host: r.Host, Port: uint32(r.Port), //nolint:gosec // 1-65535
		ToolCallId: r.ToolCallID, AgentPath: r.AgentPath, RunId: r.RunID, ApprovedBy: r.DecidedBy,
		CreateTime: timestamppb.New(r.Created), ApproveTime: timestamppb.New(r.Decided), Revoked: r.Revoked,
	}
	switch r.Scope {
	case store.EgressScopeRun:
		g.Scope = plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_RUN
	case store.EgressScopeThread:
		g.Scope = plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_THREAD
	case store.EgressScopeAgent:
		g.Scope = plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT
	}
	return g
}

// caller names who makes a call, for the audit: the tenant, and the
// subject of the client certificate when there is one ("acme",
// "acme/CN=alice").
func caller(ctx context.Context) string {
	who := tenant.From(ctx)
	p, ok := peer.FromContext(ctx)
	if !ok {
		return who
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if certs := ti.State.PeerCertificates; len(certs) > 0 {
			return who + "/" + subject(certs[0])
		}
	}
	return who
}

func subject(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return "CN=" + c.Subject.CommonName
	}
	return c.Subject.String()
}
