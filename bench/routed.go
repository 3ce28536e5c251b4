package main

import (
	"context"
	"fmt"

	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
)

// runB11 measures what agentd's fleet routing adds to a sandbox call: the
// same small operations on one sandbox, made the way agentd makes them
// (fleet.Pool: the owner looked up from the sandbox id, the member's
// connection, its health interceptors) and directly on a client connection
// to the worker, interleaved.
func runB11(ctx context.Context, e *env) ([]Row, error) {
	bx, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(bx)
	pool, err := fleet.New(fleet.Config{Targets: []string{e.worker.conn.Target()}, Logger: e.lg})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	home := backend.Home(bx.b)
	if _, err := bx.b.Write(ctx, home+"/routed.txt", []byte("routed\n")); err != nil {
		return nil, err
	}
	ops := []struct {
		name string
		f    func(context.Context, *sandboxclient.Backend) error
	}{
		{`Execute("true")`, func(ctx context.Context, b *sandboxclient.Backend) error {
			r, err := b.Execute(ctx, backend.ExecuteRequest{Command: "true"})
			if err == nil && (r.ExitCode == nil || *r.ExitCode != 0) {
				err = fmt.Errorf("true exited %v", r.ExitCode)
			}
			return err
		}},
		{"Read (1 line)", func(ctx context.Context, b *sandboxclient.Backend) error {
			r, err := b.Read(ctx, backend.ReadRequest{Path: home + "/routed.txt", Limit: 10})
			if err == nil && r.Content == "" {
				err = fmt.Errorf("read returned no content")
			}
			return err
		}},
	}
	var rows []Row
	for _, op := range ops {
		routed := &probe{name: "routed " + op.name, warm: e.scale(20, 5), n: e.scale(300, 60), f: func(ctx context.Context) error {
			b, err := pool.Backend(ctx, bx.id, home)
			if err != nil {
				return err
			}
			return op.f(ctx, b)
		}}
		direct := &probe{name: "direct " + op.name, warm: e.scale(20, 5), n: e.scale(300, 60), f: func(ctx context.Context) error {
			return op.f(ctx, bx.b)
		}}
		if err := interleave(ctx, 5, routed, direct); err != nil {
			return rows, err
		}
		r := latencyRow("B11", op.name+" routed by agentd's worker pool", unitMs, routed.got)
		ratio := r.vsLatency("the same call on a direct connection to the worker", latencyRow("", "", unitMs, direct.got))
		r.Target = "≥ 0.9× direct (routing adds no hop)"
		r.judge(ratio >= 0.9)
		r.note("owner looked up from the sandbox id per call, as agentd does; both paths are one gRPC call over loopback to the same worker")
		rows = append(rows, r)
	}
	return rows, nil
}
