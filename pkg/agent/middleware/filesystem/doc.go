// Package filesystem implements the filesystem middleware (docs/agent-core.md §3.2
// #2) and the tool layer of docs/file-tools.md §6: the file tools (ls,
// read_file, write_file, edit_file, delete, glob, grep, and execute when
// the backend is a backend.Executor) over a backend.Backend, with their
// schemas, argument handling, result shapes, "Error [<code>]: <message>"
// errors and 80,000-char caps; eviction of large results of other tools to
// /large_tool_results/ (docs/agent-core.md §3.4), where execute also has the
// backend save the full output of a long command; offload of huge user
// messages; the file_modified reminder; and the notices backends leave
// for a call (backend.Notify), such as a replaced sandbox.
//
// All text the model reads about files is produced here; backends return
// structured results only. Paths are validated (vpath) before any backend
// call, and the agent's permission preset is checked again before writes
// and execute.
package filesystem
