package sandboxapi

import "errors"

// Code classifies a sandbox lifecycle error. It is the ErrorInfo reason of
// the gRPC status SandboxService returns; the service maps codes to status
// codes in one place.
type Code string

// Lifecycle error codes.
const (
	// CodeNotFound: no sandbox with that id on this worker.
	CodeNotFound Code = "sandbox_not_found"
	// CodeQuota: the worker's sandbox or memory quota is full, or the
	// tenant's (Error.Limit then names the per_tenant limit).
	CodeQuota Code = "quota_exceeded"
	// CodeImageNotFound: the image is not present locally (nothing is pulled).
	CodeImageNotFound Code = "image_not_found"
	// CodeInvalid: a bad create/keep-alive argument.
	CodeInvalid Code = "invalid_argument"
	// CodeFailed: the sandbox's container died or vanished.
	CodeFailed Code = "sandbox_failed"
	// CodeUnavailable: the agent channel broke; the operation may be retried.
	CodeUnavailable Code = "unavailable"
	// CodeSlowConsumer: a stream's reader fell so far behind that its
	// operation was cancelled, so it could not stall the sandbox.
	CodeSlowConsumer Code = "slow_consumer"
	// CodeShuttingDown: the manager is closed.
	CodeShuttingDown Code = "shutting_down"
	// CodePolicy: the request is well formed but the worker's policy (or
	// the template it names) does not allow it; Error.Limit names the
	// limit it broke.
	CodePolicy Code = "policy_violation"
	// CodeSnapshotNotFound: no snapshot with that id for the caller's
	// tenant (another tenant's snapshot is not found either).
	CodeSnapshotNotFound Code = "snapshot_not_found"
	// CodeDataLoss: a snapshot's chunk or manifest in the store is
	// corrupt, truncated or missing; nothing was restored.
	CodeDataLoss Code = "data_loss"
	// CodeVolumeNotFound: no named volume with that name or id for the
	// caller's tenant on this worker (another tenant's is not found either).
	CodeVolumeNotFound Code = "volume_not_found"
	// CodeVolumeExists: the tenant already has a volume of that name on
	// this worker.
	CodeVolumeExists Code = "volume_exists"
	// CodeVolumeInUse: the volume is mounted by a sandbox; delete the
	// sandbox first.
	CodeVolumeInUse Code = "volume_in_use"
	// CodeVolumesUnsupported: this worker cannot bound a volume's size
	// (its disk enforcement is the watchdog), so it makes none.
	CodeVolumesUnsupported Code = "volumes_unsupported"
)

// Error is a lifecycle error with a stable code.
type Error struct {
	Code    Code
	Message string
	Err     error
	// Limit names the policy or template limit a CodePolicy error broke
	// ("max_memory_bytes", "allowed_images", "runtime", ...), or the
	// per-tenant limit a CodeQuota error broke ("per_tenant.max_cpus"),
	// or the worker's ("max_sandboxes", "max_memory"; a create's or a
	// hibernated box's wake).
	Limit string
	// Field names the template field a CodeInvalid error is about, by its
	// configuration name ("cpus", "working_dir", ...; "" = none).
	Field string
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the Code of an *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
