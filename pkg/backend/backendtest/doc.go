// Package backendtest is the conformance suite of docs/file-tools.md §7: one
// table of cases that every backend.Backend must pass (State, Store,
// Filesystem, Composite, Sandbox), run from the backend's own tests with
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
//			b := newEmptyBackend(t) // cleanup via t.Cleanup
//			return &backendtest.Harness{Backend: b, Caps: []backendtest.Capability{backendtest.Media}}
//		})
//	}
//
// Cases are named after docs/file-tools.md: B01–B73 (the §7 rows of layer B), P01–P30
// (§2 path rules through the backend operations), G01–G27 (the §4.7 glob
// matrix), H01–H10 (hostile inputs), and X01… for rules of docs/file-tools.md §4 that the
// table does not number. Every case seeds its tree through Upload on a
// fresh, empty backend, so the suite runs against any backend, in-process
// or remote; what Upload cannot create (symlinks, modes, FIFOs) comes from
// the Harness hooks.
//
// A case that needs a capability the harness does not declare is skipped,
// and only for that reason: declaring a capability the backend has as
// missing is a review blocker (docs/file-tools.md §1). A declared capability without its hook
// fails the suite.
//
// The package must not know any backend: it imports only the backend
// contract, and tests only what the contract promises.
//
// It also holds LocalProcesses, the one host-process stand-in for a
// sandbox's backend.ProcessStarter and backend.Executor, used by the tests
// of tools built on processes (MCP stdio servers, the python tool). It runs
// commands on the test machine with os/exec and confines nothing; it must
// never serve a real run.
package backendtest
