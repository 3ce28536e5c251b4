// Package runhost is agentd's run host: it runs the agent core (Runtime)
// on threads for the streams that ask, and keeps the runs going across
// client disconnects and, with several agentd replicas on one PostgreSQL
// store, across replicas. internal/server/agentsvc is the gRPC adapter
// over it: it validates a request, checks the caller's tenant, calls the
// Host (or reads the thread store), converts the answer and maps errors
// to status codes. The Host never builds a gRPC status: it returns the
// domain errors of package agent, of package runs and of pkg/store, and
// internal/server maps them.
//
// What a Host owns:
//
//   - The run registry (package runs): the run segments active in this
//     process, one per thread, each with a bounded replay log for Attach,
//     kept for a retention period after the terminal event; the run slots
//     (server.max_concurrent_runs); the drain of a shutdown. A run's
//     context outlives its stream: a detached run goes on without a
//     client, a stream that falls behind is cut and the run goes on.
//   - Thread lifecycle around runs: a Run without a thread creates one
//     (owned by the caller's tenant) and deletes it again when the run
//     does not start; DeleteThread waits for (or, with force, cancels)
//     the thread's run wherever it runs before OnDeleteThread and the
//     deletion.
//   - Double-texting (docs/runs.md): with Config.Runs, a Run on a busy
//     thread is rejected, queued (queue.go), queued with the current run
//     stopped at its next checkpoint keeping or discarding its work
//     (interrupt.go: agent.RunInput.Stop and Rollback), or, with
//     Config.Steers, handed to the running run at its next model call
//     (steer.go); Cancel also ends the thread's queued runs and CancelRun
//     one run (cancel.go). A queued run is admitted again just before it
//     starts (Config.AdmitQueued: it waits in its queue, or ends FAILED).
//
// With Config.Leases (replicas sharing a store) it also guarantees:
//
//   - One owner per thread. A run holds its thread's lease (lease.go) for
//     its whole length, renewed every third of the TTL; a live lease of
//     another replica refuses the run (agent.ErrThreadBusy, naming the
//     holder). A deletion holds the lease too, under a holder of its own.
//   - Fencing. Every checkpoint the runtime commits carries the lease's
//     fence (its epoch); the store refuses a commit under a stale one. A
//     replica that loses its lease (a renewal or an event append refused)
//     stops the run at once and ends its streams with agent.ErrLeaseLost
//     and the sequence to re-Attach after: it can no longer change the
//     thread.
//   - Takeover. Every TakeoverInterval (half the TTL, at most 7.5 s) a
//     scan (takeover.go) lists leases that expired without being released
//     — their replica died or handed the run off — acquires them and,
//     when the thread's last run is still RUNNING, continues it from its
//     last checkpoint (Runtime.Continue) in a detached segment.
//   - Hand-off on SIGTERM. Shutdown stops taking runs
//     (runs.ErrReplicaStopping), asks each run to stop at its next
//     checkpoint (the step in flight commits), and after the grace stops
//     the rest at once; each run's events are flushed and its lease
//     handed off (expired, not released) so that the next takeover scan
//     of another replica continues it. Streams end with the sequence to
//     re-Attach after.
//   - Remote control. Cancel and DeleteThread of a run on another replica
//     record a cancel request on its lease (remote.go); the holder polls
//     for requests on its leases and cancels the run, and a takeover
//     honours a request left on an expired lease. A newer run's stop
//     request (interrupt or rollback) travels the same way
//     (store.Leases.RequestStop) and becomes the run's local stop signal;
//     a takeover ends such a run at its first step boundary. Statuses
//     reports a
//     thread RUNNING while any replica holds its lease.
//
// Run ends: Config.OnRunEnd (agentd records webhook deliveries there) is
// told when a segment ends or pauses, after its events are flushed and
// before its lease is released; a takeover that finds a dead replica's
// run already ended tells it again from the store (runend.go), so the hook
// must be idempotent.
//
// With Config.Events (the shared run event log) as well:
//
//   - Persist before send. A run's events are appended to the log under
//     its lease before any client receives them (eventWriter), and every
//     checkpoint waits for the events before it (RunInput.Flush): what a
//     client saw, the log has, and a replica taking the run over numbers
//     its events after the stored ones. A store outage holds the run back
//     (bounded queue), it drops nothing.
//   - Attach anywhere. Attach on a replica that does not hold the run
//     from the requested sequence on follows it in the log, through every
//     segment, until its terminal event.
//
// The events carried on the streams (Send) are the plumb.v1 protobuf
// messages, not agent.Event: each event is converted once, when the
// runtime emits it, and then shared by the replay log (which bounds
// itself by the events' encoded size and coalesces deltas on them), every
// stream that follows the run, and the shared event log (which stores
// their encoding, so that another replica replays them byte for byte).
// Converting back per stream would cost a conversion per client and keep
// two encodings of the bounds apart.
//
// Wiring: agentsvc.New builds the Host from agentsvc.Config, whose
// embedded Config is this package's, and Service.Shutdown is
// Host.Shutdown.
package runhost
