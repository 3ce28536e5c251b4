// Command agentd serves plumb.v1.AgentService: the deep-agent executor that
// plans, works on files, delegates to subagents and asks humans for
// approval, over any OpenAI-compatible model endpoint.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/plumbhq/plumb/gen"
	plumbv1gw "github.com/plumbhq/plumb/gen/gateway/plumb/v1"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/agentd"
	"github.com/plumbhq/plumb/internal/console"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/httpapi"
	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/internal/yamlconf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() { os.Exit(daemon.Main("agentd", run)) }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		c              daemon.Common
		sandboxd       string
		defaultBackend string
		sqlitePath     string
		postgresDSN    string
		workerToken    string
		workerTLS      grpccreds.TLSFiles
		previewAddr    string
		previewURL     string
		previewKey     string
		demoModel      bool
		noConsole      bool
	)
	f := daemon.NewFlags("agentd")
	c.Bind(f, "127.0.0.1:7070", "127.0.0.1:9070")
	f.String(&sandboxd, "sandboxd", "127.0.0.1:7071", "comma-separated sandboxd workers: host:port and dns:///name:port (re-resolved; each address is one worker)")
	f.String(&defaultBackend, "default-backend", "", "file backend of every thread unless the config says otherwise: state, sandbox or filesystem")
	f.String(&sqlitePath, "sqlite-path", "", "thread store file (storage.sqlite_path; empty = a temporary file)")
	f.String(&postgresDSN, "postgres-dsn", "", "keep threads in PostgreSQL instead of SQLite, for several agentd replicas (storage.postgres_dsn; a postgres:// URL or key=value DSN)")
	f.String(&workerToken, "sandboxd-token-file", "", "file holding the bearer token sandboxd workers require (give it the forwarder mark in their credentials file)")
	f.String(&workerTLS.CA, "sandboxd-tls-ca", "", "PEM CA bundle to verify sandboxd workers with: dial them over TLS")
	f.String(&workerTLS.Cert, "sandboxd-tls-cert", "", "PEM client certificate presented to sandboxd workers (re-read when it changes)")
	f.String(&workerTLS.Key, "sandboxd-tls-key", "", "PEM private key of --sandboxd-tls-cert")
	f.String(&previewAddr, "preview-addr", "", "serve preview URLs (HTTP, WebSocket) on this address, a listener of their own; empty = no previews (docs/security.md, Preview URLs)")
	f.String(&previewURL, "preview-url", "", "public base URL of --preview-addr as users reach it (https://preview.example.com); empty = http://ADDR")
	f.String(&previewKey, "preview-key-file", "", "file holding the key that signs preview tokens (32+ bytes), and optionally the previous key on a second line; the same on every replica")
	f.Bool(&demoModel, "demo-model", false, "when no model is configured at all (no models section, no OPENAI_BASE_URL or OPENAI_API_KEY), answer with the built-in scripted demo model (make run); a configured model always wins")
	f.Bool(&noConsole, "no-console", false, "do not serve the web console at /ui/ on --http-addr")
	if err := daemon.ParseArgs(f, args, stdout, "agentd serves plumb.v1.AgentService, the deep-agent executor.\nThe default model comes from OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL when --config has no models."); err != nil {
		return err
	}
	if c.Version {
		daemon.PrintVersion(stdout, "agentd")
		return nil
	}

	cfg := &agentd.Config{}
	if c.ConfigPath != "" {
		var err error
		if cfg, err = agentd.Load(c.ConfigPath); err != nil {
			return &daemon.UsageError{Err: err}
		}
		s := cfg.Server
		if err := c.Apply(f, daemon.ServerConfig{GRPCAddr: s.GRPCAddr, HTTPAddr: s.HTTPAddr, ShutdownGrace: s.ShutdownGrace}); err != nil {
			return err
		}
	}
	if f.IsSet("sandboxd") {
		if _, err := fleet.ParseTargets(sandboxd); err != nil {
			return daemon.Usagef("invalid --sandboxd: %v", err)
		}
	}
	switch defaultBackend {
	case "", "state", "sandbox", "filesystem":
	default:
		return daemon.Usagef("invalid --default-backend %q: want state, sandbox or filesystem", defaultBackend)
	}
	// A flag given wins over the config file, the file over the flag's
	// default (the rule sandboxd follows too).
	daemon.Override(f, "sandboxd", sandboxd, &cfg.Sandbox.Address)
	daemon.Override(f, "default-backend", defaultBackend, &cfg.Backends.Default)
	daemon.Override(f, "sqlite-path", sqlitePath, &cfg.Storage.SQLitePath)
	daemon.Override(f, "postgres-dsn", postgresDSN, &cfg.Storage.PostgresDSN)

	lg, err := daemon.NewLogger(c.LogFormat, c.LogLevel)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer func() { _ = lg.Sync() }()
	yamlconf.LogDeprecations(lg, cfg.Deprecated)

	sec, err := c.Security(false, lg)
	if err != nil {
		return err
	}
	tr, err := daemon.SetupTracing(ctx, "agentd", lg)
	if err != nil {
		return err
	}
	defer daemon.FlushTraces(tr, lg)
	wtoken, err := daemon.ReadToken(workerToken)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	// Sandbox calls carry the thread's tenant in plumb-tenant.
	workerOpts := tenant.DialOptions()
	if wtoken != "" {
		workerOpts = append(workerOpts, grpc.WithPerRPCCredentials(grpccreds.BearerToken(wtoken)))
	}
	if workerTLS != (grpccreds.TLSFiles{}) {
		tc, err := grpccreds.ClientTLS(workerTLS, lg)
		if err != nil {
			return &daemon.UsageError{Err: err}
		}
		workerOpts = append(workerOpts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}

	core, err := agentd.Build(ctx, cfg, agentd.Options{
		Env:        os.Getenv,
		Logger:     lg,
		WorkerDial: workerOpts,
		Tracing:    tr,
		Demo:       demoModel,
	})
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer core.Close()
	lg.Info("starting agentd", zap.String("default-backend", core.Config.Backends.Default), zap.String("sandboxd", core.Config.Sandbox.Address),
		zap.String("default-model", core.Config.Defaults.Model))

	// On PostgreSQL several replicas share the store: runs take thread
	// leases there (a thread runs on one replica at a time), append their
	// events to the shared event log (Attach works on any replica), and
	// the runs of a replica that died are taken over by the others. On
	// SIGTERM, Shutdown (BeforeStop, bounded by shutdown_grace) stops
	// taking runs, brings each run to a checkpoint and hands it to the
	// other replicas, ending its streams with REPLICA_STOPPING; only then
	// does the gRPC server stop.
	scfg := core.ServiceConfig(replicaID())
	// The retention sweeper's counters are served with the server's.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if scfg.Retention != nil {
		scfg.Retention.Metrics = metrics
	}
	// Per-tenant token and run counters.
	core.MeterUsage(&scfg, metrics)
	var servers []daemon.HTTPServer
	if previewAddr != "" || previewKey != "" {
		srv, ps, err := previews(core, previewAddr, previewURL, previewKey, lg)
		if err != nil {
			return err
		}
		servers = append(servers, srv)
		scfg.Previews = ps
	}
	svc, err := agentsvc.New(scfg, agentsvc.WithLogger(lg))
	if err != nil {
		for _, x := range servers {
			x.Listener.Close()
		}
		return &daemon.UsageError{Err: err}
	}
	// Every replica delivers webhooks (claims in the store give each
	// attempt to one); the loop outlives the signal so that the runs
	// handed off or finished during the shutdown are recorded first, and
	// stops once the server has.
	if w := scfg.Webhooks; w.Enabled() {
		wctx, stopWebhooks := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(wctx)
		}()
		defer func() {
			stopWebhooks()
			<-done
		}()
	}
	o := sec
	o.Name, o.GRPCAddr, o.HTTPAddr, o.ShutdownGrace, o.Logger = "agentd", c.GRPCAddr, c.HTTPAddr, c.ShutdownGrace, lg
	o.Register = func(s *grpc.Server) { plumbv1.RegisterAgentServiceServer(s, svc) }
	o.API = &httpapi.Service{
		Services: []protoreflect.ServiceDescriptor{plumbv1.File_plumb_v1_agent_proto.Services().ByName("AgentService")},
		Register: plumbv1gw.RegisterAgentServiceHandler,
		OpenAPI:  gen.AgentOpenAPI,
	}
	// Browser sessions in the thread store: a cookie made on one replica
	// works on every replica sharing it (docs/http.md).
	o.API.Sessions = core.HTTPSessions()
	o.BulkMethods = agentsvc.BulkMethods
	o.ServerOptions = tr.ServerOptions()
	stopped := false
	o.BeforeStop = func(ctx context.Context) error { stopped = true; return svc.Shutdown(ctx) }
	o.Registry = metrics
	o.Servers = servers
	if !noConsole {
		o.HTTPHandlers = func(auth daemon.TokenAuth) map[string]http.Handler {
			cc := console.Config{Auth: console.Authenticate(auth), Logger: lg}
			if tb := core.ThreadBoxes(); tb != nil {
				cc.Terminals = tb
			}
			con, err := console.New(cc)
			if err != nil {
				lg.Error("web console off", zap.Error(err))
				return nil
			}
			return con.Handlers()
		}
		ready := o.Ready
		o.Ready = func(g, h net.Addr) {
			if ready != nil {
				ready(g, h)
			}
			lg.Info("web console at http://"+h.String()+"/ui/", zap.String("console-url", "http://"+h.String()+"/ui/"))
		}
	}
	err = daemon.Serve(ctx, o)
	if !stopped {
		// Serve failed before serving (a busy port): the service's loops
		// (scheduler, takeover, queue) stop before the store closes.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownGrace)
		_ = svc.Shutdown(sctx)
		cancel()
	}
	return err
}

// replicaID names this agentd as a lease holder: the host name (the pod
// name on Kubernetes) and a random suffix, unique across restarts.
func replicaID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return cmp.Or(host, "agentd") + "-" + hex.EncodeToString(b)
}

// previews binds the preview listener and builds its service: both the
// address and the key are needed, and a listener beyond loopback needs
// --preview-url (the address it binds is not what users reach).
func previews(core *agentd.Agentd, addr, base, keyFile string, lg *zap.Logger) (daemon.HTTPServer, *preview.Service, error) {
	if addr == "" || keyFile == "" {
		return daemon.HTTPServer{}, nil, daemon.Usagef("previews need both --preview-addr and --preview-key-file")
	}
	keys, err := preview.LoadKeys(keyFile)
	if err != nil {
		return daemon.HTTPServer{}, nil, &daemon.UsageError{Err: err}
	}
	if base == "" && !daemon.IsLoopback(addr) {
		return daemon.HTTPServer{}, nil, daemon.Usagef("--preview-addr %s is not loopback: give --preview-url, the URL users reach it at (behind TLS)", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return daemon.HTTPServer{}, nil, fmt.Errorf("preview listener: %w", err)
	}
	if base == "" {
		base = "http://" + lis.Addr().String()
	}
	svc, err := core.Previews(keys, base, lg)
	if err != nil {
		lis.Close()
		return daemon.HTTPServer{}, nil, &daemon.UsageError{Err: err}
	}
	return daemon.HTTPServer{Name: "previews", Listener: lis, Handler: svc.Handler()}, svc, nil
}
