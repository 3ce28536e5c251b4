package store

import (
	"context"
	"errors"
	"time"
)

// WebhookKey is one of a tenant's webhook signing keys. Sealed is the key
// as the caller sealed it (pkg/secrets): the store never sees it in the
// clear. A key without Expires is current; a rotation gives the keys it
// replaces an expiry (the grace period during which both sign).
type WebhookKey struct {
	Tenant  string
	ID      string
	Sealed  []byte
	Created time.Time
	// Expires is zero for a current key.
	Expires time.Time
}

// Live reports whether k still signs at now.
func (k WebhookKey) Live(now time.Time) bool { return k.Expires.IsZero() || k.Expires.After(now) }

// DeliveryStatus is where a webhook delivery is.
type DeliveryStatus string

// Delivery statuses.
const (
	// DeliveryPending: waiting for its next attempt.
	DeliveryPending DeliveryStatus = "pending"
	// DeliveryDelivering: a replica claimed it and is sending it (a
	// claim that expires makes it due again).
	DeliveryDelivering DeliveryStatus = "delivering"
	// DeliverySucceeded: the receiver answered 2xx.
	DeliverySucceeded DeliveryStatus = "succeeded"
	// DeliveryFailed: it gave up (retry window or attempts exhausted, or
	// a destination the policy refuses).
	DeliveryFailed DeliveryStatus = "failed"
)

// ValidDeliveryStatus reports whether s is one of the statuses.
func ValidDeliveryStatus(s DeliveryStatus) bool {
	switch s {
	case DeliveryPending, DeliveryDelivering, DeliverySucceeded, DeliveryFailed:
		return true
	}
	return false
}

// Delivery is one webhook event for one URL, and its delivery log.
type Delivery struct {
	// ID is derived from the run, the event and the URL, so that
	// recording the same event twice (a replica that took a run over
	// settling what the dead one had recorded) records it once.
	ID       string
	Tenant   string
	ThreadID string
	RunID    string
	// Agent is the run's agent profile ("" = unknown, or a delivery
	// recorded before agents were); the retention sweeper's per-agent
	// webhook_deliveries TTL selects by it.
	Agent string
	// Event is the event type (run.succeeded, ...).
	Event string
	URL   string
	// Payload is the body every attempt sends.
	Payload []byte
	Status  DeliveryStatus
	// Attempts counts the attempts started (a claim starts one).
	Attempts int
	// LastStatusCode is the last answer's HTTP status (0: none).
	LastStatusCode int
	// LastError says why the last attempt failed ("" when it did not).
	LastError string
	// NextAttempt is when the delivery is next due.
	NextAttempt time.Time
	// ClaimHolder and ClaimExpires: the replica sending it, until when.
	ClaimHolder  string
	ClaimExpires time.Time
	// GiveUp is when retries stop (created + the retry window).
	GiveUp   time.Time
	Created  time.Time
	Finished time.Time
}

// AttemptResult is the outcome of a claimed attempt.
type AttemptResult struct {
	ID string
	// Holder must be the claim's holder (else ErrClaimLost).
	Holder string
	// Status is DeliverySucceeded, DeliveryFailed (gave up) or
	// DeliveryPending (retry at NextAttempt).
	Status      DeliveryStatus
	StatusCode  int
	Error       string
	NextAttempt time.Time
	// Finished is set with a final status.
	Finished time.Time
}

// DeliveryQuery selects a page of a tenant's deliveries, newest first.
type DeliveryQuery struct {
	// Tenant is required: a listing never crosses tenants.
	Tenant string
	// ThreadID, RunID and Status narrow it ("" = any).
	ThreadID string
	RunID    string
	Status   DeliveryStatus
	// PageSize bounds the page (default 50, max 500).
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
}

// Size is the page size the query asks for, defaulted and capped.
func (q DeliveryQuery) Size() int { return ListQuery{PageSize: q.PageSize}.Size() }

// Errors of the webhook tables.
var (
	// ErrClaimLost: the delivery's claim expired and another replica
	// claimed it (or it finished); the attempt's result is dropped.
	ErrClaimLost = errors.New("webhook delivery claim lost")
	// ErrNoWebhookKey: the tenant has no live signing key.
	ErrNoWebhookKey = errors.New("no webhook signing key")
)

// Webhooks keeps tenants' webhook signing keys and the delivery log.
// Every implementation must pass storetest.RunWebhooks.
type Webhooks interface {
	// RotateWebhookKey stores k as the tenant's current key; every other
	// key of the tenant expires at oldExpires at the latest (a rotation
	// without grace ends them all); keys expired by k.Created are
	// deleted.
	RotateWebhookKey(ctx context.Context, k WebhookKey, oldExpires time.Time) error
	// WebhookKeys returns the tenant's keys live at now, newest first.
	WebhookKeys(ctx context.Context, tenant string, now time.Time) ([]WebhookKey, error)
	// EnqueueDelivery records d (pending, due at d.NextAttempt) unless a
	// delivery with its ID exists; it reports whether it recorded it.
	EnqueueDelivery(ctx context.Context, d Delivery) (bool, error)
	// ClaimDeliveries claims up to limit deliveries due at now (pending,
	// or delivering under a claim expired by now), oldest due first, for
	// holder until now+claimFor: each is then delivering, its Attempts
	// counted. Two replicas never claim the same delivery at once.
	ClaimDeliveries(ctx context.Context, holder string, now time.Time, claimFor time.Duration, limit int) ([]Delivery, error)
	// FinishAttempt records a claimed attempt's result, or returns
	// ErrClaimLost when r.Holder no longer holds the claim.
	FinishAttempt(ctx context.Context, r AttemptResult) error
	// ListDeliveries returns one page of deliveries, newest first, and
	// the next page's token ("" at the end); a token it did not issue is
	// ErrBadPageToken.
	ListDeliveries(ctx context.Context, q DeliveryQuery) ([]Delivery, string, error)
}

// WebhookKeyColumns are the webhook_keys columns ScanWebhookKey reads, in
// order.
const WebhookKeyColumns = `id, sealed, created_at, expires_at`

// ScanWebhookKey reads one row of WebhookKeyColumns as a key of tenant.
func ScanWebhookKey(r Scanner, tenant string) (WebhookKey, error) {
	k := WebhookKey{Tenant: tenant}
	var c, e int64
	if err := r.Scan(&k.ID, &k.Sealed, &c, &e); err != nil {
		return WebhookKey{}, err
	}
	k.Created, k.Expires = FromNanos(c), FromOptNanos(e)
	return k, nil
}

// DeliveryColumns are the webhook_deliveries columns ScanDelivery reads,
// in order.
const DeliveryColumns = `id, tenant, thread_id, run_id, event, url, payload, status, attempts, last_status_code, last_error,
	next_attempt, claim_holder, claim_expires, give_up, created_at, finished_at, agent`

// ScanDelivery reads one row of DeliveryColumns.
func ScanDelivery(r Scanner) (Delivery, error) {
	var (
		d                                         Delivery
		status                                    string
		next, claimExp, giveUp, created, finished int64
	)
	if err := r.Scan(&d.ID, &d.Tenant, &d.ThreadID, &d.RunID, &d.Event, &d.URL, &d.Payload, &status, &d.Attempts, &d.LastStatusCode, &d.LastError,
		&next, &d.ClaimHolder, &claimExp, &giveUp, &created, &finished, &d.Agent); err != nil {
		return Delivery{}, err
	}
	d.Status = DeliveryStatus(status)
	d.NextAttempt, d.ClaimExpires, d.GiveUp = FromNanos(next), FromOptNanos(claimExp), FromNanos(giveUp)
	d.Created, d.Finished = FromNanos(created), FromOptNanos(finished)
	return d, nil
}

// DeliveryPage cuts a delivery listing of one more than size (newest
// first) into a page and the next page's token.
func DeliveryPage(list []Delivery, size int) ([]Delivery, string) {
	return cutPage(list, size, func(d Delivery) (int64, string) { return Nanos(d.Created), d.ID })
}
