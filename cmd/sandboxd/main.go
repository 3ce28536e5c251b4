// Command sandboxd is a sandbox worker: it serves plumb.v1.SandboxService,
// running each agent's commands and file operations inside a hardened
// Docker container on this host.
package main

import (
	"context"
	"io"
	"os"

	"github.com/plumbhq/plumb/gen"
	plumbv1gw "github.com/plumbhq/plumb/gen/gateway/plumb/v1"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/httpapi"
	"github.com/plumbhq/plumb/internal/sandboxd"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/yamlconf"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() { os.Exit(daemon.Main("sandboxd", run)) }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		c  daemon.Common
		fl sandboxd.Flags
	)
	f := daemon.NewFlags("sandboxd")
	c.Bind(f, "127.0.0.1:7071", "127.0.0.1:9071")
	fl.Bind(f)
	if err := daemon.ParseArgs(f, args, stdout, "sandboxd serves plumb.v1.SandboxService: hardened Docker sandboxes."); err != nil {
		return err
	}
	if c.Version {
		daemon.PrintVersion(stdout, "sandboxd")
		return nil
	}

	cfg := &sandboxd.Config{}
	if c.ConfigPath != "" {
		var err error
		if cfg, err = sandboxd.Load(c.ConfigPath); err != nil {
			return &daemon.UsageError{Err: err}
		}
		if err := c.Apply(f, cfg.Server); err != nil {
			return err
		}
	}
	fl.Apply(f, cfg)
	if err := cfg.Validate(); err != nil {
		if c.ConfigPath != "" {
			return daemon.Usagef("config file %s: %v", c.ConfigPath, err)
		}
		return &daemon.UsageError{Err: err}
	}
	bins, err := sandboxd.ReadBinaries(cfg)
	if err != nil {
		return err
	}

	lg, err := daemon.NewLogger(c.LogFormat, c.LogLevel)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer func() { _ = lg.Sync() }()
	yamlconf.LogDeprecations(lg, cfg.Deprecated)
	// agentd's --token-file token names the tenant it calls for.
	sec, err := c.Security(true, lg)
	if err != nil {
		return err
	}
	lg = lg.With(zap.String("worker", cfg.Worker))
	tr, err := daemon.SetupTracing(ctx, "sandboxd", lg)
	if err != nil {
		return err
	}
	defer daemon.FlushTraces(tr, lg)
	lg.Info("starting sandboxd")

	w, err := sandboxd.Build(ctx, cfg, sandboxd.Options{Binaries: bins, Logger: lg, DeleteOnExit: fl.DeleteOnExit})
	if err != nil {
		return err
	}
	defer w.Close()
	o := sec
	o.Name, o.GRPCAddr, o.HTTPAddr, o.ShutdownGrace, o.Logger, o.Registry = "sandboxd", c.GRPCAddr, c.HTTPAddr, c.ShutdownGrace, lg, w.Registry
	o.Register = func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, w.Service) }
	o.API = &httpapi.Service{
		Services: []protoreflect.ServiceDescriptor{plumbv1.File_plumb_v1_sandbox_proto.Services().ByName("SandboxService")},
		Register: plumbv1gw.RegisterSandboxServiceHandler,
		OpenAPI:  gen.SandboxOpenAPI,
	}
	o.BulkMethods = sandboxsvc.BulkMethods
	// Resumable commands and processes are killed when shutdown starts:
	// their attached streams end with them instead of holding the
	// graceful stop for its whole grace (w.Close closes again, a no-op).
	o.BeforeStop = func(context.Context) error { w.Service.Close(); return nil }
	// Upload chunks stay in gRPC's receive buffers (sandboxsvc.Codec).
	o.ServerOptions = append(tr.ServerOptions(), grpc.ForceServerCodecV2(sandboxsvc.Codec()))
	return daemon.Serve(ctx, o)
}
