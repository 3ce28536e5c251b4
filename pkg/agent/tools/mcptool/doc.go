// Package mcptool gives agents the tools of MCP (Model Context Protocol)
// servers, through the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A Server is either a stdio server, whose command is started through the
// thread's backend (backend.ProcessStarter: inside the thread's sandbox,
// so an untrusted server is contained like any agent command), or a
// streamable-HTTP server that agentd reaches by URL. A Manager holds the
// configured servers; its Middleware is an agent.ToolProvider: at the
// start of each agent context it lists the tools of the servers that
// context may use and offers them as mcp__<server>__<tool>, with the
// server's input schema (validated by the executor like any tool's).
//
// Sessions belong to a run: the first agent context of a run that needs a
// server connects to it (starting the stdio process), later contexts of
// the same run (subagents) share the session and its tool list, and the
// session is closed, its process killed, when the last context of the run
// segment ends. A dead session is reopened by the next call.
//
// Every failure of a server (it does not start, does not answer in time,
// speaks something that is not MCP, sends a message over the size limit,
// or answers isError) is an error tool result with a message that names
// the server; it never fails the run. A server that cannot be listed at
// run start is offered as one tool, mcp__<server>__unavailable, whose
// calls report why (and retry), or, when the config names its tools, as
// those tools with a permissive schema.
//
// The package never logs tool arguments or results above debug level,
// and never stores header values or environment secrets anywhere but in
// the requests and processes that need them.
package mcptool
