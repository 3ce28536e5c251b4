package store

import (
	"context"
	"time"
)

// Retention is what the retention sweeper (internal/retention) asks of a
// durable store: the threads idle past a TTL, the finished webhook
// deliveries past theirs, and the run event logs of runs that ended
// longer ago than theirs, each of them by tenant and by agent.
// Checkpoints are pruned at every SaveCheckpoint (the stores'
// Options.CheckpointRetention, and AgentCheckpointRetention for the
// checkpoint's run's agent); a thread's run event log holds its
// latest run only and goes with the thread if it is still there. Every
// implementation must pass storetest.RunRetention.
type Retention interface {
	// IdleThreads returns up to q.Limit ids of threads not updated since
	// q.Before, least recently updated first.
	IdleThreads(ctx context.Context, q IdleQuery) ([]string, error)
	// DeleteFinishedDeliveries deletes up to limit webhook deliveries
	// that finished (succeeded or failed) before before, of tenant
	// ("" = every tenant but those in except), and returns how many.
	DeleteFinishedDeliveries(ctx context.Context, q ExpiredDeliveries) (int, error)
	// DeleteExpiredRunEvents deletes the run event log (RunEvents) of up
	// to q.Limit threads whose last run ended — the thread has no run
	// RUNNING, INTERRUPTED or QUEUED and no unreleased lease — and that
	// were not updated since q.Before (a thread's updated_at is at or
	// after its last run's end), of q.Tenant ("" = every tenant but
	// those in q.Except). It returns how many events it deleted. The run
	// records stay (GetRun still answers).
	DeleteExpiredRunEvents(ctx context.Context, q ExpiredDeliveries) (int, error)
}

// IdleQuery selects threads idle past a TTL.
type IdleQuery struct {
	// Before: threads whose UpdatedAt is before it.
	Before time.Time
	// Tenant, if set, keeps only that tenant's threads.
	Tenant string
	// Except leaves these tenants' threads out (tenants with TTLs of
	// their own) when Tenant is "".
	Except []string
	// Limit bounds the batch (default 100).
	Limit int
}

// ExpiredDeliveries selects finished webhook deliveries past a TTL (and,
// for DeleteExpiredRunEvents, threads whose run event log is past its).
type ExpiredDeliveries struct {
	// Before: deliveries finished before it.
	Before time.Time
	// Tenant, if set, keeps only that tenant's deliveries.
	Tenant string
	// Except leaves these tenants out when Tenant is "".
	Except []string
	// Limit bounds the batch (default 500).
	Limit int
	// Agents, if set, keeps only the items of these agents: a
	// delivery's (Delivery.Agent), a thread's last run's for its event
	// log ("" = a run that named no agent). ExceptAgents leaves these
	// agents' items out. They select the agents with TTLs of their own
	// (agents.<name>.retention).
	Agents       []string
	ExceptAgents []string
}

// BatchSize is limit, or def when limit is not positive.
func BatchSize(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return limit
}

// CheckpointsKept is how many checkpoint records a thread keeps after a
// checkpoint of a run of agentName: the agent's own count in agents (the
// stores' Options.AgentCheckpointRetention) when positive, else def.
func CheckpointsKept(def int, agents map[string]int, agentName string) int {
	if n := agents[agentName]; n > 0 {
		return n
	}
	return def
}
