// Package mcptest is test support for MCP tools: a small MCP server built
// with the official Go SDK (tools echo, add, hang, huge, fail, image,
// garbage, pid and env), runnable over stdio (as a process) or over
// streamable HTTP (in process). Tests run stdio servers without a sandbox
// through backendtest.LocalProcesses.
//
// It is for tests only.
package mcptest
