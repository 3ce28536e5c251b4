// Package backend holds plumb's file-operation domain: the result and
// request types of the docs/file-tools.md (§3), the error codes, the limits
// table, the consumer-facing Backend and Executor interfaces, and notices
// (WithNotices, Notify): how a backend tells the caller of one operation
// something its result has no field for.
//
// This package contains no implementation. Implementations live in
// subpackages: fileops (the os.Root engine), state, filesystem, store,
// composite and sandbox. Pure helpers shared by all of them live in vpath
// (path rules, docs/file-tools.md §2) and textops (line model, read slicing, edit replacement,
// grep and glob matching).
//
// The package must not import gRPC or any transport: errors are plain
// *Error values here and are converted to gRPC status once, at the server
// boundary. Every type carries snake_case JSON tags because the sandbox agent
// exchanges them as JSON frames.
package backend
