// Package storetest is the conformance suite for agent.Store
// implementations. Every store (the memory store, the SQLite and
// PostgreSQL stores) runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) agent.Store { return newStore(t) })
//	}
//
// The durable stores also run RunThreads, the cases of store.Threads
// (listing, deletion, sandboxes, retention).
//
// The suite only uses the agent.Store and store.Threads interfaces and
// must not depend on any implementation.
package storetest
