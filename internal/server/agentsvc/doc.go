// Package agentsvc is the thin gRPC adapter for plumb.v1.AgentService
// (docs/agent-core.md §1.1), the way containerd's service.go sits over its local
// implementation: each method validates the request (§10.1), checks that
// the caller's tenant owns the thread, calls the run host
// (internal/runhost: runs, streams, cancels, deletions) or reads the
// thread store (GetThread, the lists), converts the answer to plumb.v1
// and maps errors. The run registry, leases, takeover, remote cancels,
// the shared event log and hand-off live in runhost.
//
// With Config.Schedules it also serves the schedule RPCs (schedules.go)
// and runs this replica's scheduler (internal/scheduler), whose Starter
// starts each fire's run through the run host as the schedule's tenant;
// Shutdown stops the scheduler before the run host.
//
// It holds no agent logic and never builds a gRPC status itself: every
// error goes through Status, which maps the agent core's and the run
// registry's errors (status.go) on the shared core of server.Status.
//
// Wiring (cmd/agentd, through agentd.ServiceConfig):
//
//	svc, err := agentsvc.New(agentsvc.Config{
//		Runtime: rt, // *deep.Runtime
//		Config: runhost.Config{
//			Threads:            runhost.DurableThreads(store), // the store rt was built with
//			OnDeleteThread:     deleteSandbox,                 // func(ctx, *agent.ThreadData) error
//			MaxConcurrentRuns:  cfg.Server.MaxConcurrentRuns,
//			DetachOnDisconnect: cfg.Server.DetachOnDisconnect,
//			ReplayRetention:    cfg.Server.ReplayRetention,
//			ReplayMaxEvents:    cfg.Server.ReplayMaxEvents,
//			ReplayMaxBytes:     cfg.Server.ReplayMaxBytes,
//			// On PostgreSQL: Leases, Events, ReplicaID, LeaseTTL.
//		},
//		MaxIterations: cfg.Limits.MaxIterations,
//		RunTimeout:    cfg.Limits.RunTimeout,
//		Models:        modelKeys,
//		Schedules:     store, // store.Schedules; SchedulePoll, Replica
//	}, agentsvc.WithLogger(lg))
//	plumbv1.RegisterAgentServiceServer(grpcServer, svc)
//	// On SIGTERM: svc.Shutdown(ctx bounded by server.shutdown_grace),
//	// then grpcServer.GracefulStop().
package agentsvc
