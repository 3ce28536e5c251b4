// Package agentsvc is the thin gRPC adapter for plumb.v1.AgentService: it
// validates requests, maps them to the agent core, and maps domain errors to
// gRPC status through internal/server. It holds no agent logic.
package agentsvc

import (
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"go.uber.org/zap"
)

// Service implements plumbv1.AgentServiceServer. RPCs that the agent core
// does not serve yet answer UNIMPLEMENTED.
type Service struct {
	plumbv1.UnimplementedAgentServiceServer
	lg *zap.Logger
}

// New returns the service; lg may be nil.
func New(lg *zap.Logger) *Service {
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Service{lg: lg.Named("agentsvc")}
}
