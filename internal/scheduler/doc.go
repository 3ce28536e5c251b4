// Package scheduler is the loop that fires agentd's schedules. Every
// agentd replica runs one: each poll it lists the schedules whose next
// fire time has passed (store.Schedules.DueSchedules), decides each one's
// tick with its catch-up policy (pkg/schedule), claims that tick with a
// compare-and-set on the schedule's next fire time (ClaimFire: of
// replicas racing for a tick exactly one wins, and a fire record unique
// per tick backs it up), and has the winner start the run through its
// Starter — the run host's detached Run, as the schedule's tenant.
//
// It must not build gRPC statuses or know the wire types: agentsvc wires
// the Starter and serves the schedule RPCs over the same store.
package scheduler
