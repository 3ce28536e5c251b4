package agentd

import (
	"context"

	"github.com/plumbhq/plumb/internal/threadbox"
)

// ThreadBoxes builds the service that reaches threads' sandboxes for a
// person (the workspace RPCs and the console's terminal): records from
// the thread store, boxes through the sandbox's owning worker. nil when
// agentd has no sandboxd.
func (a *Agentd) ThreadBoxes() *threadbox.Service {
	pool := a.Backends.pool
	if pool == nil {
		return nil
	}
	home := a.Config.Sandbox.Template.WorkingDir
	s, err := threadbox.New(a.Store, func(ctx context.Context, id string) (threadbox.Box, error) {
		return pool.Backend(ctx, id, home)
	}, home)
	if err != nil {
		return nil
	}
	return s
}
