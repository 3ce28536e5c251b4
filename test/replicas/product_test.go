package replicas

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/webhook"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The tenants of a product deployment (--credentials-file): default runs
// most scenarios; other checks tenancy; ttl has a retention TTL of a few
// seconds (so only its threads are swept); meter is counted alone; quota
// may run one run at a time.
const (
	tenantDefault = "default"
	tenantOther   = "other"
	tenantTTL     = "ttl"
	tenantMeter   = "meter"
	tenantQuota   = "quota"
)

// ttlIdle is tenant ttl's retention.threads_idle.
const ttlIdle = 3 * time.Second

// briefAgent is an agent with retention TTLs of its own
// (agents.<name>.retention): 2 checkpoints, webhook deliveries and run
// event logs kept a second.
const briefAgent = "brief"

// The scenarios productTurn answers itself (the others go to policy.turn).
const (
	// skillScenario + name: read_file /skills/<name>/SKILL.md, then
	// execute `ls` of the skill's copy in the box, then text.
	skillScenario = "skill:"
	// usageScenario: one text answer reporting usageTurn's tokens.
	usageScenario = "usage:"
)

// usageTurn is what every usage scenario's model call reports.
var usageTurn = modeltest.Usage{Prompt: 1000, Completion: 20, Cached: 300, Reasoning: 5}

// product is issue 20's product surface on one deployment: one agentd on
// SQLite (replicas holds one) or two replicas on one PostgreSQL. Calls
// are spread over the replicas with at.
type product struct {
	*fleet
	mode     string
	replicas []*replica
	// clients are each tenant's clients, one per replica.
	clients map[string][]plumbv1.AgentServiceClient
	// key is tenant default's webhook signing key.
	key string
}

// at returns replica i, round robin: with two replicas, consecutive
// indexes name different replicas.
func (p *product) at(i int) *replica { return p.replicas[i%len(p.replicas)] }

// as returns tenant's client of replica i (round robin).
func (p *product) as(tenant string, i int) plumbv1.AgentServiceClient {
	cs := p.clients[tenant]
	return cs[i%len(cs)]
}

// productTurn answers the product scenarios and hands every other call to
// the fleet policy.
func productTurn(p *policy) func(modeltest.Request) modeltest.Turn {
	return func(r modeltest.Request) modeltest.Turn {
		msgs := r.Body.Messages
		scenario, step := "", 0
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == "user" {
				scenario = msgs[i].Content
				break
			}
			if msgs[i].Role == "tool" {
				step++
			}
		}
		switch {
		case strings.HasPrefix(scenario, skillScenario):
			name := strings.TrimPrefix(scenario, skillScenario)
			switch step {
			case 0:
				return modeltest.Calls(modeltest.Call{ID: "call-read", Name: "read_file", Args: fmt.Sprintf(`{"file_path":"/skills/%s/SKILL.md"}`, name)})
			case 1:
				return modeltest.Calls(modeltest.Call{ID: "call-ls", Name: "execute", Args: fmt.Sprintf(`{"command":"ls -R .skills/%s"}`, name)})
			}
			return modeltest.Text("done " + scenario)
		case strings.HasPrefix(scenario, usageScenario):
			u := usageTurn
			return modeltest.Turn{Text: []string{"counted"}, Usage: &u}
		}
		return p.turn(r)
	}
}

// startProduct starts a deployment of mode "sqlite" (one agentd) or "pg"
// (two replicas on one PostgreSQL), each agentd with webhooks (loopback
// 127.0.0.1 allowed, for the test's receivers), a fast schedule poll,
// a retention sweep every second, and four tenants.
func startProduct(t *testing.T, mode string) *product {
	t.Helper()
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	var lines []string
	tokens := map[string]string{}
	for _, tn := range []string{tenantDefault, tenantOther, tenantTTL, tenantMeter, tenantQuota} {
		tokens[tn] = "product-" + tn + "-token"
		lines = append(lines, tn+" "+tokens[tn])
	}
	if err := os.WriteFile(creds, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxdTokens := daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken)
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, sandboxdTokens)

	pol := &policy{holds: map[string]*hold{}}
	model := modeltest.New(t)
	turns := make([]modeltest.Turn, 2000)
	for i := range turns {
		turns[i] = modeltest.Dynamic(productTurn(pol))
	}
	model.Script("main", turns...)
	model.Script(briefAgent, turns[:100]...)
	t.Setenv("FLEET_MODEL_KEY", "test-key")
	t.Setenv("PLUMB_SECRETS_KEY", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("p", 32))))

	worker := daemontest.Dial(t, sd.GRPCAddr, sandboxdToken)
	f := &fleet{policy: pol, sandbox: plumbv1.NewSandboxServiceClient(worker), worker: worker, model: model}
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)

	storage := fmt.Sprintf("{sqlite_path: %s}", filepath.Join(dir, "agentd.db"))
	names := []string{"a"}
	if mode == "pg" {
		storage = fmt.Sprintf("{postgres_dsn: %q, lease_ttl: 30s}", pgtest.New(t))
		names = append(names, "b")
	}
	p := &product{fleet: f, mode: mode, clients: map[string][]plumbv1.AgentServiceClient{}}
	for _, name := range names {
		doc := fmt.Sprintf(`version: 1
storage: %s
models:
  scripted:
    base_url: %s
    api_key_env: FLEET_MODEL_KEY
    model: scripted-model
    headers: {%s: %s}
    first_byte_timeout: 10m
    retry: {max_attempts: 1}
defaults: {model: scripted}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30m}
backends: {default: sandbox}
server: {schedule_poll: 200ms}
webhooks: {allow_http: true, allow: [127.0.0.1]}
retention:
  interval: 1s
  tenants: {%s: {threads_idle: %s}}
quotas:
  tenants: {%s: {concurrent_runs: 1}}
agents:
  %s: {retention: {checkpoints_keep: 2, webhook_deliveries: 1s, run_events: 1s}}
`, storage, model.URL(), replicaHeader, name, sd.GRPCAddr, tenantTTL, ttlIdle, tenantQuota, briefAgent)
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		proc := daemontest.Start(t, bins["agentd"], "--config", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--log-format", "json", "--shutdown-grace", "10s",
			"--credentials-file", creds, "--sandboxd-token-file", sandboxdTokens)
		r := &replica{name: name, proc: proc}
		for tn, tok := range tokens {
			c := plumbv1.NewAgentServiceClient(daemontest.Dial(t, proc.GRPCAddr, tok))
			p.clients[tn] = append(p.clients[tn], c)
			if tn == tenantDefault {
				r.c = c
			}
		}
		p.replicas = append(p.replicas, r)
	}
	f.a, f.b = p.replicas[0], p.replicas[len(p.replicas)-1]
	t.Cleanup(func() {
		pol.openAll()
		if t.Failed() {
			for _, r := range p.replicas {
				t.Logf("replica %s logged:\n%s", r.name, tail(r.proc.Stderr(), 60))
			}
		}
	})
	key, err := p.at(1).c.RotateWebhookKey(f.ctx, &plumbv1.RotateWebhookKeyRequest{})
	if err != nil {
		t.Fatalf("rotate the webhook key: %v", err)
	}
	p.key = key.GetKey()
	return p
}

// TestProduct runs every item of issue 20 on both deployments: one agentd
// on SQLite, and two replicas on one PostgreSQL with the calls of each
// scenario spread over both.
func TestProduct(t *testing.T) {
	items := []struct {
		name string
		run  func(*testing.T, *product)
	}{
		{"runs", productRuns},
		{"webhook", productWebhook},
		{"schedule", productSchedule},
		{"busy", productBusy},
		{"rollback", productRollback},
		{"steer", productSteer},
		{"quota", productQuota},
		{"retention", productRetention},
		{"agent-retention", productAgentRetention},
		{"usage", productUsage},
		{"skills", productSkills},
		{"tenancy", productTenancy},
	}
	for _, mode := range []string{"sqlite", "pg"} {
		t.Run(mode, func(t *testing.T) {
			p := startProduct(t, mode)
			for _, it := range items {
				t.Run(it.name, func(t *testing.T) { it.run(t, p) })
			}
		})
	}
}

// start sends req through c and follows its stream.
func (p *product) start(t *testing.T, c plumbv1.AgentServiceClient, name string, req *plumbv1.RunRequest) *stream {
	t.Helper()
	rs, err := c.Run(p.ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return follow(name, 0, rs.Recv)
}

// runErr sends req through c and returns the error its stream ends with.
func (p *product) runErr(t *testing.T, c plumbv1.AgentServiceClient, req *plumbv1.RunRequest) error {
	t.Helper()
	rs, err := c.Run(p.ctx, req)
	if err != nil {
		return err
	}
	_, err = follow("run", 0, rs.Recv).end(t)
	return err
}

// detached starts scenario detached (on thread, empty: a new one) through c
// and returns the run and thread ids of its run_started event.
func (p *product) detached(t *testing.T, c plumbv1.AgentServiceClient, thread, scenario, hook string) (runID, threadID string) {
	t.Helper()
	rs, err := c.Run(p.ctx, &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: scenario}}, Detach: true, WebhookUrl: hook})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil || first.GetEvent().GetRunStarted() == nil {
		t.Fatalf("%s: first event %v, %v; want run_started", scenario, first, err)
	}
	_ = rs.CloseSend()
	return first.GetEvent().GetRunId(), first.GetEvent().GetThreadId()
}

// waitRunOn is fleet.waitRun through any client.
func (p *product) waitRunOn(t *testing.T, c plumbv1.AgentServiceClient, runID string) *plumbv1.RunRecord {
	t.Helper()
	return p.waitRun(t, &replica{name: "client", c: c}, runID)
}

// wantCode fails t unless err has code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v; want %v", what, err, code)
	}
}

// wantField fails t unless err is INVALID_ARGUMENT with a field violation
// naming field.
func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", what, err, field)
		return
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return
				}
			}
		}
	}
	t.Errorf("%s: %v (details %v); want a field violation naming %s", what, err, st.Details(), field)
}

// productRuns is item 1: a detached run is read, listed and waited for
// through another replica than the one it started on; a thread's runs
// are listed by status and by pages.
func productRuns(t *testing.T, p *product) {
	sc := p.mode + "-runs"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	runID, thread := p.detached(t, p.at(0).c, "", sc, "")
	gate.wait(t, "step 2's model call")
	other := p.at(1).c
	resp, err := other.WaitRun(p.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(time.Second)})
	if err != nil || !resp.GetTimedOut() || resp.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("a short WaitRun = %v, %v; want the RUNNING record, timed out", resp, err)
	}
	got, err := other.GetRun(p.ctx, &plumbv1.GetRunRequest{RunId: runID, ThreadId: thread})
	if err != nil || got.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING || !slices.Equal(got.GetRun().GetInput(), []string{sc}) {
		t.Fatalf("GetRun = %v, %v", got, err)
	}
	running, err := other.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, Status: plumbv1.RunStatus_RUN_STATUS_RUNNING})
	if err != nil || len(running.GetRuns()) != 1 || running.GetRuns()[0].GetRunId() != runID {
		t.Fatalf("ListRuns(thread, RUNNING) = %v, %v; want run %s", running, err, runID)
	}
	gate.open()
	rec := p.waitRunOn(t, other, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetFinalText() != "done "+sc || rec.GetSteps() != steps+1 ||
		rec.GetUsage().GetTotalTokens() == 0 || rec.GetFinishedAt() == nil || (p.mode == "pg") == (rec.GetHolder() == "") {
		t.Fatalf("the detached run's final record = %v", rec)
	}
	p.wantSteps(t, thread, sc, 1, 2, 3)

	// Two more runs on the thread, one through each replica.
	ids := []string{runID}
	for i := range 2 {
		s := p.start(t, p.at(i).c, "follow-up", &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: fmt.Sprintf("%s%s-%d", textOnly, sc, i)}}})
		evs := s.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		ids = append(ids, evs[len(evs)-1].GetRunId())
	}
	// Pages of one, alternating replicas: newest first, each run once.
	var paged []string
	token := ""
	for i := 0; ; i++ {
		page, err := p.at(i).c.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatalf("ListRuns page %d: %v", i, err)
		}
		for _, r := range page.GetRuns() {
			paged = append(paged, r.GetRunId())
		}
		if token = page.GetNextPageToken(); token == "" || i > 10 {
			break
		}
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(paged, want) {
		t.Fatalf("the thread's runs by pages of one = %v; want %v (newest first)", paged, want)
	}
	done, err := other.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, Status: plumbv1.RunStatus_RUN_STATUS_COMPLETED})
	if err != nil || len(done.GetRuns()) != 3 {
		t.Fatalf("ListRuns(thread, COMPLETED) = %v, %v; want 3 runs", done, err)
	}
	failed, err := other.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, Status: plumbv1.RunStatus_RUN_STATUS_FAILED})
	if err != nil || len(failed.GetRuns()) != 0 {
		t.Fatalf("ListRuns(thread, FAILED) = %v, %v; want none", failed, err)
	}
	all, err := other.ListRuns(p.ctx, &plumbv1.ListRunsRequest{Status: plumbv1.RunStatus_RUN_STATUS_COMPLETED, PageSize: 500})
	if err != nil || !slices.ContainsFunc(all.GetRuns(), func(r *plumbv1.RunRecord) bool { return r.GetRunId() == runID }) {
		t.Fatalf("ListRuns(tenant, COMPLETED) = %v, %v; want run %s", all, err, runID)
	}
	_, err = other.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, PageToken: "not-a-token"})
	wantField(t, "ListRuns with a made-up page token", err, "page_token")
}

// flakyReceiver is a real HTTP receiver that answers 500 to the first
// request of each delivery id and 204 to the next ones.
type flakyReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []receivedHook
}

type receivedHook struct {
	delivery, signature string
	body                []byte
	status              int
}

func newFlakyReceiver(t *testing.T) *flakyReceiver {
	r := &flakyReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body := make([]byte, 0, 1024)
		buf := make([]byte, 1024)
		for {
			n, err := req.Body.Read(buf)
			body = append(body, buf[:n]...)
			if err != nil {
				break
			}
		}
		id := req.Header.Get(webhook.DeliveryHeader)
		r.mu.Lock()
		code := http.StatusInternalServerError
		if slices.ContainsFunc(r.requests, func(h receivedHook) bool { return h.delivery == id }) {
			code = http.StatusNoContent
		}
		r.requests = append(r.requests, receivedHook{delivery: id, signature: req.Header.Get(webhook.SignatureHeader), body: body, status: code})
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

// productWebhook is item 2: a run's webhook is delivered once, signed,
// after one failed attempt that the delivery log records; a loopback URL
// the operator did not allow is refused.
func productWebhook(t *testing.T, p *product) {
	rcv := newFlakyReceiver(t)
	sc := textOnly + p.mode + "-webhook"
	runID, thread := p.detached(t, p.at(0).c, "", sc, rcv.URL+"/hook")
	rec := p.waitRunOn(t, p.at(1).c, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the run's record = %v", rec)
	}
	var d *plumbv1.WebhookDelivery
	i := 0
	waitFor(t, "the delivery to succeed", func() bool {
		i++
		resp, err := p.at(i).c.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
		if err != nil {
			t.Fatalf("ListWebhookDeliveries: %v", err)
		}
		if n := len(resp.GetDeliveries()); n != 1 {
			if n > 1 {
				t.Fatalf("run %s has %d deliveries; want one: %v", runID, n, resp.GetDeliveries())
			}
			return false
		}
		d = resp.GetDeliveries()[0]
		return d.GetStatus() == plumbv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED
	})
	if d.GetEvent() != "run.succeeded" || d.GetAttempts() != 2 || d.GetLastStatusCode() != http.StatusNoContent || d.GetThreadId() != thread || d.GetFinishTime() == nil {
		t.Errorf("the delivery log = %v; want run.succeeded, 2 attempts, the last answered 204", d)
	}
	rcv.mu.Lock()
	got := slices.Clone(rcv.requests)
	rcv.mu.Unlock()
	if len(got) != 2 || got[0].status != http.StatusInternalServerError || got[1].status != http.StatusNoContent {
		t.Fatalf("the receiver got %d requests (%v); want one answered 500, then one answered 204", len(got), got)
	}
	for _, h := range got {
		if h.delivery != d.GetId() || string(h.body) != string(got[0].body) {
			t.Errorf("request %+v: want delivery %s with the same body every time", h, d.GetId())
		}
		if err := webhook.Verify(h.signature, h.body, []string{p.key}, 5*time.Minute, time.Now()); err != nil {
			t.Errorf("a delivery does not verify with the tenant's key: %v", err)
		}
		if !strings.Contains(string(h.body), runID) {
			t.Errorf("the body %s does not name run %s", h.body, runID)
		}
	}
	// Loopback beyond the allowed 127.0.0.1, and cloud metadata: refused
	// before the run starts.
	for i, url := range []string{"http://127.0.0.2:9/hook", "http://[::1]:9/hook", "http://169.254.169.254/latest/meta-data", "ftp://127.0.0.1/hook"} {
		err := p.runErr(t, p.at(i).c, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: textOnly + "ssrf"}}, WebhookUrl: url})
		wantField(t, "a Run with webhook_url "+url, err, "webhook_url")
	}
}

// productSchedule is item 3: an interval schedule fires, each tick once,
// until PauseSchedule stops it.
func productSchedule(t *testing.T, p *product) {
	sc := textOnly + p.mode + "-schedule"
	const interval = time.Second
	cr, err := p.at(0).c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(interval),
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetSchedule().GetId()
	if cr.GetSchedule().GetNextFireTime() == nil {
		t.Fatalf("a new schedule shows no next fire time: %v", cr.GetSchedule())
	}
	i := 0
	fires := func() []*plumbv1.ScheduleFire {
		i++
		res, err := p.at(i).c.ListScheduleFires(p.ctx, &plumbv1.ListScheduleFiresRequest{ScheduleId: id, PageSize: 500})
		if err != nil {
			t.Fatalf("ListScheduleFires: %v", err)
		}
		return res.GetFires()
	}
	waitFor(t, "three fires", func() bool { return len(fires()) >= 3 })
	if _, err := p.at(1).c.PauseSchedule(p.ctx, &plumbv1.PauseScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	// A claim in flight when the pause landed finishes; then nothing more.
	waitFor(t, "no pending fire", func() bool {
		return !slices.ContainsFunc(fires(), func(fr *plumbv1.ScheduleFire) bool {
			return fr.GetStatus() == plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_PENDING
		})
	})
	list := fires()
	sched, err := p.at(0).c.GetSchedule(p.ctx, &plumbv1.GetScheduleRequest{ScheduleId: id})
	if err != nil || !sched.GetSchedule().GetPaused() || sched.GetSchedule().GetNextFireTime() != nil || sched.GetSchedule().GetLastRunId() != list[0].GetRunId() {
		t.Fatalf("the paused schedule = %v, %v; newest fire %v", sched, err, list[0])
	}
	seen := map[time.Time]bool{}
	for _, fr := range list {
		tick := fr.GetTick().AsTime()
		if seen[tick] {
			t.Fatalf("tick %s fired twice: %v", tick, list)
		}
		seen[tick] = true
		if fr.GetStatus() != plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_STARTED || fr.GetRunId() == "" {
			t.Fatalf("fire %v did not start a run", fr)
		}
		if rec := p.waitRun(t, p.at(int(tick.Unix())), fr.GetRunId()); rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetThreadId() != fr.GetThreadId() {
			t.Errorf("the run of fire %v = %v", fr, rec)
		}
	}
	// Paused: three more intervals pass without a fire.
	time.Sleep(3 * interval)
	if after := fires(); len(after) != len(list) {
		t.Fatalf("the paused schedule fired: %d fires, %d when paused", len(after), len(list))
	}
	// Once per tick with every replica up and polling: the model saw
	// exactly the fires' runs, one call each — no run without a fire, no
	// second run for a tick (a fire record is unique per tick; this also
	// catches a replica that would start a run without winning the tick).
	calls := map[string]int{}
	for _, r := range p.model.Requests("main") {
		if lastUser(r.Body.Messages) == sc {
			calls[r.RunID]++
		}
	}
	if len(calls) != len(list) {
		t.Fatalf("the model saw %d scheduled runs (%v); %d fires were recorded", len(calls), calls, len(list))
	}
	for _, fr := range list {
		if calls[fr.GetRunId()] != 1 {
			t.Fatalf("run %s of tick %s called the model %d times; want once", fr.GetRunId(), fr.GetTick().AsTime(), calls[fr.GetRunId()])
		}
	}
	if _, err := p.at(0).c.DeleteSchedule(p.ctx, &plumbv1.DeleteScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = p.at(1).c.GetSchedule(p.ctx, &plumbv1.GetScheduleRequest{ScheduleId: id})
	wantCode(t, "GetSchedule of a deleted schedule", err, codes.NotFound)
}

// productBusy is item 4: on a thread whose run is going, a Run that
// rejects is ABORTED, and a Run that interrupts is queued, stops the
// current run, and runs after it.
func productBusy(t *testing.T, p *product) {
	sc := p.mode + "-busy"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	runID, thread := p.detached(t, p.at(0).c, "", sc, "")
	gate.wait(t, "step 2's model call")
	err := p.runErr(t, p.at(1).c, &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: "rejected"}}, OnBusy: plumbv1.OnBusy_ON_BUSY_REJECT})
	wantCode(t, "a rejecting Run on the busy thread", err, codes.Aborted)

	next := textOnly + p.mode + "-after-interrupt"
	asked := logCount(p.at(0), stopAsked)
	evs, err := p.start(t, p.at(1).c, "interrupting run", &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: next}}, OnBusy: plumbv1.OnBusy_ON_BUSY_INTERRUPT}).end(t)
	if err != nil || len(evs) != 1 || evs[0].GetRunQueued() == nil {
		t.Fatalf("the interrupting Run delivered %v and ended with %v; want one run_queued event", evs, err)
	}
	queued := evs[0].GetRunQueued().GetRun()
	// The run stops at its next checkpoint, on its own replica or on
	// another (the stop request on its lease, once its holder has read
	// it): after the step whose model call the gate holds.
	if len(p.replicas) > 1 {
		loggedAgain(t, p.at(0), stopAsked, asked)
	}
	gate.open()
	stopped := p.waitRunOn(t, p.at(1).c, runID)
	if stopped.GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED || stopped.GetError().GetCode() != "SUPERSEDED" {
		t.Fatalf("the interrupted run's record = %v; want CANCELLED, SUPERSEDED", stopped)
	}
	after := p.waitRunOn(t, p.at(0).c, queued.GetRunId())
	if after.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || after.GetFinalText() != "done "+next ||
		!after.GetStartedAt().AsTime().After(stopped.GetFinishedAt().AsTime()) {
		t.Fatalf("the interrupting run's record = %v; want COMPLETED, started after %v", after, stopped.GetFinishedAt().AsTime())
	}
	lines := p.stepLog(t, thread)
	if countLines(lines, stepLine(sc, 1)) != 1 || countLines(lines, stepLine(sc, 3)) != 0 {
		t.Fatalf("the workspace log %q: want step 1 once and no step 3 (the run stopped)", lines)
	}
}

// productRetention is item 5: a thread of a tenant whose threads_idle is
// a few seconds is deleted with its sandbox once idle; DeleteThread
// deletes a thread with its runs and sandbox.
func productRetention(t *testing.T, p *product) {
	// The sandbox id is read while the run holds the thread (a running
	// thread is never swept).
	sc := p.mode + "-retention"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	ttl := p.as(tenantTTL, 0)
	runID, thread := p.detached(t, ttl, "", sc, "")
	gate.wait(t, "step 2's model call")
	th, err := p.as(tenantTTL, 1).GetThread(p.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil || th.GetThread().GetSandboxId() == "" {
		t.Fatalf("the running thread %v, %v; want a sandbox", th, err)
	}
	box := th.GetThread().GetSandboxId()
	boxCtx := metadata.AppendToOutgoingContext(p.ctx, "plumb-tenant", tenantTTL)
	if _, err := p.sandbox.GetSandbox(boxCtx, &plumbv1.GetSandboxRequest{SandboxId: box}); err != nil {
		t.Fatalf("the thread's sandbox: %v", err)
	}
	gate.open()
	if rec := p.waitRunOn(t, p.as(tenantTTL, 1), runID); rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the run's record = %v", rec)
	}
	i := 0
	waitFor(t, "the idle thread to be swept", func() bool {
		i++
		_, err := p.as(tenantTTL, i).GetThread(p.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("GetThread: %v", err)
		}
		return status.Code(err) == codes.NotFound
	})
	_, err = p.sandbox.GetSandbox(boxCtx, &plumbv1.GetSandboxRequest{SandboxId: box})
	wantCode(t, "the swept thread's sandbox", err, codes.NotFound)
	_, err = p.as(tenantTTL, 0).GetRun(p.ctx, &plumbv1.GetRunRequest{RunId: runID})
	wantCode(t, "GetRun of the swept thread's run", err, codes.NotFound)

	// DeleteThread, on the other replica, cascades the same way. Tenant
	// default's TTL is the default (90 days): its threads stay.
	sc = p.mode + "-delete"
	s := p.start(t, p.at(0).c, sc, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}})
	evs := s.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	runID, thread = evs[0].GetRunId(), evs[0].GetThreadId()
	th, err = p.at(1).c.GetThread(p.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil || th.GetThread().GetSandboxId() == "" {
		t.Fatalf("thread %v, %v; want a sandbox (and not swept)", th, err)
	}
	box = th.GetThread().GetSandboxId()
	if _, err := p.at(1).c.DeleteThread(p.ctx, &plumbv1.DeleteThreadRequest{ThreadId: thread}); err != nil {
		t.Fatal(err)
	}
	_, err = p.at(0).c.GetThread(p.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
	wantCode(t, "GetThread of a deleted thread", err, codes.NotFound)
	_, err = p.at(0).c.GetRun(p.ctx, &plumbv1.GetRunRequest{RunId: runID})
	wantCode(t, "GetRun of a deleted thread's run", err, codes.NotFound)
	_, err = p.at(1).c.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	wantCode(t, "ListRuns of a deleted thread", err, codes.NotFound)
	_, err = p.sandbox.GetSandbox(p.ctx, &plumbv1.GetSandboxRequest{SandboxId: box})
	wantCode(t, "the deleted thread's sandbox", err, codes.NotFound)
}

// productAgentRetention is item 5 per agent: agent brief's own TTLs
// override the default ones for what is its own. Its run's thread keeps 2
// checkpoints (the default agent's keeps more), its run's webhook
// delivery is swept a second after it finished while the default agent's
// stays, and (PostgreSQL) its thread's shared event log goes while the
// default agent's thread's stays.
func productAgentRetention(t *testing.T, p *product) {
	rcv := newHookReceiver(t)
	start := func(i int, agentName, scenario string) (runID, thread string) {
		t.Helper()
		rs, err := p.at(i).c.Run(p.ctx, &plumbv1.RunRequest{Agent: agentName, Input: []*plumbv1.InputMessage{{Content: scenario}}, Detach: true, WebhookUrl: rcv.URL + "/hook"})
		if err != nil {
			t.Fatal(err)
		}
		evs := follow(scenario, 0, rs.Recv).finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		return evs[0].GetRunId(), evs[0].GetThreadId()
	}
	mainRun, mainThread := start(0, "", textOnly+p.mode+"-agent-retention-main")
	briefRun, briefThread := start(1, briefAgent, textOnly+p.mode+"-agent-retention-brief")
	deliveries := func(i int, runID string) []*plumbv1.WebhookDelivery {
		res, err := p.at(i).c.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
		if err != nil {
			t.Fatalf("ListWebhookDeliveries: %v", err)
		}
		return res.GetDeliveries()
	}
	waitFor(t, "both runs' webhooks delivered", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return rcv.byRun[mainRun] == 1 && rcv.byRun[briefRun] == 1
	})
	i := 0
	waitFor(t, "agent brief's delivery to be swept", func() bool { i++; return len(deliveries(i, briefRun)) == 0 })
	if d := deliveries(0, mainRun); len(d) != 1 {
		t.Fatalf("the default agent's run has %d deliveries after brief's was swept; want its one, kept (default TTL)", len(d))
	}
	checkpoints := func(thread string) int {
		res, err := p.at(1).c.ListCheckpoints(p.ctx, &plumbv1.ListCheckpointsRequest{ThreadId: thread, PageSize: 500})
		if err != nil {
			t.Fatalf("ListCheckpoints: %v", err)
		}
		return len(res.GetCheckpoints())
	}
	if n, m := checkpoints(briefThread), checkpoints(mainThread); n != 2 || m <= 2 {
		t.Fatalf("checkpoints kept: %d on brief's thread, %d on the default agent's; want 2 and every one (more than 2)", n, m)
	}
	if p.mode != "pg" {
		return // one agentd on SQLite keeps no shared event log
	}
	waitFor(t, "agent brief's run event log to expire", func() bool {
		i++
		_, err := p.attach(t, p.at(i), briefThread, 0).end(t)
		return status.Code(err) == codes.OutOfRange
	})
	p.attach(t, p.at(0), mainThread, 0).finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
}

// productUsage is item 6: GetUsage reports the scripted model's token
// counts per run, per thread and for the tenant (tenant meter runs
// nothing else).
func productUsage(t *testing.T, p *product) {
	from := timestamppb.New(time.Now().Add(-time.Minute))
	type run struct{ id, thread string }
	var runs []run
	thread := ""
	for i := range 3 {
		if i == 2 {
			thread = "" // the third run on a thread of its own
		}
		s := p.start(t, p.as(tenantMeter, i), "usage run", &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: usageScenario + p.mode}}})
		evs := s.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		runs = append(runs, run{evs[0].GetRunId(), evs[0].GetThreadId()})
		thread = evs[0].GetThreadId()
	}
	want := func(n int64) *plumbv1.TokenUsage {
		u := usageTurn
		return &plumbv1.TokenUsage{PromptTokens: n * int64(u.Prompt), CompletionTokens: n * int64(u.Completion),
			TotalTokens: n * int64(u.Prompt+u.Completion), CachedTokens: n * int64(u.Cached), ReasoningTokens: n * int64(u.Reasoning)}
	}
	same := func(a, b *plumbv1.TokenUsage) bool {
		return a.GetPromptTokens() == b.GetPromptTokens() && a.GetCompletionTokens() == b.GetCompletionTokens() &&
			a.GetTotalTokens() == b.GetTotalTokens() && a.GetCachedTokens() == b.GetCachedTokens() && a.GetReasoningTokens() == b.GetReasoningTokens()
	}
	usage := func(i int, by plumbv1.UsageGroupBy) map[string]*plumbv1.UsageRow {
		resp, err := p.as(tenantMeter, i).GetUsage(p.ctx, &plumbv1.GetUsageRequest{From: from, GroupBy: by})
		if err != nil {
			t.Fatalf("GetUsage(%v): %v", by, err)
		}
		rows := map[string]*plumbv1.UsageRow{}
		for _, r := range resp.GetRows() {
			rows[r.GetKey()] = r
		}
		return rows
	}
	byRun := usage(0, plumbv1.UsageGroupBy_USAGE_GROUP_BY_RUN)
	if len(byRun) != 3 {
		t.Fatalf("usage by run = %v; want 3 runs", byRun)
	}
	for _, r := range runs {
		row := byRun[r.id]
		if !same(row.GetUsage(), want(1)) || row.GetModelCalls() != 1 || row.GetThreadId() != r.thread {
			t.Errorf("usage of run %s = %v; want %v in one call", r.id, row, want(1))
		}
		rec, err := p.as(tenantMeter, 1).GetRun(p.ctx, &plumbv1.GetRunRequest{RunId: r.id})
		if err != nil || rec.GetRun().GetUsage().GetPromptTokens() != want(1).GetPromptTokens() {
			t.Errorf("the record of run %s = %v, %v; want its usage", r.id, rec, err)
		}
	}
	byThread := usage(1, plumbv1.UsageGroupBy_USAGE_GROUP_BY_THREAD)
	if len(byThread) != 2 || !same(byThread[runs[0].thread].GetUsage(), want(2)) || byThread[runs[0].thread].GetModelCalls() != 2 ||
		!same(byThread[runs[2].thread].GetUsage(), want(1)) {
		t.Errorf("usage by thread = %v; want %v on %s and %v on %s", byThread, want(2), runs[0].thread, want(1), runs[2].thread)
	}
	total := usage(0, plumbv1.UsageGroupBy_USAGE_GROUP_BY_UNSPECIFIED)
	if len(total) != 1 || !same(total[""].GetUsage(), want(3)) || total[""].GetModelCalls() != 3 {
		t.Errorf("the tenant's usage = %v; want %v in 3 calls", total, want(3))
	}
	// Another tenant counts none of it.
	other, err := p.as(tenantOther, 0).GetUsage(p.ctx, &plumbv1.GetUsageRequest{From: from, GroupBy: plumbv1.UsageGroupBy_USAGE_GROUP_BY_RUN})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range other.GetRows() {
		if slices.ContainsFunc(runs, func(r run) bool { return r.id == row.GetKey() }) {
			t.Errorf("tenant other's usage counts tenant meter's run %s", row.GetKey())
		}
	}
}

// productSkills is item 7: a tenant skill uploaded with PutSkill is
// listed on every replica, named in the system prompt, read by the agent
// from /skills/, and copied into the thread's box.
func productSkills(t *testing.T, p *product) {
	name := p.mode + "-notes"
	files := map[string][]byte{
		"SKILL.md":          []byte("---\nname: " + name + "\ndescription: Keeps product notes.\n---\n# Notes\nRead notes.txt before answering.\n"),
		"notes.txt":         []byte("the notes\n"),
		"scripts/lookup.sh": []byte("#!/bin/sh\necho lookup\n"),
	}
	put, err := p.at(0).c.PutSkill(p.ctx, &plumbv1.PutSkillRequest{Name: name, Files: files})
	if err != nil || !put.GetCreated() {
		t.Fatalf("PutSkill = %v, %v", put, err)
	}
	list, err := p.at(1).c.ListSkills(p.ctx, &plumbv1.ListSkillsRequest{})
	if err != nil || !slices.ContainsFunc(list.GetSkills(), func(s *plumbv1.SkillInfo) bool { return s.GetName() == name }) {
		t.Fatalf("ListSkills = %v, %v; want %s", list, err, name)
	}
	s := p.start(t, p.at(1).c, "skill run", &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: skillScenario + name}}})
	evs := s.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	results := map[string]*plumbv1.ToolResult{}
	for _, e := range evs {
		if r := e.GetToolResult(); r != nil {
			results[r.GetId()] = r
		}
	}
	if r := results["call-read"]; r == nil || r.GetIsError() || !strings.Contains(r.GetContent(), "Read notes.txt before answering.") {
		t.Errorf("read_file of the skill's SKILL.md = %v; want its body", r)
	}
	if r := results["call-ls"]; r == nil || r.GetIsError() || !strings.Contains(r.GetContent(), "notes.txt") ||
		!strings.Contains(r.GetContent(), "SKILL.md") || !strings.Contains(r.GetContent(), "lookup.sh") {
		t.Errorf("ls of the skill's copy in the box = %v; want its files", r)
	}
	runID := evs[0].GetRunId()
	listed := false
	for _, r := range p.model.Requests("main") {
		if r.Header.Get(modeltest.HeaderRunID) != runID || len(r.Body.Messages) == 0 || r.Body.Messages[0].Role != "system" {
			continue
		}
		sys := r.Body.Messages[0].Content
		listed = strings.Contains(sys, name) && strings.Contains(sys, "Keeps product notes.")
		if strings.Contains(sys, "Read notes.txt before answering.") {
			t.Errorf("the system prompt holds the skill's body")
		}
		break
	}
	if !listed {
		t.Errorf("the system prompt of run %s does not list skill %s", runID, name)
	}
	th, err := p.at(0).c.GetThread(p.ctx, &plumbv1.GetThreadRequest{ThreadId: evs[0].GetThreadId()})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := p.sandbox.Read(p.ctx, &plumbv1.ReadRequest{SandboxId: th.GetThread().GetSandboxId(), Path: "/workspace/.skills/" + name + "/notes.txt"})
	if err != nil || !strings.Contains(rd.GetContent(), "the notes") {
		t.Errorf("the skill's notes.txt in the box = %v, %v", rd, err)
	}
	// A bad skill is refused, naming the file.
	_, err = p.at(1).c.PutSkill(p.ctx, &plumbv1.PutSkillRequest{Name: "no-front-matter", Files: map[string][]byte{"SKILL.md": []byte("just text\n")}})
	wantField(t, "PutSkill without front matter", err, "files[SKILL.md]")
}

// productTenancy is item 8: another tenant gets NOT_FOUND on each new
// object (a run, a schedule, a skill, a run's webhook deliveries), and a
// bad field gets INVALID_ARGUMENT naming it.
func productTenancy(t *testing.T, p *product) {
	rcv := newHookReceiver(t)
	sc := textOnly + p.mode + "-tenancy"
	runID, thread := p.detached(t, p.at(0).c, "", sc, rcv.URL+"/hook")
	p.waitRunOn(t, p.at(1).c, runID)
	waitFor(t, "the run's delivery to be recorded", func() bool {
		resp, err := p.at(0).c.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
		return err == nil && len(resp.GetDeliveries()) == 1
	})
	sched, err := p.at(1).c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(time.Hour), Paused: true,
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}}})
	if err != nil {
		t.Fatal(err)
	}
	sid := sched.GetSchedule().GetId()
	skill := p.mode + "-private"
	if _, err := p.at(0).c.PutSkill(p.ctx, &plumbv1.PutSkillRequest{Name: skill, Files: map[string][]byte{
		"SKILL.md": []byte("---\nname: " + skill + "\ndescription: Private.\n---\nSecret instructions.\n"),
	}}); err != nil {
		t.Fatal(err)
	}

	for i := range len(p.replicas) {
		o := p.as(tenantOther, i)
		notFound := []struct {
			what string
			call func() error
		}{
			{"GetRun", func() error { _, err := o.GetRun(p.ctx, &plumbv1.GetRunRequest{RunId: runID}); return err }},
			{"WaitRun", func() error {
				_, err := o.WaitRun(p.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(time.Second)})
				return err
			}},
			{"ListRuns of the thread", func() error { _, err := o.ListRuns(p.ctx, &plumbv1.ListRunsRequest{ThreadId: thread}); return err }},
			{"GetSchedule", func() error { _, err := o.GetSchedule(p.ctx, &plumbv1.GetScheduleRequest{ScheduleId: sid}); return err }},
			{"PauseSchedule", func() error {
				_, err := o.PauseSchedule(p.ctx, &plumbv1.PauseScheduleRequest{ScheduleId: sid})
				return err
			}},
			{"UpdateSchedule", func() error {
				_, err := o.UpdateSchedule(p.ctx, &plumbv1.UpdateScheduleRequest{ScheduleId: sid, Interval: durationpb.New(time.Minute),
					Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "taken over"}}}})
				return err
			}},
			{"ResumeSchedule", func() error {
				_, err := o.ResumeSchedule(p.ctx, &plumbv1.ResumeScheduleRequest{ScheduleId: sid})
				return err
			}},
			{"ListScheduleFires", func() error {
				_, err := o.ListScheduleFires(p.ctx, &plumbv1.ListScheduleFiresRequest{ScheduleId: sid})
				return err
			}},
			{"DeleteSchedule", func() error {
				_, err := o.DeleteSchedule(p.ctx, &plumbv1.DeleteScheduleRequest{ScheduleId: sid})
				return err
			}},
			{"GetSkill", func() error { _, err := o.GetSkill(p.ctx, &plumbv1.GetSkillRequest{Name: skill}); return err }},
			{"DeleteSkill", func() error { _, err := o.DeleteSkill(p.ctx, &plumbv1.DeleteSkillRequest{Name: skill}); return err }},
			{"ListWebhookDeliveries of the run", func() error {
				_, err := o.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{RunId: runID})
				return err
			}},
			{"ListWebhookDeliveries of the thread", func() error {
				_, err := o.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{ThreadId: thread})
				return err
			}},
		}
		for _, c := range notFound {
			wantCode(t, fmt.Sprintf("tenant other's %s on replica %s", c.what, p.at(i).name), c.call(), codes.NotFound)
		}
		skills, err := o.ListSkills(p.ctx, &plumbv1.ListSkillsRequest{})
		if err != nil || slices.ContainsFunc(skills.GetSkills(), func(s *plumbv1.SkillInfo) bool { return s.GetName() == skill }) {
			t.Errorf("tenant other's ListSkills = %v, %v; want no skill of tenant default", skills, err)
		}
		scheds, err := o.ListSchedules(p.ctx, &plumbv1.ListSchedulesRequest{})
		if err != nil || slices.ContainsFunc(scheds.GetSchedules(), func(s *plumbv1.Schedule) bool { return s.GetId() == sid }) {
			t.Errorf("tenant other's ListSchedules = %v, %v; want no schedule of tenant default", scheds, err)
		}
		runs, err := o.ListRuns(p.ctx, &plumbv1.ListRunsRequest{PageSize: 500})
		if err != nil || slices.ContainsFunc(runs.GetRuns(), func(r *plumbv1.RunRecord) bool { return r.GetThreadId() == thread }) {
			t.Errorf("tenant other's ListRuns = %v, %v; want no run of tenant default", runs, err)
		}
		ds, err := o.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{})
		if err != nil || slices.ContainsFunc(ds.GetDeliveries(), func(d *plumbv1.WebhookDelivery) bool { return d.GetRunId() == runID }) {
			t.Errorf("tenant other's ListWebhookDeliveries = %v, %v; want no delivery of tenant default", ds, err)
		}
	}
	// What tenant other could not touch is still there.
	if _, err := p.at(1).c.GetSkill(p.ctx, &plumbv1.GetSkillRequest{Name: skill}); err != nil {
		t.Errorf("GetSkill of tenant default's skill: %v", err)
	}
	if got, err := p.at(0).c.GetSchedule(p.ctx, &plumbv1.GetScheduleRequest{ScheduleId: sid}); err != nil || !got.GetSchedule().GetPaused() ||
		got.GetSchedule().GetInterval().AsDuration() != time.Hour {
		t.Errorf("GetSchedule of tenant default's schedule = %v, %v; want it unchanged, paused", got, err)
	}

	c := p.at(1).c
	bad := []struct {
		field string
		call  func() error
	}{
		{"run_id", func() error { _, err := c.GetRun(p.ctx, &plumbv1.GetRunRequest{}); return err }},
		{"page_size", func() error { _, err := c.ListRuns(p.ctx, &plumbv1.ListRunsRequest{PageSize: -1}); return err }},
		{"timeout", func() error {
			_, err := c.WaitRun(p.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(2 * time.Hour)})
			return err
		}},
		{"interval", func() error {
			_, err := c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(500 * time.Millisecond), Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}}})
			return err
		}},
		{"cron", func() error {
			_, err := c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Cron: "61 * * * *", Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}}})
			return err
		}},
		{"time_zone", func() error {
			_, err := c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Cron: "0 9 * * *", TimeZone: "Mars/Olympus", Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}}})
			return err
		}},
		{"run.input", func() error {
			_, err := c.CreateSchedule(p.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(time.Hour), Run: &plumbv1.RunRequest{}})
			return err
		}},
		{"name", func() error {
			_, err := c.PutSkill(p.ctx, &plumbv1.PutSkillRequest{Name: "Bad_Name", Files: map[string][]byte{"SKILL.md": []byte("---\nname: Bad_Name\ndescription: x\n---\n")}})
			return err
		}},
		{"page_size", func() error {
			_, err := c.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{PageSize: 501})
			return err
		}},
		{"page_token", func() error {
			_, err := c.ListWebhookDeliveries(p.ctx, &plumbv1.ListWebhookDeliveriesRequest{PageToken: "not-a-token"})
			return err
		}},
		{"grace", func() error {
			_, err := c.RotateWebhookKey(p.ctx, &plumbv1.RotateWebhookKeyRequest{Grace: durationpb.New(-time.Second)})
			return err
		}},
		{"to", func() error {
			now := time.Now()
			_, err := c.GetUsage(p.ctx, &plumbv1.GetUsageRequest{From: timestamppb.New(now), To: timestamppb.New(now.Add(-time.Hour))})
			return err
		}},
		{"webhook_url", func() error {
			return p.runErr(t, c, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}, WebhookUrl: "not a url"})
		}},
	}
	for _, b := range bad {
		wantField(t, "a bad "+b.field, b.call(), b.field)
	}
	if _, err := p.at(0).c.DeleteSchedule(p.ctx, &plumbv1.DeleteScheduleRequest{ScheduleId: sid}); err != nil {
		t.Fatal(err)
	}
}

// productRollback is item 4's rollback: a Run with on_busy ROLLBACK on a
// busy thread is queued, stops the current run at its next checkpoint,
// discards its messages (CANCELLED, ROLLED_BACK), and runs after it.
func productRollback(t *testing.T, p *product) {
	sc, next := p.mode+"-rolled-back", p.mode+"-instead"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	runID, thread := p.detached(t, p.at(0).c, "", sc, "")
	gate.wait(t, "step 2's model call")
	asked := logCount(p.at(0), stopAsked)
	q := p.sendBusy(t, p.at(1), thread, next, plumbv1.OnBusy_ON_BUSY_ROLLBACK)
	if len(p.replicas) > 1 {
		loggedAgain(t, p.at(0), stopAsked, asked)
	}
	gate.open()
	wantEnded(t, p.waitRunOn(t, p.at(1).c, runID), plumbv1.RunStatus_RUN_STATUS_CANCELLED, "ROLLED_BACK")
	wantEnded(t, p.waitRunOn(t, p.at(0).c, q.GetRunId()), plumbv1.RunStatus_RUN_STATUS_COMPLETED, "")
	msgs := p.messages(t, p.at(1), thread)
	if len(msgs) == 0 || msgs[0] != next || msgs[len(msgs)-1] != "done "+next || slices.Contains(msgs, sc) {
		t.Errorf("the thread's messages after the rollback = %q; want the new run's only", msgs)
	}
	p.wantSteps(t, thread, sc, 1, 2) // the box is not rolled back
	p.wantNoStep(t, thread, sc, 3)
	p.wantSteps(t, thread, next, 1, 2, 3)
}

// productSteer is item 4's steering: a Run with on_busy STEER on a busy
// thread follows the running run, which gets the message at its next
// model call, once, and answers it.
func productSteer(t *testing.T, p *product) {
	sc, steer := p.mode+"-steered", p.mode+"-steer-instead"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	runID, thread := p.detached(t, p.at(0).c, "", sc, "")
	gate.wait(t, "step 2's model call")
	stored := logCount(p.at(1), steerStored)
	follower := p.start(t, p.at(1).c, "steering run", &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: steer}}, OnBusy: plumbv1.OnBusy_ON_BUSY_STEER})
	loggedAgain(t, p.at(1), steerStored, stored)
	gate.open()
	evs := follower.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	steered := 0
	for _, e := range evs {
		if st := e.GetSteered(); st != nil {
			steered++
			if !slices.Equal(st.GetInput(), []string{steer}) {
				t.Errorf("steered event %v; want the input %q", st, steer)
			}
		}
		if e.GetRunId() != runID {
			t.Fatalf("the steering stream carried run %s's event; want the running run %s's", e.GetRunId(), runID)
		}
	}
	if steered != 1 {
		t.Errorf("the steering stream carried %d steered events; want 1", steered)
	}
	rec := p.waitRunOn(t, p.at(0).c, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetFinalText() != "done "+steer {
		t.Errorf("the steered run = %v; want COMPLETED answering the steer", rec)
	}
	if n := countLines(p.messages(t, p.at(0), thread), steer); n != 1 {
		t.Errorf("the steer is %d times in the thread's messages; want once", n)
	}
}

// productQuota is item 6's quotas: tenant quota may run one run at a
// time, counted across replicas. While its run is held on one replica,
// its Run for another thread on the other is refused before it starts
// (RESOURCE_EXHAUSTED naming concurrent_runs); once the first ends, a run
// is admitted again.
func productQuota(t *testing.T, p *product) {
	sc := p.mode + "-quota"
	gate := p.policy.gate(sc, p.at(0).name, 1)
	runID, _ := p.detached(t, p.as(tenantQuota, 0), "", sc, "")
	gate.wait(t, "step 2's model call")
	second := &replica{name: p.at(1).name, c: p.as(tenantQuota, 1)}
	p.refusedForQuota(t, second, p.mode+"-quota-second", "concurrent_runs")
	gate.open()
	wantEnded(t, p.waitRunOn(t, p.as(tenantQuota, 1), runID), plumbv1.RunStatus_RUN_STATUS_COMPLETED, "")
	if _, err := p.start(t, second.c, "a run after the first ended", &plumbv1.RunRequest{
		Input: []*plumbv1.InputMessage{{Content: textOnly + p.mode + "-quota-after"}}}).end(t); err != nil {
		t.Errorf("a run of tenant quota after its first ended: %v; want admitted", err)
	}
}

// What a replica logs when another asks its run to stop at the next
// checkpoint, and when it stores a steer for the running run.
const (
	stopAsked   = "run asked by a newer run on another replica to stop at its next checkpoint"
	steerStored = "steer stored for the thread's running run"
)

// logCount is how many times r logged msg so far.
func logCount(r *replica, msg string) int {
	return strings.Count(r.proc.Stderr(), fmt.Sprintf(`"msg":%q`, msg))
}

// loggedAgain waits until r logged msg more than before times: the
// product's items share their replicas, so an earlier item's line must
// not count.
func loggedAgain(t *testing.T, r *replica, msg string, before int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("replica %s to log %q again", r.name, msg), func() bool { return logCount(r, msg) > before })
}
