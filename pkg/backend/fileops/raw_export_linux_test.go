//go:build linux && (amd64 || arm64)

package fileops

// SetRawCalls turns the fast path's raw calls on or off, for tests.
func SetRawCalls(on bool) { rawCalls.Store(on) }
