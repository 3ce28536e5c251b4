// Package sandboxd turns sandboxd's YAML configuration and flags into a
// running sandbox worker: it loads and strictly validates the file
// (config.go), settles each flag with the config key it overrides
// (flags.go), and wires the Docker client, the sandbox manager, the
// SandboxService and its metrics (wire.go). cmd/sandboxd only parses
// flags, calls it and serves.
package sandboxd
