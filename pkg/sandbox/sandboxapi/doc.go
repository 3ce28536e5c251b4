// Package sandboxapi holds what a client of a sandbox worker shares with
// the worker without linking it: the sandbox id format and the worker name
// inside every id (which routes a call to its worker), and the lifecycle
// error codes. It imports only the standard library, so agentd and agentctl
// link it instead of pkg/sandbox, the Docker manager, which re-uses it.
package sandboxapi
