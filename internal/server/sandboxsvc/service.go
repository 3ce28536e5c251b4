// Package sandboxsvc is the thin gRPC adapter for plumb.v1.SandboxService: it
// maps requests to the sandbox manager and file engine, and domain errors to
// gRPC status through internal/server. It holds no sandbox logic.
package sandboxsvc

import (
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"go.uber.org/zap"
)

// Service implements plumbv1.SandboxServiceServer. RPCs that the worker does
// not serve yet answer UNIMPLEMENTED.
type Service struct {
	plumbv1.UnimplementedSandboxServiceServer
	lg *zap.Logger
}

// New returns the service; lg may be nil.
func New(lg *zap.Logger) *Service {
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Service{lg: lg.Named("sandboxsvc")}
}
