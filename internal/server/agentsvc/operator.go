package agentsvc

import (
	"context"
	"errors"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
)

// Fleet is the operator's view of agentd's sandboxd workers
// (*fleet.Pool).
type Fleet interface {
	Inventory(ctx context.Context) []fleet.Worker
	DeleteAny(ctx context.Context, sandboxID string) (string, error)
}

// ErrNotOperator: an operator RPC called with a credential that is not an
// operator's (PERMISSION_DENIED, OPERATOR_ONLY).
var ErrNotOperator = errors.New("only an operator credential may call this")

// ErrNoFleet: an operator RPC on an agentd without sandboxd
// (FAILED_PRECONDITION, NO_SANDBOXD).
var ErrNoFleet = errors.New("agentd has no sandboxd workers")

// operator checks that ctx is an operator's call to method on an agentd
// with a fleet.
func (s *Service) operator(ctx context.Context, method string) error {
	if !tenant.Operator(ctx) {
		return fmt.Errorf("%s: %w", method, ErrNotOperator)
	}
	if s.cfg.Fleet == nil {
		return fmt.Errorf("%s: %w", method, ErrNoFleet)
	}
	return nil
}

// ListFleetSandboxes implements plumbv1.AgentServiceServer.
func (s *Service) ListFleetSandboxes(ctx context.Context, _ *plumbv1.ListFleetSandboxesRequest) (*plumbv1.ListFleetSandboxesResponse, error) {
	if err := s.operator(ctx, "ListFleetSandboxes"); err != nil {
		return nil, Status(err)
	}
	out := &plumbv1.ListFleetSandboxesResponse{}
	for _, w := range s.cfg.Fleet.Inventory(ctx) {
		fw := &plumbv1.FleetWorker{
			Name: w.Name, Address: w.Addr, Reachable: w.Err == nil, Healthy: w.Err == nil && w.Healthy,
			Describe: w.Describe, Sandboxes: w.Sandboxes,
		}
		if w.Err != nil {
			fw.Error = status.Convert(w.Err).Message()
		}
		out.Workers = append(out.Workers, fw)
	}
	return out, nil
}

// DeleteFleetSandbox implements plumbv1.AgentServiceServer.
func (s *Service) DeleteFleetSandbox(ctx context.Context, req *plumbv1.DeleteFleetSandboxRequest) (*plumbv1.DeleteFleetSandboxResponse, error) {
	if err := s.operator(ctx, "DeleteFleetSandbox"); err != nil {
		return nil, Status(err)
	}
	id := req.GetSandboxId()
	switch {
	case id == "":
		return nil, Status(InvalidField("sandbox_id", "sandbox_id is required"))
	case sandboxapi.WorkerOf(id) == "":
		return nil, Status(InvalidField("sandbox_id", "%q is not a sandbox id (sbx-<worker>-<random>)", id))
	}
	owner, err := s.cfg.Fleet.DeleteAny(ctx, id)
	if err != nil {
		return nil, s.status("delete fleet sandbox", err)
	}
	// An operator's action on another tenant's box: always logged.
	s.lg.Info("operator deleted a sandbox", zap.String("sandbox-id", id), zap.String("owner", owner), zap.String("operator-tenant", tenant.From(ctx)))
	return &plumbv1.DeleteFleetSandboxResponse{Tenant: owner}, nil
}
