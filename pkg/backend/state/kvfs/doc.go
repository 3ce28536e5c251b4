// Package kvfs implements the file operations of docs/file-tools.md §4 over a
// sorted key-value store whose keys are normalized virtual paths. The State
// backend (an in-memory map) and the Store backend (SQLite) are both an FS
// over their own KV, so they share one implementation of the tree
// invariants, the error codes and the result shapes.
//
// The tree model: a key is a regular file; there are no directory keys. A
// directory exists iff some key lies under it, and "/" always exists. A key
// and a key under it ("/a" and "/a/b") never coexist: Write refuses to
// create either situation. Listing synthesizes directory entries.
//
// All text logic (read slicing, edit replacement, grep and glob matching,
// the binary sniff) is textops'; this package only walks keys and applies
// the rules. It must not grow its own line model or matcher, and it must
// never ask a KV for all of its keys: every query is a key range under one
// directory.
package kvfs
