// Package hostfs is the Filesystem backend: a host directory exposed
// as the backend's "/" and confined to it by the shared file engine
// (fileops, os.Root). It adds only configuration (the max_file_size option
// of deepagents' FilesystemBackend) to the engine, so its semantics are
// exactly those of the sandbox agent's file operations.
//
// It must not add file semantics of its own: anything a Filesystem does
// differently from a Sandbox is a bug in one of them. It has no executor
// (docs/file-tools.md §4.8: execute is unsupported), and its home dir is "/".
//
// Hard links are not detectable through os.Root: never root a Filesystem
// backend at a directory that contains hard links to sensitive files (docs/file-tools.md §2).
package hostfs
