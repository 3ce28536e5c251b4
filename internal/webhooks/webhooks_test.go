package webhooks_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/webhooks"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// hangGuard bounds every wait; it tells a hang from a slow machine.
const hangGuard = 2 * time.Minute

// receiver is a real HTTP receiver whose n-th answer (from 1) answer
// decides: a status code, or 0 to hang until the request is abandoned.
type receiver struct {
	*httptest.Server
	answer func(n int) int

	mu   sync.Mutex
	reqs []received
}

type received struct {
	header http.Header
	body   []byte
	status int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	r := &receiver{answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.reqs) + 1
		code := r.answer(n)
		r.reqs = append(r.reqs, received{header: req.Header.Clone(), body: body, status: code})
		r.mu.Unlock()
		if code == 0 {
			<-req.Context().Done() // hang until the sender gives up
			return
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

type env struct {
	svc   *webhooks.Service
	store *sqlite.Store
}

// newEnv builds the service over a real SQLite store, with quick retries,
// and runs its delivery loop until the test ends.
func newEnv(t *testing.T, policy webhook.Policy, retryFor, timeout time.Duration) *env {
	t.Helper()
	return newEnvPolling(t, policy, retryFor, timeout, 20*time.Millisecond)
}

// newEnvPolling is newEnv with the delivery loop's poll interval.
func newEnvPolling(t *testing.T, policy webhook.Policy, retryFor, timeout, poll time.Duration) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	key, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := webhooks.New(webhooks.Config{
		Store: st, Threads: runhost.DurableThreads(st), Sealer: secrets.NewSealer(key, nil), Policy: policy,
		RetryFor: retryFor, Timeout: timeout, PollInterval: poll, Holder: "replica-a",
	}, webhooks.WithLogger(zaptest.NewLogger(t)), webhooks.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &env{svc: svc, store: st}
}

var loopback = webhook.Policy{AllowHTTP: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// end is a finished run of tenant "acme" whose request named url.
func end(runID, url string, p agent.Payload) runhost.RunEnd {
	started := time.Now().Add(-time.Minute)
	return runhost.RunEnd{ThreadID: "th-" + runID, RunID: runID, Payload: p, Time: time.Now(), Thread: &agent.ThreadData{
		Thread:  agent.Thread{ID: "th-" + runID, Tenant: "acme"},
		LastRun: &agent.RunRecord{RunID: runID, Spec: agent.RunSpec{Agent: "support", WebhookURL: url}, StartedAt: started, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15}},
	}}
}

// waitDelivery polls the run's delivery until done says so.
func (e *env) waitDelivery(t *testing.T, runID string, done func(store.Delivery) bool) store.Delivery {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		list, _, err := e.svc.List(context.Background(), "acme", store.DeliveryQuery{RunID: runID})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 1 {
			t.Fatalf("run %s has %d deliveries; want one", runID, len(list))
		}
		if len(list) == 1 && done(list[0]) {
			return list[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the delivery of run %s (now %+v)", runID, list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func finished(d store.Delivery) bool {
	return d.Status == store.DeliverySucceeded || d.Status == store.DeliveryFailed
}

// TestRecordWakesTheLoop: a delivery recorded on this replica is sent at
// once, not at the loop's next poll (here an hour away, after the first
// poll at start).
func TestRecordWakesTheLoop(t *testing.T) {
	rcv := newReceiver(t, func(int) int { return 204 })
	e := newEnvPolling(t, loopback, time.Hour, time.Second, time.Hour)
	if _, err := e.svc.RotateKey(context.Background(), "acme", 0); err != nil {
		t.Fatal(err)
	}
	for _, runID := range []string{"run-wake-1", "run-wake-2"} {
		if err := e.svc.OnRunEnd(context.Background(), end(runID, rcv.URL+"/hook", agent.RunFinished{Status: agent.StatusCompleted})); err != nil {
			t.Fatal(err)
		}
		if d := e.waitDelivery(t, runID, finished); d.Status != store.DeliverySucceeded {
			t.Fatalf("delivery = %+v", d)
		}
	}
}

// TestDeliveries: real receivers that succeed, answer 500 and then 200,
// hang, and fail forever; every attempt is signed, retried with the same
// delivery id, and recorded.
func TestDeliveries(t *testing.T) {
	tests := []struct {
		name     string
		answer   func(n int) int
		retryFor time.Duration
		// want
		status        store.DeliveryStatus
		attempts      func(int) bool
		lastCode      int
		errorContains string
	}{
		{"succeeds", func(int) int { return 204 }, time.Hour, store.DeliverySucceeded, func(n int) bool { return n == 1 }, 204, ""},
		{"500 then 200", func(n int) int { return map[bool]int{true: 500, false: 200}[n == 1] }, time.Hour, store.DeliverySucceeded, func(n int) bool { return n == 2 }, 200, ""},
		{"hangs then 200", func(n int) int { return map[bool]int{true: 0, false: 200}[n == 1] }, time.Hour, store.DeliverySucceeded, func(n int) bool { return n == 2 }, 200, ""},
		{"fails forever", func(int) int { return 500 }, time.Second, store.DeliveryFailed, func(n int) bool { return n >= 2 }, 500, "gave up"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, tc.answer)
			e := newEnv(t, loopback, tc.retryFor, time.Second)
			k, err := e.svc.RotateKey(context.Background(), "acme", 0)
			if err != nil {
				t.Fatal(err)
			}
			runID := "run-" + strings.ReplaceAll(tc.name, " ", "-")
			if err := e.svc.OnRunEnd(context.Background(), end(runID, rcv.URL+"/hook", agent.RunFinished{Status: agent.StatusCompleted, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15}})); err != nil {
				t.Fatal(err)
			}
			d := e.waitDelivery(t, runID, finished)
			if d.Status != tc.status || !tc.attempts(d.Attempts) || d.LastStatusCode != tc.lastCode || !strings.Contains(d.LastError, tc.errorContains) || d.Finished.IsZero() {
				t.Fatalf("delivery = %+v; want status %s, last code %d, error with %q", d, tc.status, tc.lastCode, tc.errorContains)
			}
			reqs := rcv.received()
			if len(reqs) != d.Attempts {
				t.Fatalf("the receiver got %d requests; the log says %d attempts", len(reqs), d.Attempts)
			}
			for i, r := range reqs {
				if got := r.header.Get(webhook.DeliveryHeader); got != d.ID {
					t.Errorf("request %d: delivery id %q; want %q on every retry", i, got, d.ID)
				}
				if err := webhook.Verify(r.header.Get(webhook.SignatureHeader), r.body, []string{k.Secret}, 5*time.Minute, time.Now()); err != nil {
					t.Errorf("request %d: Verify: %v", i, err)
				}
				checkSignature(t, r, k.Secret)
			}
			var p webhook.Payload
			if err := json.Unmarshal(reqs[0].body, &p); err != nil {
				t.Fatal(err)
			}
			if p.Agent != "support" || d.Agent != p.Agent {
				t.Fatalf("payload agent %q, recorded agent %q; want the run's, support (per-agent retention selects by it)", p.Agent, d.Agent)
			}
			if p.ID != d.ID || p.Type != webhook.RunSucceeded || p.RunID != runID || p.ThreadID != "th-"+runID || p.Status != "COMPLETED" ||
				p.Usage == nil || p.Usage.TotalTokens != 15 || p.StartedAt == nil || p.FinishedAt == nil || reqs[0].header.Get(webhook.EventHeader) != "run.succeeded" {
				t.Fatalf("payload = %s", reqs[0].body)
			}
		})
	}
}

// checkSignature recomputes the first v1 value independently of Verify.
func checkSignature(t *testing.T, r received, key string) {
	t.Helper()
	var ts, v1 string
	for _, part := range strings.Split(r.header.Get(webhook.SignatureHeader), ",") {
		k, v, _ := strings.Cut(part, "=")
		switch {
		case k == "t":
			ts = v
		case k == "v1" && v1 == "":
			v1 = v
		}
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(ts + "." + string(r.body)))
	if want := hex.EncodeToString(m.Sum(nil)); v1 != want {
		t.Errorf("v1 = %s; an independent HMAC gives %s", v1, want)
	}
}

// TestOncePerEvent: the same end reported twice (the replica that ran
// the run, and one settling its lease) is one delivery, sent once.
func TestOncePerEvent(t *testing.T) {
	rcv := newReceiver(t, func(int) int { return 200 })
	e := newEnv(t, loopback, time.Hour, time.Second)
	if _, err := e.svc.RotateKey(context.Background(), "acme", 0); err != nil {
		t.Fatal(err)
	}
	ev := end("run-twice", rcv.URL, agent.RunFinished{Status: agent.StatusCancelled})
	for range 3 {
		if err := e.svc.OnRunEnd(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	d := e.waitDelivery(t, "run-twice", finished)
	if d.Status != store.DeliverySucceeded || d.Event != "run.cancelled" || len(rcv.received()) != 1 {
		t.Fatalf("delivery %+v, %d requests; want one succeeded run.cancelled", d, len(rcv.received()))
	}
}

// TestInterrupted: a run.interrupted carries the interrupt's requests, so
// that an approval UI can be built on it.
func TestInterrupted(t *testing.T) {
	rcv := newReceiver(t, func(int) int { return 200 })
	e := newEnv(t, loopback, time.Hour, time.Second)
	if _, err := e.svc.RotateKey(context.Background(), "acme", 0); err != nil {
		t.Fatal(err)
	}
	in := agent.Interrupted{InterruptID: "int-1", Requests: []agent.InterruptRequest{{
		ToolCallID: "call-1", AgentPath: "main", Kind: agent.InterruptApproval, ToolName: "execute", Args: `{"command":"rm -rf /tmp/x"}`,
		Description: "approve?", Allowed: []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject},
	}}}
	if err := e.svc.OnRunEnd(context.Background(), end("run-int", rcv.URL, in)); err != nil {
		t.Fatal(err)
	}
	e.waitDelivery(t, "run-int", finished)
	var p webhook.Payload
	if err := json.Unmarshal(rcv.received()[0].body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != webhook.RunInterrupted || p.Status != "INTERRUPTED" || p.Interrupt == nil || p.Interrupt.ID != "int-1" || len(p.Interrupt.Requests) != 1 {
		t.Fatalf("payload %+v", p)
	}
	r := p.Interrupt.Requests[0]
	if r.ToolName != "execute" || string(r.Args) != `{"command":"rm -rf /tmp/x"}` || fmt.Sprint(r.AllowedDecisions) != "[approve reject]" || r.Kind != "APPROVAL" || r.ToolCallID != "call-1" {
		t.Fatalf("request %+v", r)
	}
}

// TestRotation: during the grace both keys sign (two v1 values, each
// verifies alone); a rotation without grace leaves the new key only.
func TestRotation(t *testing.T) {
	rcv := newReceiver(t, func(int) int { return 200 })
	e := newEnv(t, loopback, time.Hour, time.Second)
	ctx := context.Background()
	k1, err := e.svc.RotateKey(ctx, "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := e.svc.RotateKey(ctx, "acme", time.Hour)
	if err != nil || k2.Secret == k1.Secret || !k2.PreviousExpire.After(time.Now().Add(50*time.Minute)) {
		t.Fatalf("second key %+v, %v", k2, err)
	}
	if err := e.svc.OnRunEnd(ctx, end("run-rot1", rcv.URL, agent.RunFinished{Status: agent.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	e.waitDelivery(t, "run-rot1", finished)
	r := rcv.received()[0]
	if n := strings.Count(r.header.Get(webhook.SignatureHeader), "v1="); n != 2 {
		t.Fatalf("signature %q; want two v1 values during the grace", r.header.Get(webhook.SignatureHeader))
	}
	for _, k := range []string{k1.Secret, k2.Secret} {
		if err := webhook.Verify(r.header.Get(webhook.SignatureHeader), r.body, []string{k}, time.Minute, time.Now()); err != nil {
			t.Fatalf("Verify with one key: %v", err)
		}
	}
	k3, err := e.svc.RotateKey(ctx, "acme", -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.OnRunEnd(ctx, end("run-rot2", rcv.URL, agent.RunFinished{Status: agent.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	e.waitDelivery(t, "run-rot2", finished)
	r = rcv.received()[1]
	h := r.header.Get(webhook.SignatureHeader)
	if strings.Count(h, "v1=") != 1 || webhook.Verify(h, r.body, []string{k3.Secret}, time.Minute, time.Now()) != nil ||
		!errors.Is(webhook.Verify(h, r.body, []string{k1.Secret, k2.Secret}, time.Minute, time.Now()), webhook.ErrNoMatch) {
		t.Fatalf("after a rotation without grace the signature is %q; want k3's only", h)
	}
}

// TestTenancyAndPolicy: another tenant lists nothing; a tenant without a
// key cannot name a URL (and its deliveries wait for one); the policy
// refuses loopback by default, also through a name that resolves there,
// and a delivery to a refused address fails without a request.
func TestTenancyAndPolicy(t *testing.T) {
	rcv := newReceiver(t, func(int) int { return 200 })
	ctx := context.Background()
	e := newEnv(t, loopback, time.Hour, time.Second)
	if err := e.svc.CheckURL(ctx, "acme", rcv.URL); !errors.Is(err, store.ErrNoWebhookKey) {
		t.Fatalf("CheckURL without a key: %v; want ErrNoWebhookKey", err)
	}
	// Recorded anyway (an agent's webhook), it waits for a key.
	if err := e.svc.OnRunEnd(ctx, end("run-nokey", rcv.URL, agent.RunFinished{Status: agent.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	d := e.waitDelivery(t, "run-nokey", func(d store.Delivery) bool { return d.Attempts >= 1 && d.Status == store.DeliveryPending })
	if !strings.Contains(d.LastError, "no webhook signing key") || len(rcv.received()) != 0 {
		t.Fatalf("delivery without a key = %+v", d)
	}
	if _, err := e.svc.RotateKey(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	e.waitDelivery(t, "run-nokey", func(d store.Delivery) bool { return d.Status == store.DeliverySucceeded })
	if err := e.svc.CheckURL(ctx, "acme", rcv.URL); err != nil {
		t.Fatalf("CheckURL with a key: %v", err)
	}
	if list, _, err := e.svc.List(ctx, "other", store.DeliveryQuery{}); err != nil || len(list) != 0 {
		t.Fatalf("another tenant lists %d deliveries, %v", len(list), err)
	}
	if err := e.svc.CheckURL(ctx, "other", rcv.URL); !errors.Is(err, store.ErrNoWebhookKey) {
		t.Fatalf("another tenant's CheckURL: %v; want ErrNoWebhookKey (keys are per tenant)", err)
	}

	strict := newEnv(t, webhook.Policy{AllowHTTP: true}, time.Hour, time.Second)
	if _, err := strict.svc.RotateKey(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	byName := strings.Replace(rcv.URL, "127.0.0.1", "localhost", 1)
	for _, u := range []string{rcv.URL, byName, "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/"} {
		if err := strict.svc.CheckURL(ctx, "acme", u); !errors.Is(err, webhook.ErrRefused) {
			t.Errorf("CheckURL(%s) = %v; want ErrRefused", u, err)
		}
	}
	// Recorded anyway (say the policy changed since), the dial refuses it.
	if err := strict.svc.OnRunEnd(ctx, end("run-refused", byName, agent.RunFinished{Status: agent.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	d = strict.waitDelivery(t, "run-refused", finished)
	if d.Status != store.DeliveryFailed || d.Attempts != 1 || !strings.Contains(d.LastError, "refused") || len(rcv.received()) != 1 {
		t.Fatalf("delivery to a refused address = %+v (receiver got %d requests; want only the earlier one)", d, len(rcv.received()))
	}
}
