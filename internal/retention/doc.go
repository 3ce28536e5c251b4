// Package retention is agentd's retention sweeper (issue 20 item 5).
// Every replica runs one: each pass it asks the store (store.Retention)
// for a batch of threads idle past their tenant's TTL and deletes each
// through its Deleter — the run host's own thread deletion, which takes
// the thread's lease under a deletion holder (of two replicas deleting
// the same thread, one wins and the other finds it gone or held), skips a
// thread that is running or was used again since it was listed, and
// deletes the thread's sandbox and snapshots before the thread. An
// agent's own threads_idle (Policy.Agents) overrides its scope's for the
// threads whose last run was the agent's (ThreadInfo tells). It then
// deletes webhook deliveries finished longer ago than their TTL, and the
// shared run event logs of threads whose last run ended longer ago than
// theirs (run records stay), and the store routes' files not modified
// for store_items (Items: each replica's own store), in batches. An
// agent's own run_events and webhook_deliveries (Policy.AgentRunEvents,
// AgentWebhookDeliveries) override its scope's in the same way, for the
// event logs of threads whose last run was the agent's and for the
// deliveries of the agent's runs: the scopes' batches leave those agents
// out, and each agent's batches take its items of every tenant.
// Every pass also deletes the HTTP API's browser sessions past their
// expiry (Sessions), whatever the TTLs.
// Checkpoints beyond the latest N (the agent's own N, if it has one) are
// pruned by the stores at every checkpoint.
//
// A TTL of 0 keeps forever; agentd's config gives every TTL a finite
// default, so that only an operator who writes 0 keeps anything forever.
package retention
