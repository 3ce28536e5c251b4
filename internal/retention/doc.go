// Package retention is agentd's retention sweeper (issue 20 item 5).
// Every replica runs one: each pass it asks the store (store.Retention)
// for a batch of threads idle past their tenant's TTL and deletes each
// through its Deleter — the run host's own thread deletion, which takes
// the thread's lease under a deletion holder (of two replicas deleting
// the same thread, one wins and the other finds it gone or held), skips a
// thread that is running or was used again since it was listed, and
// deletes the thread's sandbox and snapshots before the thread. It then
// deletes webhook deliveries finished longer ago than their TTL, in
// batches. Checkpoints beyond the latest N are pruned by the stores at
// every checkpoint; a thread's run event log holds its latest run only
// and goes with the thread.
//
// A TTL of 0 keeps forever; agentd's config gives every TTL a finite
// default, so that only an operator who writes 0 keeps anything forever.
package retention
