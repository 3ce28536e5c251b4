// Package egress is the filtering forward proxy that gives an egress
// sandbox its only way out. It serves HTTP CONNECT and plain HTTP forward
// requests, resolves each destination itself and dials the vetted address
// (never the name again), and refuses with 403 and a reason: loopback,
// link-local (cloud metadata included), private and reserved ranges, the
// worker host's own addresses, and, when the operator gives an allow-list,
// everything not on it.
//
// It runs inside the per-sandbox proxy container that pkg/sandbox starts
// (cmd/plumb-egress); it knows nothing of Docker or of sandboxes beyond the
// id it logs. It must stay small and free of cgo: the binary is imported
// into an image of its own.
package egress
