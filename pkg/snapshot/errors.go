package snapshot

import (
	"errors"
	"fmt"
)

// Code classifies a snapshot error.
type Code string

// Error codes.
const (
	// CodeNotFound: no snapshot with that id for this tenant (another
	// tenant's snapshot is not found either).
	CodeNotFound Code = "not_found"
	// CodeDataLoss: the store holds a corrupt, truncated or missing chunk
	// or manifest.
	CodeDataLoss Code = "data_loss"
	// CodeQuota: the tenant's stored bytes would exceed its quota.
	CodeQuota Code = "quota_exceeded"
	// CodeInvalid: the workspace cannot be captured (a device node, a bad
	// name, over the size bound).
	CodeInvalid Code = "invalid_argument"
)

// Error is a snapshot error with a stable code.
type Error struct {
	Code    Code
	Message string
	// Limit names the quota a CodeQuota error hit.
	Limit string
	Err   error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the Code of an *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrNotExist is what a Store returns for a key it does not hold.
var ErrNotExist = errors.New("snapshot store: no such object")
