// Package sqlite is the embedded, default thread store of agentd:
// threads, their append-only message logs, checkpoint records, the latest
// checkpointed state, pending interrupts and run records, in one embedded
// SQLite file (modernc.org/sqlite: pure Go, no cgo). It implements
// store.Threads (agent.Store, so an agentd restart loses no committed
// step, plus the listing and deletion agentd's thread RPCs need).
//
// Every checkpoint is one transaction. Messages are written once (only an
// EDIT decision rewrites a stored call's arguments). Schema changes go
// through numbered migrations recorded in schema_version.
package sqlite
