// Package xengine starts a private Docker Engine with experimental
// features on (Docker's checkpoint API), for the tests and the benchmark
// rows of memory checkpoints (docs/workspaces.md, "Memory checkpoints").
// The machine's own engine is never reconfigured: the private one has its
// own data root, exec root, socket and containerd, vfs storage, no
// iptables rules, and a network namespace of its own, so that nothing it
// does to network interfaces reaches the host's (a dockerd started with
// --bridge=none deletes the host's docker0, the bridge of the machine's
// engine, if it shares the host's namespace).
package xengine
