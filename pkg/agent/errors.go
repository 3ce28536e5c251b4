package agent

import (
	"errors"
	"fmt"
	"strings"
)

// Errors a Runner returns before a run starts (docs/agent-core.md §10.1). The gRPC
// adapter maps them to status codes in one place.
var (
	// ErrInvalidInput: the request is malformed (INVALID_ARGUMENT).
	ErrInvalidInput = errors.New("invalid input")
	// ErrThreadBusy: the thread has an active run (ABORTED).
	ErrThreadBusy = errors.New("thread is busy")
	// ErrPendingInterrupt: Run on an interrupted thread
	// (FAILED_PRECONDITION, reason PENDING_INTERRUPT). The error is a
	// *PendingInterruptError.
	ErrPendingInterrupt = errors.New("thread has a pending interrupt")
	// ErrNoPendingInterrupt: Resume on a thread without one
	// (FAILED_PRECONDITION).
	ErrNoPendingInterrupt = errors.New("no pending interrupt")
	// ErrStaleInterrupt: Resume names another interrupt
	// (FAILED_PRECONDITION). The error is a *StaleInterruptError.
	ErrStaleInterrupt = errors.New("interrupt is not pending")
)

// CodedError is an error that says how it ends a run: a hook or model
// wrapper that returns one (a quota crossed mid-run) ends the run FAILED
// with an error event of its code, instead of INTERNAL.
type CodedError interface {
	error
	RunError() RunError
}

// PendingInterruptError is returned by Run on an interrupted thread.
type PendingInterruptError struct {
	ThreadID, InterruptID string
}

// Error implements error.
func (e *PendingInterruptError) Error() string {
	return fmt.Sprintf("thread %s has a pending interrupt %s; resume it or set abandon_interrupt", e.ThreadID, e.InterruptID)
}

// Is matches ErrPendingInterrupt.
func (e *PendingInterruptError) Is(target error) bool { return target == ErrPendingInterrupt }

// StaleInterruptError is returned by Resume for an interrupt id that is
// not the pending one.
type StaleInterruptError struct {
	Got, Current string
}

// Error implements error.
func (e *StaleInterruptError) Error() string {
	return fmt.Sprintf("interrupt %s is not pending (current: %s)", e.Got, e.Current)
}

// Is matches ErrStaleInterrupt.
func (e *StaleInterruptError) Is(target error) bool { return target == ErrStaleInterrupt }

// FieldViolation is one bad field of a request (google.rpc.BadRequest).
type FieldViolation struct {
	// Field is a path such as "decisions[1].type".
	Field string
	// Description says what is wrong.
	Description string
}

// DecisionError lists every problem of a Resume's decisions (docs/agent-core.md
// §6.5); nothing changed. It maps to INVALID_ARGUMENT with field
// violations.
type DecisionError struct {
	Violations []FieldViolation
}

// Error joins the violations' descriptions.
func (e *DecisionError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Description
	}
	return "invalid decisions: " + strings.Join(parts, "; ")
}

// Is matches ErrInvalidInput.
func (e *DecisionError) Is(target error) bool { return target == ErrInvalidInput }
