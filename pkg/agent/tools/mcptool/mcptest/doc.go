// Package mcptest is test support for MCP tools: a small MCP server built
// with the official Go SDK (tools echo, add, hang, huge, fail, image,
// garbage, pid and env), runnable over stdio (as a process) or over
// streamable HTTP (in process), and Local, a backend.ProcessStarter that
// runs commands as local processes with os/exec so that stdio servers can
// be tested without a sandbox.
//
// It is for tests only: Local gives no isolation at all.
package mcptest
