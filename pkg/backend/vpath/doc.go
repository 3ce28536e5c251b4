// Package vpath implements the path rules of docs/file-tools.md §2: the one
// place where virtual paths are validated and normalized, plus small
// helpers over normalized paths.
//
// Every layer that accepts a path (tool args, gRPC fields, upload and
// download items, Composite route prefixes, execute cwd) calls Normalize,
// and backends call it again, so each layer is safe on its own. The package
// is pure: it never touches a file system, and it never resolves "..",
// decodes, Unicode-normalizes or case-folds anything.
package vpath
