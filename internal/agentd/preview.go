package agentd

import (
	"context"
	"errors"
	"net"

	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
	"go.uber.org/zap"
)

// Previews builds the preview service of this core (docs/security.md,
// Preview URLs): records in the thread store, connections through the
// sandbox's owning worker, for the preview's tenant. baseURL is the
// preview listener's public URL.
func (a *Agentd) Previews(keys preview.Keys, baseURL string, lg *zap.Logger) (*preview.Service, error) {
	ps, ok := a.Store.(preview.Store)
	if !ok {
		return nil, errNoPreviewStore
	}
	return preview.New(preview.Config{
		Store: ps, Keys: keys, BaseURL: baseURL, Logger: lg,
		Dial: func(ctx context.Context, owner, sandboxID string, port int) (net.Conn, error) {
			pool := a.Backends.pool
			if pool == nil {
				return nil, backend.Errorf(backend.CodeUnsupported, "", "no sandboxd is configured")
			}
			ctx = tenant.With(ctx, owner)
			b, err := pool.Backend(ctx, sandboxID, "")
			if err != nil {
				return nil, err
			}
			return b.DialPort(ctx, port)
		},
	})
}

var errNoPreviewStore = errors.New("the thread store keeps no preview records")
