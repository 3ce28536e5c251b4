package sandboxsvc

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// EgressWatchingHeader is the response header WatchEgressRequests sends
// once the sandbox's proxy asks (a client may wait for the headers
// before starting what it watches).
const EgressWatchingHeader = "plumb-egress-watching"

// WatchEgressRequests streams the sandbox's connections awaiting approval.
func (s *Service) WatchEgressRequests(req *plumbv1.WatchEgressRequestsRequest, stream plumbv1.SandboxService_WatchEgressRequestsServer) error {
	ctx := stream.Context()
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return s.fail("WatchEgressRequests", err)
	}
	timeout := req.GetTimeout().AsDuration()
	if req.GetTimeout() == nil {
		timeout = 0 // refused by the range check with the field named
	}
	// The header tells the client that the box now asks (agentd starts
	// the command it watches for only then).
	ready := func() { _ = stream.SendHeader(metadata.Pairs(EgressWatchingHeader, "true")) }
	err := s.m.WatchEgress(ctx, req.GetSandboxId(), timeout, ready, func(r sandbox.EgressRequest) error {
		return stream.Send(&plumbv1.WatchEgressRequestsResponse{Request: &plumbv1.EgressRequest{
			Id: r.ID, Host: r.Host, Port: uint32(r.Port), CreatedAt: timestamppb.New(r.Since),
			Closed: r.Closed, Allowed: r.Allowed, Reason: r.Reason,
		}})
	})
	if ctx.Err() != nil {
		return nil // the client ended the watch
	}
	return s.fail("WatchEgressRequests", err)
}

// DecideEgress decides a pending request or a destination.
func (s *Service) DecideEgress(ctx context.Context, req *plumbv1.DecideEgressRequest) (*plumbv1.DecideEgressResponse, error) {
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("DecideEgress", err)
	}
	if req.GetPort() > math.MaxUint16 {
		return nil, s.fail("DecideEgress", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "port", Message: fmt.Sprintf("port %d is not 1..65535", req.GetPort())})
	}
	scope := req.GetScope()
	if _, ok := plumbv1.EgressScope_name[int32(scope)]; !ok {
		return nil, s.fail("DecideEgress", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "scope", Message: fmt.Sprintf("unknown scope %d", scope)})
	}
	err := s.m.DecideEgress(ctx, req.GetSandboxId(), sandbox.EgressDecision{
		RequestID: req.GetRequestId(), Host: req.GetHost(), Port: uint16(req.GetPort()), Allow: req.GetAllow(),
		Remember: scope == plumbv1.EgressScope_EGRESS_SCOPE_SANDBOX, Reason: req.GetReason(), By: tenant.From(ctx),
	})
	if err != nil {
		return nil, s.fail("DecideEgress", err)
	}
	return &plumbv1.DecideEgressResponse{}, nil
}
