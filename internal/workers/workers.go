// Package workers is agentd's view of the sandboxd fleet: it dials every
// configured worker, learns each one's name (the middle part of the sandbox
// ids it issues), places new sandboxes on the least-loaded reachable worker,
// and routes every later call straight to the worker that owns the sandbox,
// with no lookup table on the hot path.
package workers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	sandboxbackend "github.com/plumbhq/plumb/pkg/backend/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// maxMessageBytes matches the daemons' gRPC message bound.
const maxMessageBytes = 16 << 20

// Pool holds one client connection per worker address.
type Pool struct {
	lg    *zap.Logger
	addrs []string
	conns map[string]*grpc.ClientConn // by address

	mu     sync.Mutex
	byName map[string]string // worker name → address
}

// Dial creates connections to every address (connections are lazy: an
// unreachable worker does not fail Dial). extra options are appended to
// the defaults (insecure transport, 16 MiB messages).
func Dial(addrs []string, lg *zap.Logger, extra ...grpc.DialOption) (*Pool, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	if len(addrs) == 0 {
		return nil, errors.New("no sandboxd worker addresses")
	}
	p := &Pool{lg: lg.Named("workers"), addrs: addrs, conns: map[string]*grpc.ClientConn{}, byName: map[string]string{}}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
	}, extra...)
	for _, a := range addrs {
		c, err := grpc.NewClient(a, opts...)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("sandboxd %s: %w", a, err)
		}
		p.conns[a] = c
	}
	return p, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	for _, c := range p.conns {
		c.Close()
	}
}

type load struct {
	addr string
	info *plumbv1.DescribeWorkerResponse
}

// describe asks every worker for its load; unreachable ones are skipped.
func (p *Pool) describe(ctx context.Context) []load {
	var (
		mu  sync.Mutex
		out []load
		wg  sync.WaitGroup
	)
	for _, a := range p.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			info, err := plumbv1.NewSandboxServiceClient(p.conns[a]).DescribeWorker(cctx, &plumbv1.DescribeWorkerRequest{})
			if err != nil {
				p.lg.Warn("worker unreachable", zap.String("addr", a), zap.Error(err))
				return
			}
			p.mu.Lock()
			p.byName[info.GetName()] = a
			p.mu.Unlock()
			mu.Lock()
			out = append(out, load{a, info})
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Least loaded first: free sandbox slots, then fewer sandboxes.
	sort.Slice(out, func(i, j int) bool {
		fi, fj := free(out[i].info), free(out[j].info)
		if fi != fj {
			return fi > fj
		}
		if out[i].info.GetSandboxes() != out[j].info.GetSandboxes() {
			return out[i].info.GetSandboxes() < out[j].info.GetSandboxes()
		}
		return out[i].addr < out[j].addr
	})
	return out
}

// free is a worker's headroom as a fraction of its quota (1 when unlimited).
func free(w *plumbv1.DescribeWorkerResponse) float64 {
	f := 1.0
	if m := w.GetMaxSandboxes(); m > 0 {
		f = min(f, 1-float64(w.GetSandboxes())/float64(m))
	}
	if m := w.GetMaxMemoryBytes(); m > 0 {
		f = min(f, 1-float64(w.GetMemoryReservedBytes())/float64(m))
	}
	return f
}

// Create places a sandbox on the least-loaded reachable worker, trying the
// next one when a worker's quota is full.
func (p *Pool) Create(ctx context.Context, req *plumbv1.CreateSandboxRequest) (*plumbv1.Sandbox, error) {
	loads := p.describe(ctx)
	if len(loads) == 0 {
		return nil, status.Errorf(codes.Unavailable, "no sandboxd worker is reachable (%s)", strings.Join(p.addrs, ", "))
	}
	var last error
	for _, l := range loads {
		resp, err := plumbv1.NewSandboxServiceClient(p.conns[l.addr]).CreateSandbox(ctx, req)
		if err == nil {
			return resp.GetSandbox(), nil
		}
		last = err
		if c := status.Code(err); c != codes.ResourceExhausted && c != codes.Unavailable {
			return nil, err
		}
	}
	return nil, last
}

// conn returns the connection of the worker that owns sandbox id.
func (p *Pool) conn(ctx context.Context, id string) (*grpc.ClientConn, error) {
	name := sandbox.WorkerOf(id)
	if name == "" {
		return nil, status.Errorf(codes.InvalidArgument, "%q is not a sandbox id", id)
	}
	p.mu.Lock()
	a, ok := p.byName[name]
	p.mu.Unlock()
	if !ok {
		p.describe(ctx)
		p.mu.Lock()
		a, ok = p.byName[name]
		p.mu.Unlock()
	}
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "worker %s of sandbox %s is not reachable", name, id)
	}
	return p.conns[a], nil
}

// Client returns a SandboxService client of the worker that owns id.
func (p *Pool) Client(ctx context.Context, id string) (plumbv1.SandboxServiceClient, error) {
	c, err := p.conn(ctx, id)
	if err != nil {
		return nil, err
	}
	return plumbv1.NewSandboxServiceClient(c), nil
}

// Backend returns the file/exec backend of sandbox id; home is its working
// dir.
func (p *Pool) Backend(ctx context.Context, id, home string) (*sandboxbackend.Backend, error) {
	c, err := p.conn(ctx, id)
	if err != nil {
		return nil, err
	}
	return sandboxbackend.New(c, id, home), nil
}

// Delete removes sandbox id from its worker; an unknown sandbox is not an
// error.
func (p *Pool) Delete(ctx context.Context, id string) error {
	c, err := p.Client(ctx, id)
	if err != nil {
		return err
	}
	_, err = c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}
