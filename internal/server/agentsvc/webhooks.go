package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/webhook"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The webhook RPCs act on the caller's tenant only; a signing key is
// returned once, by RotateWebhookKey, and never logged.

func (s *Service) webhooks() error {
	if !s.cfg.Webhooks.Enabled() {
		return fmt.Errorf("webhooks are not available on this agentd (they need a secrets key): %w", secrets.ErrNoKey)
	}
	return nil
}

// webhookURL checks a RunRequest's webhook_url for the caller's tenant.
func (s *Service) webhookURL(ctx context.Context, raw string) error {
	if err := s.webhooks(); err != nil {
		return err
	}
	err := s.cfg.Webhooks.CheckURL(ctx, tenant.From(ctx), raw)
	if errors.Is(err, webhook.ErrRefused) {
		return InvalidField("webhook_url", "%v", err)
	}
	return err
}

// RotateWebhookKey makes a new signing key for the caller's tenant.
func (s *Service) RotateWebhookKey(ctx context.Context, req *plumbv1.RotateWebhookKeyRequest) (*plumbv1.RotateWebhookKeyResponse, error) {
	var grace time.Duration // the configured one
	if g := req.GetGrace(); g != nil {
		if err := g.CheckValid(); err != nil || g.AsDuration() < 0 || g.AsDuration() > 30*24*time.Hour {
			return nil, Status(InvalidField("grace", "grace must be 0..720h"))
		}
		if grace = g.AsDuration(); grace == 0 {
			grace = -1 // at once
		}
	}
	if err := s.webhooks(); err != nil {
		return nil, Status(err)
	}
	k, err := s.cfg.Webhooks.RotateKey(ctx, tenant.From(ctx), grace)
	if err != nil {
		return nil, s.status("rotate webhook key", err)
	}
	return &plumbv1.RotateWebhookKeyResponse{KeyId: k.ID, Key: k.Secret, CreateTime: timestamppb.New(k.Created), PreviousExpireTime: timestamppb.New(k.PreviousExpire)}, nil
}

var deliveryStatuses = map[store.DeliveryStatus]plumbv1.WebhookDeliveryStatus{
	store.DeliveryPending:    plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_PENDING,
	store.DeliveryDelivering: plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_DELIVERING,
	store.DeliverySucceeded:  plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED,
	store.DeliveryFailed:     plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED,
}

// ListWebhookDeliveries lists the caller's tenant's deliveries. A
// thread_id or run_id filter the caller's tenant does not own is
// NOT_FOUND, as in ListRuns.
func (s *Service) ListWebhookDeliveries(ctx context.Context, req *plumbv1.ListWebhookDeliveriesRequest) (*plumbv1.ListWebhookDeliveriesResponse, error) {
	q := store.DeliveryQuery{ThreadID: req.GetThreadId(), RunID: req.GetRunId(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if n := req.GetPageSize(); n < 0 || n > runhost.MaxPageSize {
		return nil, Status(InvalidField("page_size", "page_size must be 0..%d", runhost.MaxPageSize))
	}
	if st := req.GetStatus(); st != plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_UNSPECIFIED {
		for k, v := range deliveryStatuses {
			if v == st {
				q.Status = k
			}
		}
		if q.Status == "" {
			return nil, Status(InvalidField("status", "unknown status %d", st))
		}
	}
	if err := s.webhooks(); err != nil {
		return nil, Status(err)
	}
	list, next, err := s.cfg.Webhooks.List(ctx, tenant.From(ctx), q)
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, Status(InvalidField("page_token", "invalid page token"))
	}
	if err == nil && len(list) == 0 && req.GetPageToken() == "" {
		err = s.ownedFilter(ctx, req.GetThreadId(), req.GetRunId())
	}
	if err != nil {
		return nil, s.status("list webhook deliveries", err)
	}
	resp := &plumbv1.ListWebhookDeliveriesResponse{NextPageToken: next}
	for _, d := range list {
		pd := &plumbv1.WebhookDelivery{
			Id: d.ID, ThreadId: d.ThreadID, RunId: d.RunID, Event: d.Event, Url: d.URL, Status: deliveryStatuses[d.Status],
			Attempts: int32(d.Attempts), LastStatusCode: int32(d.LastStatusCode), LastError: d.LastError,
			CreateTime: timestamppb.New(d.Created), FinishTime: optTime(d.Finished), PayloadJson: string(d.Payload),
		}
		if d.Status == store.DeliveryPending {
			pd.NextAttemptTime = optTime(d.NextAttempt)
		}
		resp.Deliveries = append(resp.Deliveries, pd)
	}
	return resp, nil
}

// ownedFilter returns NOT_FOUND unless the caller's tenant owns the
// thread and the run a delivery listing names (either may be empty). It
// is asked only when the listing is empty: deliveries are rows of the
// caller's tenant, so a non-empty page proves ownership, and the
// deliveries of a deleted thread's runs stay listable by id.
func (s *Service) ownedFilter(ctx context.Context, threadID, runID string) error {
	if runID != "" {
		ri, err := s.host.GetRun(ctx, runID)
		if err != nil {
			return err
		}
		if err := ownedRun(ctx, ri, threadID); err != nil {
			return err
		}
	}
	if threadID != "" {
		return s.checkOwner(ctx, threadID)
	}
	return nil
}
