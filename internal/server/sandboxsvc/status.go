package sandboxsvc

import "github.com/plumbhq/plumb/internal/server"

// Status converts an error of a SandboxService call into its gRPC status:
// the file engine's errors, then the sandbox lifecycle's, then what
// server.Status maps for every service.
func Status(err error) error {
	return server.Status(err, server.FileStatus, server.SandboxStatus)
}
