package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeWebhooks answers the webhook RPCs and records the requests.
type fakeWebhooks struct {
	plumbv1.UnimplementedAgentServiceServer
	mu     sync.Mutex
	rotate *plumbv1.RotateWebhookKeyRequest
	list   *plumbv1.ListWebhookDeliveriesRequest
}

func (f *fakeWebhooks) RotateWebhookKey(_ context.Context, r *plumbv1.RotateWebhookKeyRequest) (*plumbv1.RotateWebhookKeyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rotate = r
	return &plumbv1.RotateWebhookKeyResponse{KeyId: "whk_1", Key: "whsec_abc", PreviousExpireTime: timestamppb.New(time.Unix(1700000000, 0))}, nil
}

func (f *fakeWebhooks) ListWebhookDeliveries(_ context.Context, r *plumbv1.ListWebhookDeliveriesRequest) (*plumbv1.ListWebhookDeliveriesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = r
	return &plumbv1.ListWebhookDeliveriesResponse{Deliveries: []*plumbv1.WebhookDelivery{{
		Id: "whd_1", RunId: "run-1", Event: "run.failed", Status: plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_PENDING,
		Attempts: 2, LastStatusCode: 500, LastError: "HTTP 500", Url: "https://hooks.example.com/x",
	}}, NextPageToken: "tok"}, nil
}

func TestWebhooksCommands(t *testing.T) {
	f := &fakeWebhooks{}
	addr := serve(t, f)
	tests := []struct {
		name  string
		args  []string
		out   string
		err   string
		check func(t *testing.T)
	}{
		{name: "rotate", args: []string{"webhooks", "rotate-key", "--grace", "1h"}, out: "whsec_abc\n", check: func(t *testing.T) {
			if f.rotate.GetGrace().AsDuration() != time.Hour {
				t.Fatalf("grace sent %v", f.rotate.GetGrace())
			}
		}},
		{name: "deliveries", args: []string{"webhooks", "deliveries", "--run", "run-1", "--status", "failed"}, out: "whd_1  run-1  run.failed  pending  2         500 HTTP 500", check: func(t *testing.T) {
			if f.list.GetRunId() != "run-1" || f.list.GetStatus() != plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED {
				t.Fatalf("list request %v", f.list)
			}
		}},
		{name: "bad status", args: []string{"webhooks", "deliveries", "--status", "done"}, err: "--status"},
		{name: "bad grace", args: []string{"webhooks", "rotate-key", "--grace", "soon"}, err: "--grace"},
		{name: "no verb", args: []string{"webhooks"}, err: "want rotate-key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{}
			err := c.run(t.Context(), addr, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !strings.Contains(c.out.String(), tc.out) {
				t.Fatalf("out %q, err %v; want %q", c.out.String(), err, tc.out)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			tc.check(t)
		})
	}
}
