package sandbox

import (
	"fmt"

	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

// Code classifies a sandbox lifecycle error (sandboxapi.Code: clients
// import sandboxapi rather than this package).
type Code = sandboxapi.Code

// Lifecycle error codes; see sandboxapi.
const (
	CodeNotFound      = sandboxapi.CodeNotFound
	CodeQuota         = sandboxapi.CodeQuota
	CodeImageNotFound = sandboxapi.CodeImageNotFound
	CodeInvalid       = sandboxapi.CodeInvalid
	CodeFailed        = sandboxapi.CodeFailed
	CodeUnavailable   = sandboxapi.CodeUnavailable
	CodeSlowConsumer  = sandboxapi.CodeSlowConsumer
	CodeShuttingDown  = sandboxapi.CodeShuttingDown
	CodePolicy        = sandboxapi.CodePolicy
	// CodeSnapshotNotFound and CodeDataLoss are the snapshot codes.
	CodeSnapshotNotFound = sandboxapi.CodeSnapshotNotFound
	CodeDataLoss         = sandboxapi.CodeDataLoss
	// Named volume codes.
	CodeVolumeNotFound     = sandboxapi.CodeVolumeNotFound
	CodeVolumeExists       = sandboxapi.CodeVolumeExists
	CodeVolumeInUse        = sandboxapi.CodeVolumeInUse
	CodeVolumesUnsupported = sandboxapi.CodeVolumesUnsupported
)

// Error is a lifecycle error with a stable code (sandboxapi.Error).
type Error = sandboxapi.Error

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// invalidField is a CodeInvalid error about one template field.
func invalidField(field, format string, args ...any) *Error {
	e := errorf(CodeInvalid, format, args...)
	e.Field = field
	return e
}

// CodeOf returns the Code of a sandbox *Error in err's chain, or "".
func CodeOf(err error) Code { return sandboxapi.CodeOf(err) }

// ConfigError is a worker configuration NewManager refuses: a bad policy,
// or a template or the defaults breaking it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }
