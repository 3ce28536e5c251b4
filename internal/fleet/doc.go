// Package fleet is agentd's view of the sandboxd fleet.
//
// A Pool is built from targets: static "host:port" addresses and
// "dns:///name:port" names. A DNS name is re-resolved periodically (and on
// demand when a placement finds no healthy worker); every resolved address
// gets its own connection, and an address that disappears is closed once
// its in-flight calls end. Each worker's name (the middle part of the
// sandbox ids it issues, see sandboxapi.WorkerOf) is learned from
// DescribeWorker.
//
// New sandboxes go to the healthy worker with the most free capacity (as
// reported by DescribeWorker; a worker whose gRPC health is NOT_SERVING,
// for example one draining, gets no new sandboxes). Every later call goes
// straight to the worker named in the sandbox id, with no lookup RPC on the
// hot path. A call whose worker is unknown to the whole fleet fails with
// NOT_FOUND; a call whose worker is known but unreachable fails with
// UNAVAILABLE naming the worker within the configured deadline, never
// hanging. A worker that comes back under the same name is used again.
package fleet
