// Package quota is agentd's per-tenant quotas (issue 20 item 6):
// concurrent runs, runs per minute, tokens per day and live sandboxes.
//
// Every number is counted in the shared thread store, so that the quotas
// hold across agentd replicas: running runs are the tenant's run records
// with status RUNNING (store.QuotaCounts.RunningRuns), runs per minute
// the run records asked for in the last minute (RunsSince), tokens per day
// the usage ledger's prompt and completion tokens of the last 24 hours
// (store.TokensSince), and live sandboxes the tenant's threads that hold
// a sandbox (LiveSandboxes). A Run or Resume over a quota is refused
// before it starts (Admit, an *ExceededError); a queued run is checked
// again as it is about to start (AdmitQueued: over concurrent_runs or
// live_sandboxes it waits in its queue, over tokens_per_day it ends
// FAILED; runs_per_minute counted it when it was asked for). A takeover
// continues a started run and is not admitted again. tokens_per_day is
// also checked before every model call of a run (Middleware), taken-over
// runs included, so a run that crossed it ends FAILED with code
// QUOTA_EXCEEDED at its next step.
//
// The checks read the store; they take no lock. Requests admitted at the
// same moment (on one replica or several) may all pass and exceed a
// quota by the number of racing requests; a run counts as running from
// its first checkpoint on. The package must not start runs, delete
// anything or hold state beyond its policy.
package quota
