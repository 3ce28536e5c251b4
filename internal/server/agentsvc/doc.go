// Package agentsvc is the thin gRPC adapter for plumb.v1.AgentService
// (docs/agent-core.md §1.1): it validates requests (§10.1), maps them to the agent
// core (pkg/agent, driven through the Runtime interface), pumps events
// into the streams in order, and owns the run registry of package runs
// (active runs, replay logs, detach and attach, run slots, shutdown).
//
// It holds no agent logic and never builds a gRPC status itself: every
// error goes through Status, which maps the agent core's and the run
// registry's errors (status.go) on the shared core of server.Status.
//
// Wiring (cmd/agentd):
//
//	svc, err := agentsvc.New(agentsvc.Config{
//		Runtime:            rt,                             // *deep.Runtime
//		Threads:            agentsvc.DurableThreads(store), // the store rt was built with
//		OnDeleteThread:     deleteSandbox,                  // func(ctx, *agent.ThreadData) error
//		MaxConcurrentRuns:  cfg.Server.MaxConcurrentRuns,
//		DetachOnDisconnect: cfg.Server.DetachOnDisconnect,
//		ReplayRetention:    cfg.Server.ReplayRetention,
//		ReplayMaxEvents:    cfg.Server.ReplayMaxEvents,
//		ReplayMaxBytes:     cfg.Server.ReplayMaxBytes,
//		MaxIterations:      cfg.Limits.MaxIterations,
//		RunTimeout:         cfg.Limits.RunTimeout,
//		Models:             modelKeys,
//	}, agentsvc.WithLogger(lg))
//	plumbv1.RegisterAgentServiceServer(grpcServer, svc)
//	// On SIGTERM: svc.Shutdown(ctx bounded by server.shutdown_grace),
//	// then grpcServer.GracefulStop().
package agentsvc
