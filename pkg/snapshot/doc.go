// Package snapshot holds durable workspace snapshots (docs/workspaces.md):
// the manifest format, chunking with deduplication by content hash, zstd
// compression, checksums, per-tenant quota and garbage collection, over a
// small Store interface with a local-directory implementation (Dir); the
// S3-compatible one is in s3store, the suite both pass in snapshottest.
//
// A snapshot is untrusted input made by box code (docs/security.md,
// "Workspace snapshots and restore"): Capture parses the engine's tar of a
// workspace as hostile, and Restore verifies every checksum of a snapshot
// before it writes the first byte of the tar it builds. It knows nothing
// of Docker or of sandboxes; pkg/sandbox calls it. It must not import
// internal/.
package snapshot
