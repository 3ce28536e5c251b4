// Package state is the State backend: the files of one thread, kept in
// memory as a map from normalized path to File, with the docs/file-tools.md
// semantics of every other backend (kvfs implements them).
//
// The backend does not persist anything itself. Its owner (the agent and
// the thread store) restores it with Load, snapshots it with Files, and
// after each step persists the delta from TakeChanges. Whole-state
// snapshots and deltas use the same File values, whose JSON form is
// {content, encoding, created_at, modified_at}.
//
// Files have no permission bits (FileInfo.Mode is nil), so no write is
// ever refused for a file's mode; the fileops package doc says how the
// backends with modes refuse read-only files.
//
// State has no executor: it does not implement backend.Executor, so the
// tool layer hides execute. It must not touch the host file system.
package state
