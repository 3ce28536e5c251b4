package store

import (
	"context"
	"errors"
	"time"
)

// EgressStatus is where a connection that asked for a human's decision
// stands.
type EgressStatus string

// Egress statuses.
const (
	// EgressPending waits for a decision.
	EgressPending EgressStatus = "PENDING"
	// EgressApproved was approved (a grant, of Scope).
	EgressApproved EgressStatus = "APPROVED"
	// EgressRejected was rejected by a human.
	EgressRejected EgressStatus = "REJECTED"
	// EgressClosed ended undecided (timed out, the tool call ended, the
	// worker lost its channel to the proxy).
	EgressClosed EgressStatus = "CLOSED"
)

// EgressScope is how far an approval reaches.
type EgressScope string

// Egress grant scopes.
const (
	// EgressScopeRun admits the destination for the rest of the run.
	EgressScopeRun EgressScope = "RUN"
	// EgressScopeThread admits it in the thread's later boxes too.
	EgressScopeThread EgressScope = "THREAD"
	// EgressScopeAgent admits it in later boxes of any thread of the
	// agent, in the same tenant.
	EgressScopeAgent EgressScope = "AGENT"
)

// EgressRecord is one connection of a thread's sandbox that asked for a
// human's decision (docs/security.md, "Egress approved by a human"): the
// pending list while it waits, the audit once decided, and a grant when
// approved with scope THREAD or AGENT. It is keyed by (ThreadID,
// RequestID); the proxy's request ids are unique across boxes.
type EgressRecord struct {
	Tenant    string
	ThreadID  string
	RequestID string
	// Agent is the run's primary agent; RunID the run.
	Agent, RunID string
	SandboxID    string
	Host         string
	Port         int
	// ToolCallID and AgentPath name the tool call that was running.
	ToolCallID, AgentPath string
	Created               time.Time
	Status                EgressStatus
	// Scope is set for approvals.
	Scope EgressScope
	// DecidedBy names who decided (tenant and credential subject).
	DecidedBy string
	Decided   time.Time
	// Reason is why it ended (a rejection's or the proxy's).
	Reason  string
	Revoked bool
}

// EgressDecision is what a decision writes into a pending record.
type EgressDecision struct {
	Status    EgressStatus // EgressApproved, EgressRejected or EgressClosed
	Scope     EgressScope  // approvals only
	DecidedBy string
	Decided   time.Time
	Reason    string
}

// EgressQuery selects approvals of a tenant: of one thread, or of one
// agent (any thread), newest first.
type EgressQuery struct {
	Tenant string
	// ThreadID or Agent (exactly one).
	ThreadID, Agent string
	PageSize        int
	// PageToken continues a previous listing (ErrBadPageToken when the
	// store did not issue it).
	PageToken string
}

// Errors of the egress records.
var (
	// ErrEgressNotFound: no record of that thread has that request id.
	ErrEgressNotFound = errors.New("egress request not found")
	// ErrEgressDecided: the request is no longer pending.
	ErrEgressDecided = errors.New("egress request already decided")
)

// EgressRecords keeps the egress asks, their decisions and the grants.
// Records outlive their thread (the audit does; an AGENT grant keeps
// admitting its destination for the agent's other threads). Every
// implementation must pass storetest.RunEgress.
type EgressRecords interface {
	// AddEgressRequest stores a pending record; adding one that exists
	// (same thread and request id) changes nothing and is no error.
	AddEgressRequest(ctx context.Context, r EgressRecord) error
	// EgressRequest returns one record, or ErrEgressNotFound.
	EgressRequest(ctx context.Context, threadID, requestID string) (EgressRecord, error)
	// DecideEgressRequest writes d into a pending record and returns it;
	// ErrEgressDecided when it is not pending, ErrEgressNotFound when
	// there is none.
	DecideEgressRequest(ctx context.Context, threadID, requestID string, d EgressDecision) (EgressRecord, error)
	// PendingEgress returns the thread's pending records, oldest first.
	PendingEgress(ctx context.Context, threadID string) ([]EgressRecord, error)
	// ListEgressGrants returns approvals (revoked ones included) of a
	// tenant's thread or agent, newest first, and the next page's token.
	ListEgressGrants(ctx context.Context, q EgressQuery) ([]EgressRecord, string, error)
	// EgressGrants returns the unrevoked approvals that admit a
	// destination in a new box of threadID: its THREAD grants and the
	// AGENT grants of (tenant, agent).
	EgressGrants(ctx context.Context, tenant, agent, threadID string) ([]EgressRecord, error)
	// RevokeEgressGrant marks an approval revoked (again is fine);
	// ErrEgressNotFound unless the record is an approval.
	RevokeEgressGrant(ctx context.Context, threadID, requestID string) error
}

// EgressColumns are the egress_requests columns ScanEgress reads, in
// order.
const EgressColumns = `tenant, thread_id, request_id, agent, run_id, sandbox_id, host, port, tool_call_id, agent_path,
	created_at, status, scope, decided_by, decided_at, reason, revoked`

// ScanEgress reads one row of EgressColumns.
func ScanEgress(sc Scanner) (EgressRecord, error) {
	var (
		r                EgressRecord
		created, decided int64
		status, scope    string
	)
	if err := sc.Scan(&r.Tenant, &r.ThreadID, &r.RequestID, &r.Agent, &r.RunID, &r.SandboxID, &r.Host, &r.Port, &r.ToolCallID, &r.AgentPath,
		&created, &status, &scope, &r.DecidedBy, &decided, &r.Reason, &r.Revoked); err != nil {
		return EgressRecord{}, err
	}
	r.Status, r.Scope = EgressStatus(status), EgressScope(scope)
	r.Created, r.Decided = FromNanos(created), FromOptNanos(decided)
	return r, nil
}

// EgressGrantPage cuts a grant listing of one more than size (newest
// decision first) into a page and the next page's token.
func EgressGrantPage(list []EgressRecord, size int) ([]EgressRecord, string) {
	return cutPage(list, size, func(r EgressRecord) (int64, string) { return Nanos(r.Decided), r.RequestID })
}
