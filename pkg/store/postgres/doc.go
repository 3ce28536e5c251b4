// Package postgres is the thread store of agentd on PostgreSQL (through
// github.com/jackc/pgx/v5), for several agentd replicas sharing one
// database. It keeps what the SQLite store keeps, with the same semantics:
// threads, their append-only message logs, checkpoint records, the latest
// checkpointed state, State-backend files, pending interrupts and run
// records.
//
// Every checkpoint is one transaction that locks its thread's row, so two
// writers of one thread serialize and the second sees the first's log (a
// stale Base is agent.ErrConflict). Reads of a thread run in one
// REPEATABLE READ transaction and see one committed state. Lock waits past
// the busy timeout, serialization failures, deadlocks and an unreachable or
// lost server are store.ErrBusy; values PostgreSQL cannot hold (a NUL in a
// label) are agent.ErrInvalidInput. Schema changes go through numbered migrations recorded
// in schema_version and applied under a transaction-scoped advisory lock,
// so replicas starting together migrate once. The tables live in the
// connection's current schema: one database (or one search_path, set in the
// DSN) per deployment.
//
// It must not log or return the DSN's password.
package postgres
