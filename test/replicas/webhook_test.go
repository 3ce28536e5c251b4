package replicas

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// hookReceiver is a real HTTP receiver that counts what it gets by
// delivery id and by run id.
type hookReceiver struct {
	*httptest.Server
	mu         sync.Mutex
	byDelivery map[string]int
	byRun      map[string]int
	bodies     [][]byte
	headers    []http.Header
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{byDelivery: map[string]int{}, byRun: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var p webhook.Payload
		_ = json.Unmarshal(body, &p)
		r.mu.Lock()
		r.byDelivery[req.Header.Get(webhook.DeliveryHeader)]++
		r.byRun[p.RunID]++
		r.bodies = append(r.bodies, body)
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// TestKilledReplicaWebhook: a detached run with a webhook starts on
// replica a, which is killed (SIGKILL) mid-run; replica b takes the run
// over and completes it, and the receiver gets exactly one delivery of
// the run's end — once by delivery id and once by run id — signed with the
// tenant's key, recorded as succeeded in the delivery log that either
// replica lists.
func TestKilledReplicaWebhook(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	rcv := newHookReceiver(t)
	key, err := f.a.c.RotateWebhookKey(f.ctx, &plumbv1.RotateWebhookKeyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	const sc = "webhook-killed"
	hung := f.policy.hang(sc, "a", 1)
	rs, err := f.a.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}, Detach: true, WebhookUrl: rcv.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	ra := follow("run on a", 0, rs.Recv)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)
	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	ra.end(t)

	rb := f.attach(t, f.b, thread, 0)
	evs := rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	runID := evs[len(evs)-1].GetRunId()

	var d *plumbv1.WebhookDelivery
	waitFor(t, "the run's webhook delivery to succeed", func() bool {
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		resp, err := f.b.c.ListWebhookDeliveries(ctx, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
		if err != nil {
			t.Fatalf("list deliveries: %v", err)
		}
		if n := len(resp.GetDeliveries()); n > 1 {
			t.Fatalf("run %s has %d deliveries; want one", runID, n)
		} else if n == 1 {
			d = resp.GetDeliveries()[0]
		}
		return d != nil && d.GetStatus() == plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED
	})
	if d.GetEvent() != "run.succeeded" || d.GetAttempts() != 1 || d.GetLastStatusCode() != http.StatusNoContent || d.GetThreadId() != thread {
		t.Errorf("delivery %v", d)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.byDelivery) != 1 || rcv.byDelivery[d.GetId()] != 1 || len(rcv.byRun) != 1 || rcv.byRun[runID] != 1 {
		t.Fatalf("the receiver got %v by delivery id and %v by run id; want exactly one delivery of run %s (%s)", rcv.byDelivery, rcv.byRun, runID, d.GetId())
	}
	if err := webhook.Verify(rcv.headers[0].Get(webhook.SignatureHeader), rcv.bodies[0], []string{key.GetKey()}, 5*time.Minute, time.Now()); err != nil {
		t.Fatalf("the delivery does not verify with the tenant's key: %v", err)
	}
}
