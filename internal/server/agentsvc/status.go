package agentsvc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/plumbhq/plumb/internal/egressapproval"
	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/internal/quota"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/webhook"
	"google.golang.org/grpc/codes"
)

// Status converts an error of an AgentService call into its gRPC status:
// the agent core's and the run registry's errors (agentStatus), then the
// file engine's and the sandbox lifecycle's (a cleanup hook's), then what
// server.Status maps for every service.
func Status(err error) error {
	return server.Status(err, agentStatus, server.FileStatus, server.SandboxStatus)
}

// ErrorInfo reasons of AgentService errors (docs/agent-core.md §10.1).
const (
	ReasonInvalidArgument    = "INVALID_ARGUMENT"
	ReasonInvalidDecisions   = "INVALID_DECISIONS"
	ReasonThreadNotFound     = "THREAD_NOT_FOUND"
	ReasonRunNotFound        = "RUN_NOT_FOUND"
	ReasonPendingInterrupt   = "PENDING_INTERRUPT"
	ReasonNoPendingInterrupt = "NO_PENDING_INTERRUPT"
	ReasonStaleInterrupt     = "STALE_INTERRUPT"
	ReasonThreadRunning      = "THREAD_RUNNING"
	ReasonThreadBusy         = "THREAD_BUSY"
	ReasonConflict           = "CONFLICT"
	ReasonReplayOutOfRange   = "REPLAY_OUT_OF_RANGE"
	// ReasonEventsExpired: Attach to a run whose events retention
	// deleted (retention.run_events); its record and messages remain.
	ReasonEventsExpired = "EVENTS_EXPIRED"
	ReasonStreamLagging = "STREAM_LAGGING"
	ReasonNoRunSlot     = "NO_RUN_SLOT"
	ReasonShuttingDown  = "SHUTTING_DOWN"
	ReasonStorageBusy   = "STORAGE_BUSY"
	// ReasonReplicaStopping: this agentd replica is stopping; its runs go
	// on on another replica (with metadata after_sequence on a stream
	// that was cut: re-Attach after it).
	ReasonReplicaStopping = "REPLICA_STOPPING"
	// ReasonLeaseLost: this replica lost the thread's lease and stopped
	// its run; another replica runs it (metadata after_sequence: re-Attach
	// after it).
	ReasonLeaseLost = "LEASE_LOST"
	// ReasonSkillNotFound: the caller's tenant has no skill of that name.
	ReasonSkillNotFound = "SKILL_NOT_FOUND"
	// ReasonSkillLimit: the tenant stores MaxTenantSkills skills already.
	ReasonSkillLimit = "SKILL_LIMIT"
	// ReasonNoSkillStore: this agentd serves no skill RPCs.
	ReasonNoSkillStore = "NO_SKILL_STORE"
	// ReasonSecretNotFound: the caller's tenant has no secret of that name.
	ReasonSecretNotFound = "SECRET_NOT_FOUND"
	// ReasonNoSecretsKey: agentd has no secrets key configured.
	ReasonNoSecretsKey = "NO_SECRETS_KEY"
	// ReasonSecretUnreadable: a stored secret does not open under the
	// configured keys (key rotated away, or the row was tampered with).
	ReasonSecretUnreadable = "SECRET_UNREADABLE"
	// Preview URLs: no such preview (or another tenant's), too many live
	// previews on the thread, no sandbox to preview, previews not served.
	ReasonPreviewNotFound = "PREVIEW_NOT_FOUND"
	ReasonPreviewLimit    = "PREVIEW_LIMIT"
	ReasonNoSandbox       = "NO_SANDBOX"
	ReasonPreviewsOff     = "PREVIEWS_OFF"
	// Schedules: no such schedule (or another tenant's); agentd keeps
	// no schedules.
	ReasonScheduleNotFound = "SCHEDULE_NOT_FOUND"
	ReasonSchedulesOff     = "SCHEDULES_OFF"
	// ReasonRunsOff: the thread store keeps no run records (GetRun,
	// ListRuns, WaitRun and on_busy ENQUEUE need agentd's durable store).
	ReasonRunsOff = "RUNS_OFF"
	// ReasonRunNotActive: CancelRun named a run that is neither queued
	// nor running.
	ReasonRunNotActive = "RUN_NOT_ACTIVE"
	// ReasonSteersOff: the thread store keeps no steers (on_busy STEER).
	ReasonSteersOff = "STEERS_OFF"
	// ReasonUsageOff: the thread store keeps no usage ledger (GetUsage).
	ReasonUsageOff = "USAGE_OFF"
	// Egress approval: no such request (or another tenant's), already
	// decided, no longer waiting (the decision is recorded), approval off.
	ReasonEgressNotFound    = "EGRESS_REQUEST_NOT_FOUND"
	ReasonEgressDecided     = "EGRESS_REQUEST_DECIDED"
	ReasonEgressGone        = "EGRESS_REQUEST_GONE"
	ReasonEgressApprovalOff = "EGRESS_APPROVAL_OFF"
	// ReasonNoWebhookKey: the caller's tenant has no webhook signing key
	// (RotateWebhookKey makes one).
	ReasonNoWebhookKey = "NO_WEBHOOK_KEY"
	// ReasonQuotaExceeded: a Run or Resume over one of the tenant's
	// quotas (RESOURCE_EXHAUSTED), with metadata quota, limit and
	// current; a run that crosses tokens_per_day mid-run ends FAILED
	// with this error code.
	ReasonQuotaExceeded = quota.Code
	// ReasonOperatorOnly: an operator RPC (ListFleetSandboxes,
	// DeleteFleetSandbox) called with a credential that is not an
	// operator's (PERMISSION_DENIED).
	ReasonOperatorOnly = "OPERATOR_ONLY"
	// ReasonNoSandboxd: an operator RPC on an agentd without sandboxd
	// workers (FAILED_PRECONDITION).
	ReasonNoSandboxd = "NO_SANDBOXD"
	// ReasonCheckpointNotFound: ForkThread named a checkpoint the thread
	// does not retain.
	ReasonCheckpointNotFound = "CHECKPOINT_NOT_FOUND"
)

// RequestError is a request an adapter rejected in its own validation
// (docs/agent-core.md §10.1: empty input, bad metadata, bad client tools, ...). It
// maps to INVALID_ARGUMENT with one google.rpc.BadRequest field violation
// per entry, and matches agent.ErrInvalidInput.
type RequestError struct {
	// Violations are the bad fields, in request order.
	Violations []agent.FieldViolation
}

// InvalidField returns a RequestError with one violation.
func InvalidField(field, format string, args ...any) *RequestError {
	return &RequestError{Violations: []agent.FieldViolation{{Field: field, Description: fmt.Sprintf(format, args...)}}}
}

func (e *RequestError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Description
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Is matches agent.ErrInvalidInput.
func (e *RequestError) Is(target error) bool { return target == agent.ErrInvalidInput }

// agentStatus maps the agent core's and the run registry's errors; ok is
// false for an error of another kind.
func agentStatus(err error) (_ error, ok bool) {
	var (
		re  *RequestError
		de  *agent.DecisionError
		pe  *agent.PendingInterruptError
		se  *agent.StaleInterruptError
		oor *runs.OutOfRangeError
		lag *runs.LagError
		cut *runs.CutError
		qe  *quota.ExceededError
		ee  *runhost.EventsExpiredError
	)
	switch {
	case errors.As(err, &ee):
		return server.WithInfo(codes.OutOfRange, ee.Error(), ReasonEventsExpired,
			map[string]string{"thread_id": ee.ThreadID, "run_id": ee.RunID, "last_sequence": fmt.Sprint(ee.Last)}), true
	case errors.As(err, &qe):
		return server.WithInfo(codes.ResourceExhausted, qe.Error(), ReasonQuotaExceeded, qe.Metadata()), true
	case errors.As(err, &re):
		return badRequest(ReasonInvalidArgument, err.Error(), re.Violations), true
	case errors.As(err, &de):
		return badRequest(ReasonInvalidDecisions, err.Error(), de.Violations), true
	case errors.As(err, &pe):
		return server.WithInfo(codes.FailedPrecondition, pe.Error(), ReasonPendingInterrupt,
			map[string]string{"thread_id": pe.ThreadID, "interrupt_id": pe.InterruptID}), true
	case errors.As(err, &se):
		return server.WithInfo(codes.FailedPrecondition, se.Error(), ReasonStaleInterrupt,
			map[string]string{"interrupt_id": se.Current}), true
	case errors.As(err, &oor):
		return server.WithInfo(codes.OutOfRange, oor.Error(), ReasonReplayOutOfRange,
			map[string]string{"thread_id": oor.ThreadID, "oldest_sequence": fmt.Sprint(oor.Oldest)}), true
	case errors.As(err, &lag):
		return server.WithInfo(codes.ResourceExhausted, lag.Error(), ReasonStreamLagging,
			map[string]string{"thread_id": lag.ThreadID, "last_sequence": fmt.Sprint(lag.Last), "oldest_sequence": fmt.Sprint(lag.Oldest)}), true
	case errors.As(err, &cut):
		md := map[string]string{"thread_id": cut.ThreadID, "after_sequence": fmt.Sprint(cut.Last)}
		if errors.Is(cut, agent.ErrLeaseLost) {
			return server.WithInfo(codes.Aborted, cut.Error(), ReasonLeaseLost, md), true
		}
		return server.WithInfo(codes.Unavailable, cut.Error(), ReasonReplicaStopping, md), true
	case errors.Is(err, runs.ErrReplicaStopping):
		return server.WithInfo(codes.Unavailable, err.Error(), ReasonReplicaStopping, nil), true
	case errors.Is(err, agent.ErrInvalidInput):
		return server.WithInfo(codes.InvalidArgument, err.Error(), ReasonInvalidArgument, nil), true
	case errors.Is(err, agent.ErrNoPendingInterrupt):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoPendingInterrupt, nil), true
	case errors.Is(err, agent.ErrThreadBusy):
		return server.WithInfo(codes.Aborted, err.Error(), ReasonThreadBusy, nil), true
	case errors.Is(err, agent.ErrThreadNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonThreadNotFound, nil), true
	case errors.Is(err, store.ErrNoSuchCheckpoint):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonCheckpointNotFound, nil), true
	case errors.Is(err, agent.ErrConflict):
		return server.WithInfo(codes.Aborted, err.Error(), ReasonConflict, nil), true
	case errors.Is(err, store.ErrRunNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonRunNotFound, nil), true
	case errors.Is(err, runhost.ErrNoSteers):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonSteersOff, nil), true
	case errors.Is(err, runhost.ErrRunNotActive):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonRunNotActive, nil), true
	case errors.Is(err, runhost.ErrNoRunRecords):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonRunsOff, nil), true
	case errors.Is(err, runs.ErrNoRun):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonRunNotFound, nil), true
	case errors.Is(err, runs.ErrRunning):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonThreadRunning, nil), true
	case errors.Is(err, runs.ErrNoSlot):
		return server.WithInfo(codes.ResourceExhausted, err.Error(), ReasonNoRunSlot, nil), true
	case errors.Is(err, runs.ErrShuttingDown):
		return server.WithInfo(codes.Unavailable, err.Error(), ReasonShuttingDown, nil), true
	case errors.Is(err, store.ErrSkillNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonSkillNotFound, nil), true
	case errors.Is(err, errSkillLimit):
		return server.WithInfo(codes.ResourceExhausted, err.Error(), ReasonSkillLimit, nil), true
	case errors.Is(err, errNoSkillStore):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoSkillStore, nil), true
	case errors.Is(err, store.ErrSecretNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonSecretNotFound, nil), true
	case errors.Is(err, secrets.ErrNoKey):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoSecretsKey, nil), true
	case errors.Is(err, secrets.ErrUnknownKey), errors.Is(err, secrets.ErrCorrupt):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonSecretUnreadable, nil), true
	case errors.Is(err, secrets.ErrInvalid):
		return server.WithInfo(codes.InvalidArgument, err.Error(), ReasonInvalidArgument, nil), true
	case errors.Is(err, store.ErrBusy):
		return server.WithInfo(codes.Unavailable, "the thread store is busy; retry", ReasonStorageBusy, nil), true
	case errors.Is(err, store.ErrPreviewNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonPreviewNotFound, nil), true
	case errors.Is(err, store.ErrPreviewLimit):
		return server.WithInfo(codes.ResourceExhausted, err.Error(), ReasonPreviewLimit, nil), true
	case errors.Is(err, preview.ErrNoSandbox):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoSandbox, nil), true
	case errors.Is(err, store.ErrNoWebhookKey):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoWebhookKey, nil), true
	case errors.Is(err, webhook.ErrRefused):
		return server.WithInfo(codes.InvalidArgument, err.Error(), ReasonInvalidArgument, nil), true
	case errors.Is(err, preview.ErrOff):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonPreviewsOff, nil), true
	case errors.Is(err, store.ErrScheduleNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonScheduleNotFound, nil), true
	case errors.Is(err, ErrSchedulesOff):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonSchedulesOff, nil), true
	case errors.Is(err, ErrUsageOff):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonUsageOff, nil), true
	case errors.Is(err, store.ErrEgressNotFound):
		return server.WithInfo(codes.NotFound, err.Error(), ReasonEgressNotFound, nil), true
	case errors.Is(err, store.ErrEgressDecided):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonEgressDecided, nil), true
	case errors.Is(err, egressapproval.ErrGone):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonEgressGone, nil), true
	case errors.Is(err, ErrNotOperator):
		return server.WithInfo(codes.PermissionDenied, err.Error(), ReasonOperatorOnly, nil), true
	case errors.Is(err, ErrNoFleet):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonNoSandboxd, nil), true
	case errors.Is(err, egressapproval.ErrOff):
		return server.WithInfo(codes.FailedPrecondition, err.Error(), ReasonEgressApprovalOff, nil), true
	}
	return nil, false
}

// badRequest builds INVALID_ARGUMENT with ErrorInfo and
// google.rpc.BadRequest field violations.
func badRequest(reason, msg string, vs []agent.FieldViolation) error {
	out := make([]pbconv.FieldViolation, len(vs))
	for i, v := range vs {
		out[i] = pbconv.FieldViolation(v)
	}
	return server.NewStatus(codes.InvalidArgument, msg, reason, nil, out)
}
