// Package storefs is the Store backend: persistent files shared across
// threads, kept in an embedded SQLite database (modernc.org/sqlite, pure
// Go) and partitioned into namespaces such as ["acme", "memories"].
//
// A DB is one database file in WAL mode with a busy timeout; its schema is
// versioned (store_schema_version) and migrated by Open. NewBackend gives
// the backend of one namespace. File semantics are the State backend's
// (both run kvfs): keys are normalized paths, directories are synthesized,
// and every enumeration is an indexed range query on (namespace, path),
// never a scan of the namespace. Writes run in IMMEDIATE transactions, so
// a delete is atomic and an edit never loses a concurrent update.
//
// Like State, files have no permission bits: no write is refused for a
// file's mode (the fileops package doc says how backends with modes refuse
// read-only files). Only a database SQLite cannot write (SQLITE_READONLY)
// refuses writes, all of them, with permission_denied.
//
// The package must not interpret namespaces (templating them from thread
// metadata is the caller's job) and has no executor.
package storefs
