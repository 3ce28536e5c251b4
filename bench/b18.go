package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/webhooks"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// hookReceiver is a real HTTP receiver on loopback: it verifies each
// webhook's signature and reports the arrival of each request by its
// bench id (the run id of a webhook, a header of the plain POST).
type hookReceiver struct {
	url  string
	srv  *http.Server
	keys []string // accepted signing keys (set before deliveries)

	mu      sync.Mutex
	waiting map[string]chan error
}

func newHookReceiver() (*hookReceiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{url: "http://" + lis.Addr().String() + "/hook", waiting: map[string]chan error{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: time.Minute}
	go func() { _ = r.srv.Serve(lis) }()
	return r, nil
}

// expect registers id before its request is sent; the channel gets nil
// when it arrives verified, or why not.
func (r *hookReceiver) expect(id string) chan error {
	ch := make(chan error, 1)
	r.mu.Lock()
	r.waiting[id] = ch
	r.mu.Unlock()
	return ch
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	id := req.Header.Get("Bench-Id")
	if id == "" && err == nil { // a webhook: verify it, name it by its run
		var p webhook.Payload
		if err = webhook.Verify(req.Header.Get("Plumb-Signature"), body, r.keys, 5*time.Minute, time.Now()); err == nil {
			err = json.Unmarshal(body, &p)
		}
		id = p.RunID
	}
	r.mu.Lock()
	ch := r.waiting[id]
	delete(r.waiting, id)
	r.mu.Unlock()
	if ch != nil {
		ch <- err
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *hookReceiver) close() { _ = r.srv.Close() }

// wait waits for ch's request.
func wait(ctx context.Context, ch chan error) error {
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the receiver got nothing: %w", ctx.Err())
	}
}

// hookService is agentd's webhook service over a SQLite store of its own
// (the delivery loop running), with tenant "bench"'s signing key.
func hookService(ctx context.Context, dir string, poll time.Duration) (*webhooks.Service, string, func(), error) {
	st, err := sqlite.Open(ctx, filepath.Join(dir, fmt.Sprintf("agentd-%v.db", poll)), sqlite.Options{})
	if err != nil {
		return nil, "", nil, err
	}
	raw := make([]byte, 32)
	_, _ = crand.Read(raw)
	key, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		st.Close()
		return nil, "", nil, err
	}
	loopback := webhook.Policy{AllowHTTP: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	svc, err := webhooks.New(webhooks.Config{Store: st, Threads: runhost.DurableThreads(st), Sealer: secrets.NewSealer(key, nil),
		Policy: loopback, PollInterval: poll, Holder: "bench"})
	if err != nil {
		st.Close()
		return nil, "", nil, err
	}
	k, err := svc.RotateKey(ctx, "bench", 0)
	if err != nil {
		st.Close()
		return nil, "", nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(lctx) }()
	stop := func() { cancel(); <-done; st.Close() }
	return svc, k.Secret, stop, nil
}

// runB18 times a run's end → a real HTTP receiver got its signed POST
// (issue 22 item 4): agentd's webhook service records the delivery
// (OnRunEnd, what the run host calls when a run ends) in a SQLite store,
// which wakes its delivery loop; the loop claims, signs and sends it.
// Against a plain HTTP POST of a body of the same size to the same
// receiver.
func runB18(ctx context.Context, e *env) ([]Row, error) {
	dir, err := os.MkdirTemp("", "plumb-bench-webhooks")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rcv, err := newHookReceiver()
	if err != nil {
		return nil, err
	}
	defer rcv.close()
	svc, key, stop, err := hookService(ctx, dir, webhooks.DefaultPollInterval)
	if err != nil {
		return nil, err
	}
	defer stop()
	rcv.keys = []string{key}

	seq := 0
	ours := &probe{name: "webhook", warm: 1, n: e.scale(20, 4)}
	ours.f = func(ctx context.Context) error {
		seq++
		runID := fmt.Sprintf("run-bench-%d", seq)
		ch := rcv.expect(runID)
		started := time.Now().Add(-time.Second)
		end := runhost.RunEnd{ThreadID: "th-" + runID, RunID: runID, Time: time.Now(),
			Payload: agent.RunFinished{Status: agent.StatusCompleted, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15}},
			Thread: &agent.ThreadData{Thread: agent.Thread{ID: "th-" + runID, Tenant: "bench"},
				LastRun: &agent.RunRecord{RunID: runID, Spec: agent.RunSpec{WebhookURL: rcv.url}, StartedAt: started}}}
		if err := svc.OnRunEnd(ctx, end); err != nil {
			return err
		}
		return wait(ctx, ch)
	}
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), 400)
	base := &probe{name: "plain POST", warm: 1, n: ours.n}
	base.f = func(ctx context.Context) error {
		seq++
		id := fmt.Sprintf("post-%d", seq)
		ch := rcv.expect(id)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rcv.url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Bench-Id", id)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			return fmt.Errorf("plain POST: status %d", res.StatusCode)
		}
		return wait(ctx, ch)
	}
	if err := interleave(ctx, ours.n, ours, base); err != nil {
		return nil, err
	}
	post := latencyRow("", "", unitMs, base.got)
	r := latencyRow("B18", "webhook delivery: run end → the receiver got the signed POST", unitMs, ours.got)
	r.vsLatency("a plain HTTP POST to the same receiver", post)
	r.Target, r.Verdict = "— (info: issue 22 sets no target)", verdictInfo
	r.note("OnRunEnd (what the run host calls at a run's end: the delivery recorded in a SQLite thread store, which wakes the replica's delivery loop) until a real HTTP receiver on loopback had the POST and verified its Plumb-Signature; "+
		"agentd's default poll (%v) only finds retries and deliveries recorded by another replica", webhooks.DefaultPollInterval)
	return []Row{r}, nil
}
