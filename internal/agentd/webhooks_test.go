package agentd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// hookStack is one agentd on SQLite served as cmd/agentd serves it
// (ServiceConfig, the webhook delivery loop running).
type hookStack struct {
	model *modeltest.Server
	c     plumbv1.AgentServiceClient
}

func startHookStack(t *testing.T, extra string) *hookStack {
	t.Helper()
	s := &hookStack{model: modeltest.New(t)}
	doc := `version: 2
storage: {sqlite_path: ` + t.TempDir() + `/agentd.db}
models:
  scripted: {base_url: ` + s.model.URL() + `, api_key_env: TEST_MODEL_KEY, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
backends: {default: state}
` + extra
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t)
	core, err := Build(context.Background(), cfg, Options{Logger: lg, Env: func(k string) string {
		if k == "TEST_MODEL_KEY" {
			return "test-key"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	scfg := core.ServiceConfig("replica-1")
	svc, err := agentsvc.New(scfg, agentsvc.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWebhooks := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		scfg.Webhooks.Run(wctx)
	}()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(daemon.ServerAuth(nil)...)
	plumbv1.RegisterAgentServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.c = plumbv1.NewAgentServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Shutdown(ctx)
		stopWebhooks()
		<-wdone
		gs.Stop()
		<-served
		core.Close()
	})
	return s
}

func tenantCtx(t *testing.T, name string) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, tenant.MetadataKey, name)
}

// TestWebhookOneAgentd: on one agentd on SQLite, a run with a webhook_url
// ends with one signed delivery to it and one to its agent's webhook that
// wants the event (not to the one that does not), listed as succeeded for
// its tenant only; the URL and the key are checked when the run is asked
// for.
func TestWebhookOneAgentd(t *testing.T) {
	var (
		mu         sync.Mutex
		bodies     []string
		sigs       []string
		agentHooks []string
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/hook" {
			mu.Lock()
			agentHooks = append(agentHooks, r.URL.Path)
			mu.Unlock()
			return
		}
		mu.Lock()
		bodies, sigs = append(bodies, string(b)), append(sigs, r.Header.Get(webhook.SignatureHeader))
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)
	s := startHookStack(t, "secrets: {key: "+secretsKey(t)+"}\nwebhooks: {allow_http: true, allow: [127.0.0.0/8]}\n"+
		"agents: {main: {webhooks: [{url: '"+rcv.URL+"/agent', events: [run.succeeded]}, {url: '"+rcv.URL+"/never', events: [run.failed]}]}}\n")
	s.model.Script("main", modeltest.Text("done"))
	acme := tenantCtx(t, "acme")

	run := func(ctx context.Context, url string) ([]*plumbv1.Event, error) {
		stream, err := s.c.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "hi"}}, WebhookUrl: url})
		if err != nil {
			return nil, err
		}
		var evs []*plumbv1.Event
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				return evs, nil
			}
			if err != nil {
				return evs, err
			}
			evs = append(evs, m.GetEvent())
		}
	}
	if _, err := run(acme, rcv.URL); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "RotateWebhookKey") {
		t.Fatalf("a webhook without a signing key: %v; want FAILED_PRECONDITION", err)
	}
	key, err := s.c.RotateWebhookKey(acme, &plumbv1.RotateWebhookKeyRequest{})
	if err != nil || !strings.HasPrefix(key.GetKey(), webhook.KeyPrefix) {
		t.Fatalf("rotate = %v, %v", key, err)
	}
	for _, bad := range []string{"http://169.254.169.254/latest", "ftp://x", "http://10.0.0.1/"} {
		_, err := run(acme, bad)
		if vs := pbconv.FieldViolations(err); status.Code(err) != codes.InvalidArgument || len(vs) != 1 || vs[0].Field != "webhook_url" {
			t.Errorf("webhook_url %s: %v; want INVALID_ARGUMENT on webhook_url", bad, err)
		}
	}
	evs, err := run(acme, rcv.URL+"/hook")
	if err != nil || evs[len(evs)-1].GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run: %v", err)
	}
	runID := evs[0].GetRunId()
	var d *plumbv1.WebhookDelivery
	deadline := time.Now().Add(2 * time.Minute)
	for d.GetStatus() != plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED {
		if time.Now().After(deadline) {
			t.Fatalf("the delivery did not succeed: %v", d)
		}
		time.Sleep(20 * time.Millisecond)
		list, err := s.c.ListWebhookDeliveries(acme, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
		if err != nil || len(list.GetDeliveries()) > 2 {
			t.Fatalf("list = %v, %v", list, err)
		}
		done := 0
		for _, x := range list.GetDeliveries() {
			if x.GetStatus() == plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED {
				done++
			}
			if strings.HasSuffix(x.GetUrl(), "/hook") {
				d = x
			}
		}
		if done < 2 {
			d = nil
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || len(agentHooks) != 1 || agentHooks[0] != "/agent" {
		t.Fatalf("the receiver got %d requests for the run's URL and %v for the agent's; want 1 and [/agent]", len(bodies), agentHooks)
	}
	if err := webhook.Verify(sigs[0], []byte(bodies[0]), []string{key.GetKey()}, time.Minute, time.Now()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var p webhook.Payload
	if err := json.Unmarshal([]byte(bodies[0]), &p); err != nil || p.Type != webhook.RunSucceeded || p.RunID != runID || p.Agent != "main" || p.ID != d.GetId() || bodies[0] != d.GetPayloadJson() {
		t.Fatalf("payload %s (%v); delivery %v", bodies[0], err, d)
	}
	beta := tenantCtx(t, "beta")
	if list, err := s.c.ListWebhookDeliveries(beta, &plumbv1.ListWebhookDeliveriesRequest{}); err != nil || len(list.GetDeliveries()) != 0 {
		t.Fatalf("another tenant lists %v, %v", list, err)
	}
	// Naming acme's run or thread, beta finds nothing there: NOT_FOUND,
	// as for a run or thread that does not exist.
	for _, q := range []*plumbv1.ListWebhookDeliveriesRequest{
		{RunId: runID}, {ThreadId: evs[0].GetThreadId()}, {RunId: "01NOSUCHRUN"}, {ThreadId: "01NOSUCHTHREAD"},
	} {
		if _, err := s.c.ListWebhookDeliveries(beta, q); status.Code(err) != codes.NotFound {
			t.Errorf("tenant beta lists the deliveries of %v: %v; want NOT_FOUND", q, err)
		}
	}
	// acme's own thread still lists them, and the deliveries of a
	// deleted thread stay listable by run id.
	if list, err := s.c.ListWebhookDeliveries(acme, &plumbv1.ListWebhookDeliveriesRequest{ThreadId: evs[0].GetThreadId()}); err != nil || len(list.GetDeliveries()) != 2 {
		t.Fatalf("acme lists its thread's deliveries: %v, %v; want 2", list, err)
	}
	if _, err := s.c.DeleteThread(acme, &plumbv1.DeleteThreadRequest{ThreadId: evs[0].GetThreadId()}); err != nil {
		t.Fatal(err)
	}
	if list, err := s.c.ListWebhookDeliveries(acme, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID}); err != nil || len(list.GetDeliveries()) != 2 {
		t.Fatalf("acme lists a deleted thread's run's deliveries: %v, %v; want 2", list, err)
	}
	if _, err := s.c.ListWebhookDeliveries(acme, &plumbv1.ListWebhookDeliveriesRequest{PageToken: "nope!"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad page token: %v", err)
	}

	nokey := startHookStack(t, "")
	if _, err := nokey.c.RotateWebhookKey(tenantCtx(t, "acme"), &plumbv1.RotateWebhookKeyRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("rotate without a secrets key: %v; want FAILED_PRECONDITION", err)
	}
}

// TestWebhookOfAnotherAgent: the end of a run of a primary agent other
// than main is reported too (the root agent's events carry its own name
// as their path): its agents.<name>.webhooks entry and the run's
// webhook_url each get one delivery naming the agent.
func TestWebhookOfAnotherAgent(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
		p     webhook.Payload
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
		_ = json.Unmarshal(b, &p)
	}))
	t.Cleanup(rcv.Close)
	s := startHookStack(t, "secrets: {key: "+secretsKey(t)+"}\nwebhooks: {allow_http: true, allow: [127.0.0.0/8]}\n"+
		"agents: {support: {webhooks: [{url: '"+rcv.URL+"/agent'}]}}\n")
	s.model.Script("support", modeltest.Text("done"))
	acme := tenantCtx(t, "acme")
	if _, err := s.c.RotateWebhookKey(acme, &plumbv1.RotateWebhookKeyRequest{}); err != nil {
		t.Fatal(err)
	}
	stream, err := s.c.Run(acme, &plumbv1.RunRequest{Agent: "support", Input: []*plumbv1.InputMessage{{Content: "hi"}}, WebhookUrl: rcv.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f := m.GetEvent().GetRunFinished(); f != nil && f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("run ended %v", f)
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		mu.Lock()
		n := len(paths)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %v; want the agent's and the run's deliveries", paths)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 2 || !slices.Contains(paths, "/agent") || !slices.Contains(paths, "/hook") || p.Agent != "support" || p.Type != webhook.RunSucceeded {
		t.Fatalf("the receiver got %v, the last payload %+v; want /agent and /hook once each, run.succeeded of agent support", paths, p)
	}
}

// TestWebhookConfig: the webhook settings and agents' webhooks are
// checked when agentd starts.
func TestWebhookConfig(t *testing.T) {
	key := "secrets: {key: " + secretsKey(t) + "}\n"
	tests := []struct {
		name, extra, want string
	}{
		{"loopback agent URL", key + "agents: {main: {webhooks: [{url: 'https://127.0.0.1/x'}]}}\n", "agents.main.webhooks[0].url"},
		{"http agent URL", key + "agents: {main: {webhooks: [{url: 'http://hooks.example.com/x'}]}}\n", "agents.main.webhooks[0].url"},
		{"unknown event", key + "agents: {main: {webhooks: [{url: 'https://hooks.example.com/x', events: [run.done]}]}}\n", "agents.main.webhooks[0].events[0]"},
		{"no secrets key", "agents: {main: {webhooks: [{url: 'https://hooks.example.com/x'}]}}\n", "need a secrets key"},
		{"bad allow entry", key + "webhooks: {allow: ['http://x']}\n", "webhooks.allow"},
		{"negative timeout", key + "webhooks: {timeout: -1s}\n", "webhooks.timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "version: 2\nstorage: {sqlite_path: " + t.TempDir() + "/a.db}\nmodels: {m: {base_url: 'http://127.0.0.1:1/v1', model: x}}\ndefaults: {model: m}\nbackends: {default: state}\n" + tc.extra
			cfg, err := Parse([]byte(doc))
			if err == nil {
				var core *Agentd
				core, err = Build(context.Background(), cfg, Options{Env: func(string) string { return "" }})
				if core != nil {
					core.Close()
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config error %v; want one naming %s", err, tc.want)
			}
		})
	}
}
