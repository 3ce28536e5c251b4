package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Worker is one worker address of the fleet and what it runs, as listed
// by Inventory.
type Worker struct {
	// Addr is the address the pool dials.
	Addr string
	// Name is the worker's name (the last one it reported; "" when it
	// never answered).
	Name string
	// Err is why the worker could not be listed; nil when it was.
	Err error
	// Healthy: its gRPC health is SERVING.
	Healthy bool
	// Describe is its DescribeWorker answer (worker-wide: agentd is a
	// trusted forwarder); nil when Err is set.
	Describe *plumbv1.DescribeWorkerResponse
	// Sandboxes are every tenant's sandboxes on it, oldest first.
	Sandboxes []*plumbv1.Sandbox
}

// Inventory describes every worker and lists every tenant's sandboxes on
// it, all workers at once, each bounded by the pool's deadline: a worker
// that does not answer is returned with its error, never holding up the
// others. Workers are sorted by name, the never-named last by address.
// The pool's credential at the workers must be a trusted forwarder's.
func (p *Pool) Inventory(ctx context.Context) []Worker {
	p.refreshMu.Lock()
	p.resolve(ctx)
	p.refreshMu.Unlock()
	p.mu.RLock()
	ms := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		ms = append(ms, m)
	}
	p.mu.RUnlock()
	out := make([]Worker, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { out[i] = p.inventoryOne(ctx, m) })
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Worker) int {
		if (a.Name == "") != (b.Name == "") {
			if a.Name == "" {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Addr, b.Addr))
	})
	return out
}

func (p *Pool) inventoryOne(ctx context.Context, m *member) Worker {
	w := Worker{Addr: m.addr}
	info, healthy, err := p.describeOne(ctx, m)
	m.mu.Lock()
	w.Name = m.name
	m.mu.Unlock()
	if err != nil {
		w.Err = err
		return w
	}
	w.Name, w.Healthy, w.Describe = info.GetName(), healthy, info
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Deadline)
	defer cancel()
	l, err := plumbv1.NewSandboxServiceClient(m.conn).ListSandboxes(cctx, &plumbv1.ListSandboxesRequest{AllTenants: true})
	if err != nil {
		w.Err, w.Describe = err, nil
		return w
	}
	w.Sandboxes = l.GetSandboxes()
	return w
}

// DeleteAny removes sandbox id from its worker whatever tenant owns it
// (an operator's delete), and returns that tenant. A sandbox its worker
// does not list is a sandboxapi.CodeNotFound error, as is one whose
// worker is not part of the fleet.
func (p *Pool) DeleteAny(ctx context.Context, id string) (string, error) {
	c, err := p.Client(ctx, id)
	if status.Code(err) == codes.NotFound {
		return "", &sandboxapi.Error{Code: sandboxapi.CodeNotFound, Message: fmt.Sprintf("sandbox %s not found", id), Err: err}
	}
	if err != nil {
		return "", err
	}
	l, err := c.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{AllTenants: true})
	if err != nil {
		return "", err
	}
	owner := ""
	for _, sb := range l.GetSandboxes() {
		if sb.GetId() == id {
			owner = tenant.Norm(sb.GetTenant())
		}
	}
	if owner == "" {
		return "", &sandboxapi.Error{Code: sandboxapi.CodeNotFound, Message: fmt.Sprintf("sandbox %s not found on worker %s", id, sandboxapi.WorkerOf(id))}
	}
	// The worker deletes a tenant's sandbox for that tenant only: agentd,
	// a trusted forwarder, names it.
	_, err = c.DeleteSandbox(tenant.With(ctx, owner), &plumbv1.DeleteSandboxRequest{SandboxId: id})
	if err != nil {
		return "", err
	}
	return owner, nil
}
