package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// claimMargin is how long a claim outlasts the attempt's timeout: the
// time to record its result. A replica that dies mid-send leaves the
// claim to expire, and another replica sends the delivery again.
const claimMargin = 30 * time.Second

// finishTimeout bounds recording an attempt's result.
const finishTimeout = 30 * time.Second

// Run delivers due deliveries until ctx ends, at most Config.Concurrency
// at a time, then waits for the attempts in flight (cut short by ctx's
// end; each is recorded as a failed attempt to retry). Every replica runs
// it: claims in the shared store give each attempt to one of them. It
// claims every PollInterval, and at once when OnRunEnd on this replica
// records a delivery.
func (s *Service) Run(ctx context.Context) {
	if !s.Enabled() {
		return
	}
	lg := s.lg.With(zap.String("holder", s.cfg.Holder))
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	defer s.client.CloseIdleConnections()
	defer wg.Wait()
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		for free := cap(sem) - len(sem); free > 0 && ctx.Err() == nil; free = cap(sem) - len(sem) {
			ds, err := s.cfg.Store.ClaimDeliveries(ctx, s.cfg.Holder, s.now(), s.cfg.Timeout+claimMargin, free)
			if err != nil {
				if ctx.Err() == nil {
					lg.Warn("claim webhook deliveries", zap.Error(err))
				}
				break
			}
			for _, d := range ds {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					s.attempt(ctx, d)
				}()
			}
			if len(ds) < free {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		}
	}
}

// outcome is what one attempt came to.
type outcome struct {
	code int
	err  string
	// final: no retry (succeeded, or a destination the policy refuses).
	final bool
	ok    bool
}

// attempt sends claimed delivery d once and records the result.
func (s *Service) attempt(ctx context.Context, d store.Delivery) {
	lg := s.lg.With(zap.String("delivery-id", d.ID), zap.String("run-id", d.RunID), zap.String("event", d.Event), zap.Int("attempt", d.Attempts))
	var o outcome
	if d.Attempts > s.cfg.MaxAttempts {
		// A replica died during its last attempt. (The retry window is
		// enforced when a retry is scheduled: an attempt that was due
		// within it is made.)
		o = outcome{code: d.LastStatusCode, err: "gave up: " + d.LastError, final: true}
	} else {
		o = s.send(ctx, d)
	}
	r := store.AttemptResult{ID: d.ID, Holder: s.cfg.Holder, StatusCode: o.code, Error: o.err}
	done := s.now()
	switch {
	case o.ok:
		r.Status, r.Finished = store.DeliverySucceeded, done
	case o.final:
		r.Status, r.Finished = store.DeliveryFailed, done
	default:
		next := done.Add(webhook.Backoff(d.Attempts, s.firstRetry, s.maxRetry, jitter))
		if ctx.Err() != nil {
			next = done // cut by a shutdown: due again at once, on another replica
		}
		if d.Attempts >= s.cfg.MaxAttempts || next.After(d.GiveUp) {
			r.Status, r.Finished = store.DeliveryFailed, done
			r.Error = fmt.Sprintf("gave up after %d attempts: %s", d.Attempts, o.err)
		} else {
			r.Status, r.NextAttempt = store.DeliveryPending, next
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := s.cfg.Store.FinishAttempt(fctx, r); err != nil {
		lg.Warn("record a webhook attempt", zap.Error(err))
		return
	}
	switch r.Status {
	case store.DeliverySucceeded:
		lg.Info("webhook delivered", zap.Int("status-code", o.code))
	case store.DeliveryFailed:
		lg.Warn("webhook delivery failed for good", zap.Int("status-code", o.code), zap.String("error", r.Error))
	default:
		lg.Info("webhook attempt failed; will retry", zap.Int("status-code", o.code), zap.String("error", o.err), zap.Time("next-attempt", r.NextAttempt))
	}
}

// send makes one HTTP attempt of d, signed with the tenant's live keys.
func (s *Service) send(ctx context.Context, d store.Delivery) outcome {
	if _, err := s.cfg.Policy.CheckURL(d.URL); err != nil {
		return outcome{err: err.Error(), final: true}
	}
	now := s.now()
	stored, err := s.cfg.Store.WebhookKeys(ctx, d.Tenant, now)
	if err != nil {
		return outcome{err: "read the signing keys: " + err.Error()}
	}
	var keys []string
	for _, k := range stored {
		b, err := s.cfg.Sealer.Open(d.Tenant, keyName(k.ID), k.Sealed)
		if err != nil {
			s.lg.Warn("a webhook signing key does not open; skipped", zap.String("tenant", d.Tenant), zap.String("key-id", k.ID), zap.Error(err))
			continue
		}
		keys = append(keys, string(b))
	}
	if len(keys) == 0 {
		return outcome{err: "the tenant has no webhook signing key (RotateWebhookKey)"}
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, d.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return outcome{err: err.Error(), final: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "plumb-webhooks/1")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(d.Payload, now, keys...))
	req.Header.Set(webhook.DeliveryHeader, d.ID)
	req.Header.Set(webhook.EventHeader, d.Event)
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, webhook.ErrRefused) {
			return outcome{err: err.Error(), final: true}
		}
		if actx.Err() != nil && ctx.Err() == nil {
			return outcome{err: fmt.Sprintf("no answer within %s", s.cfg.Timeout)}
		}
		return outcome{err: err.Error()}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return outcome{code: resp.StatusCode, ok: true}
	}
	return outcome{code: resp.StatusCode, err: "HTTP " + resp.Status}
}
