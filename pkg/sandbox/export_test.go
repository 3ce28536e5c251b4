package sandbox

// ExecutionDone reports whether execution id of x has ended (false when it
// is unknown): a test waits for it before reading a buffer that overflowed.
func ExecutionDone(x *Executions, id string) bool {
	x.mu.Lock()
	e := x.m[id]
	x.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

// ExecutionKnown reports whether x still holds execution id.
func ExecutionKnown(x *Executions, id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.m[id] != nil
}

// ExecutionEvents is the number of events execution id of x has had (0
// when it is unknown).
func ExecutionEvents(x *Executions, id string) uint64 {
	x.mu.Lock()
	e := x.m[id]
	x.mu.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.next - 1
}
