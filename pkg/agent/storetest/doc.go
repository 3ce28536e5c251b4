// Package storetest is the conformance suite for agent.Store
// implementations. Every store (the memory store, the SQLite store) runs
// it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) agent.Store { return newStore(t) })
//	}
//
// The suite only uses the agent.Store interface and must not depend on
// any implementation.
package storetest
