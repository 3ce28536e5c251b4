package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// TestEgressApprovalConfig: sandbox.template.egress_approval is checked
// when agentd starts.
func TestEgressApprovalConfig(t *testing.T) {
	for name, tc := range map[string]struct{ doc, err string }{
		"ok":          {doc: `sandbox: {address: "127.0.0.1:1", template: {network: egress, egress_approval: {enabled: true, timeout: 2m}}}`},
		"off":         {doc: `sandbox: {template: {egress_approval: {enabled: false}}}`},
		"no egress":   {doc: `sandbox: {address: "127.0.0.1:1", template: {egress_approval: {enabled: true}}}`, err: "sandbox.template.network egress"},
		"no sandboxd": {doc: `sandbox: {template: {network: egress, egress_approval: {enabled: true}}}`, err: "sandbox.address"},
		"short":       {doc: `sandbox: {address: "127.0.0.1:1", template: {network: egress, egress_approval: {enabled: true, timeout: 10ms}}}`, err: "egress_approval.timeout"},
		"long":        {doc: `sandbox: {address: "127.0.0.1:1", template: {network: egress, egress_approval: {enabled: true, timeout: 48h}}}`, err: "egress_approval.timeout"},
		"unknown key": {doc: `sandbox: {address: "127.0.0.1:1", template: {network: egress, egress_approval: {enabled: true, scope: run}}}`, err: "scope"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.doc + "\n"))
			if err == nil {
				err = validate(cfg)
			}
			if tc.err == "" && err != nil && !strings.Contains(err.Error(), "defaults.model") || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// upstreamServer runs a real HTTP server (busybox httpd of the test
// image) on a network of the test's own and returns its container name
// (what a box asks for), the network and its subnet (the operator's
// address rule: a human's grant of the name then admits it).
func upstreamServer(t *testing.T, cli *client.Client, body string) (name, netName, subnet string) {
	t.Helper()
	ctx := t.Context()
	run := fmt.Sprintf("agentd-egress-%d", time.Now().UnixNano())
	netName, name = "plumb-test-up-"+run, "plumb-test-upstream-"+run
	if _, err := cli.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge", Labels: sandboxtest.Labels(run)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		if _, err := cli.NetworkRemove(ctx, netName, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("remove the upstream network: %v", err)
		}
	})
	ni, err := cli.NetworkInspect(ctx, netName, client.NetworkInspectOptions{})
	if err != nil || len(ni.Network.IPAM.Config) == 0 {
		t.Fatalf("upstream network: %v", err)
	}
	script := fmt.Sprintf("mkdir -p /tmp/www && echo %s > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www", body)
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:             name,
		Config:           &container.Config{Image: sandboxtest.Image(t, cli), Entrypoint: []string{"sh", "-c", script}, User: "1000:1000", Labels: sandboxtest.Labels(run)},
		HostConfig:       &container.HostConfig{NetworkMode: container.NetworkMode(netName)},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return name, netName, ni.Network.IPAM.Config[0].Subnet.String()
}

// joinUpstream connects the egress proxy of the thread's box to the
// upstream's network (the test's stand-in for the internet).
func (s *stack) joinUpstream(cli *client.Client, thread, netName string) {
	s.t.Helper()
	th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil || th.GetThread().GetSandboxId() == "" {
		s.t.Fatalf("thread's sandbox: %v %v", th, err)
	}
	proxy := th.GetThread().GetSandboxId() + "-egress"
	if _, err := cli.NetworkConnect(s.ctx(), netName, client.NetworkConnectOptions{Container: proxy}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { // before the upstream network goes
		_, _ = cli.NetworkDisconnect(context.Background(), netName, client.NetworkDisconnectOptions{Container: proxy, Force: true})
	})
}

// liveRun is a Run whose events the test reads as they come.
type liveRun struct {
	events chan *plumbv1.Event
	done   chan error
}

func (s *stack) runLive(req *plumbv1.RunRequest) *liveRun {
	r := &liveRun{events: make(chan *plumbv1.Event, 1024), done: make(chan error, 1)}
	stream, err := s.c.Run(s.ctx(), req)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { // a failed check leaves no run behind for the next one
		for range r.events {
		}
	})
	go func() {
		defer close(r.events)
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				r.done <- nil
				return
			}
			if err != nil {
				r.done <- err
				return
			}
			r.events <- m.GetEvent()
		}
	}()
	return r
}

// next returns the next event that f accepts, failing when the run ends
// first.
func (r *liveRun) next(t *testing.T, what string, f func(*plumbv1.Event) bool) *plumbv1.Event {
	t.Helper()
	for ev := range r.events {
		if f(ev) {
			return ev
		}
	}
	t.Fatalf("the run ended without %s: %v", what, <-r.done)
	return nil
}

// rest drains the run and returns its remaining events.
func (r *liveRun) rest(t *testing.T) []*plumbv1.Event {
	t.Helper()
	var evs []*plumbv1.Event
	for ev := range r.events {
		evs = append(evs, ev)
	}
	if err := <-r.done; err != nil {
		t.Fatalf("run: %v", err)
	}
	return evs
}

func resultOf(evs []*plumbv1.Event, id string) *plumbv1.ToolResult {
	for _, ev := range evs {
		if r := ev.GetToolResult(); r.GetId() == id {
			return r
		}
	}
	return nil
}

// TestEgressApprovalEndToEnd: with sandbox.template.egress_approval, a
// command the model runs through execute connects to a real HTTP server
// whose name is off the worker's allow-list; the connection waits, shows
// up as an egress_request event naming the execute call and in the
// thread's pending list; another tenant can neither see nor decide it; a
// rejection refuses it; an approval for the thread lets it through (the
// tool result has the server's answer), is listed with the tool call and
// the approver, and admits the server in the thread's next box without
// asking; an approval for the agent admits it in the boxes of the agent's
// other threads of the tenant, not in another tenant's.
func TestEgressApprovalEndToEnd(t *testing.T) {
	cli := sandboxtest.Docker(t)
	up, upNet, subnet := upstreamServer(t, cli, "upstream-ok")
	w := sandboxsvctest.StartWorker(t, sandbox.Config{
		EgressProxy: sandboxtest.EgressProxy(t),
		Policy:      sandbox.Policy{EgressAllow: []string{subnet}}, // by address only: the name asks
	})
	s := startStack(t, nil, fmt.Sprintf(`sandbox:
  address: %s
  template:
    memory: 256Mi
    ttl: 30m
    network: egress
    egress_approval: {enabled: true, timeout: 3m}
backends: {default: sandbox}
`, w.Addr))
	s.worker = w
	s.tenant = "acme"
	wget := fmt.Sprintf(`{"command":"timeout 170 wget -q -O- http://%s:8080/ 2>&1; echo exit=$?"}`, up)

	// The first run creates the box; the test joins its proxy to the
	// upstream's network.
	s.model.Script("main", modeltest.Calls(mcall("e0", "execute", `{"command":"true"}`)), modeltest.Text("ok"))
	thread, _ := s.mustRun(input("", "Start."))
	s.joinUpstream(cli, thread, upNet)

	asked := func(r *liveRun) *plumbv1.EgressAsk {
		t.Helper()
		ev := r.next(t, "an egress_request", func(ev *plumbv1.Event) bool { return ev.GetEgressRequest() != nil })
		q := ev.GetEgressRequest().GetRequest()
		if q.GetHost() != up || q.GetPort() != 8080 || q.GetRequestId() == "" || q.GetAgentPath() != "main" || ev.GetAgentPath() != "main" {
			t.Fatalf("egress_request %v", ev)
		}
		return q
	}

	t.Run("reject", func(t *testing.T) {
		s.model.Script("main", modeltest.Calls(mcall("r1", "execute", wget)), modeltest.Text("refused"))
		run := s.runLive(input(thread, "Fetch it."))
		q := asked(run)
		if q.GetToolCallId() != "r1" {
			t.Fatalf("the request names call %q, want r1", q.GetToolCallId())
		}
		th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
		if p := th.GetThread().GetPendingEgress(); err != nil || len(p) != 1 || p[0].GetRequestId() != q.GetRequestId() || p[0].GetToolCallId() != "r1" {
			t.Fatalf("pending = %v, %v", p, err)
		}
		// Another tenant neither decides nor lists it.
		s.tenant = "beta"
		_, err = s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: thread, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE, Scope: plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT})
		if status.Code(err) != codes.NotFound {
			t.Errorf("beta decides acme's request: %v", err)
		}
		if _, err := s.c.ListEgressGrants(s.ctx(), &plumbv1.ListEgressGrantsRequest{ThreadId: thread}); status.Code(err) != codes.NotFound {
			t.Errorf("beta lists acme's thread's grants: %v", err)
		}
		if th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread}); status.Code(err) != codes.NotFound {
			t.Errorf("beta reads acme's thread: %v %v", th, err)
		}
		s.tenant = "acme"
		if _, err := s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: thread, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_REJECT, Reason: "not today"}); err != nil {
			t.Fatal(err)
		}
		dec := run.next(t, "egress_decided", func(ev *plumbv1.Event) bool { return ev.GetEgressDecided() != nil }).GetEgressDecided()
		if dec.GetAllowed() || dec.GetDecidedBy() != "acme" || dec.GetRequestId() != q.GetRequestId() || dec.GetToolCallId() != "r1" {
			t.Fatalf("egress_decided %v", dec)
		}
		res := resultOf(run.rest(t), "r1")
		if res == nil || strings.Contains(res.GetContent(), "upstream-ok") || strings.Contains(res.GetContent(), "exit=0") {
			t.Fatalf("rejected connection's result: %v", res)
		}
		if _, err := s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: thread, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("deciding it again: %v", err)
		}
	})

	t.Run("approve for the thread", func(t *testing.T) {
		s.model.Script("main", modeltest.Calls(mcall("a1", "execute", wget)), modeltest.Text("fetched"))
		run := s.runLive(input(thread, "Fetch it again."))
		q := asked(run)
		resp, err := s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: thread, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE, Scope: plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_THREAD})
		if err != nil || resp.GetGrant().GetToolCallId() != "a1" {
			t.Fatalf("approve = %v, %v", resp, err)
		}
		dec := run.next(t, "egress_decided", func(ev *plumbv1.Event) bool { return ev.GetEgressDecided() != nil }).GetEgressDecided()
		if !dec.GetAllowed() || dec.GetScope() != plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_THREAD || dec.GetDecidedBy() != "acme" {
			t.Fatalf("egress_decided %v", dec)
		}
		if res := resultOf(run.rest(t), "a1"); res == nil || !strings.Contains(res.GetContent(), "upstream-ok") {
			t.Fatalf("approved connection's result: %v", res)
		}
		list, err := s.c.ListEgressGrants(s.ctx(), &plumbv1.ListEgressGrantsRequest{ThreadId: thread})
		if err != nil || len(list.GetGrants()) != 1 {
			t.Fatalf("grants = %v, %v", list, err)
		}
		g := list.GetGrants()[0]
		if g.GetRequestId() != q.GetRequestId() || g.GetToolCallId() != "a1" || g.GetApprovedBy() != "acme" || g.GetHost() != up || g.GetPort() != 8080 ||
			g.GetScope() != plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_THREAD || g.GetRevoked() {
			t.Fatalf("grant %v", g)
		}
		if th, _ := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread}); len(th.GetThread().GetPendingEgress()) != 0 {
			t.Fatalf("still pending: %v", th.GetThread().GetPendingEgress())
		}
	})

	// boxedThread starts a thread of the stack's tenant whose box has
	// joined the upstream's network.
	boxedThread := func(t *testing.T) string {
		t.Helper()
		s.model.Script("main", modeltest.Calls(mcall("b0", "execute", `{"command":"true"}`)), modeltest.Text("ok"))
		th, _ := s.mustRun(input("", "Start."))
		s.joinUpstream(cli, th, upNet)
		return th
	}

	t.Run("an agent grant reaches the agent's other threads of the tenant only", func(t *testing.T) {
		t2 := boxedThread(t) // no grant yet: its box asks
		s.model.Script("main", modeltest.Calls(mcall("g1", "execute", wget)), modeltest.Text("fetched"))
		run := s.runLive(input(t2, "Fetch it."))
		q := asked(run)
		if _, err := s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: t2, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE, Scope: plumbv1.EgressGrantScope_EGRESS_GRANT_SCOPE_AGENT}); err != nil {
			t.Fatal(err)
		}
		if res := resultOf(run.rest(t), "g1"); res == nil || !strings.Contains(res.GetContent(), "upstream-ok") {
			t.Fatalf("approved connection's result: %v", res)
		}
		list, err := s.c.ListEgressGrants(s.ctx(), &plumbv1.ListEgressGrantsRequest{Agent: "main"})
		if err != nil || len(list.GetGrants()) != 2 { // the THREAD grant of the first thread, and this one
			t.Fatalf("the agent's grants: %v, %v", list, err)
		}

		t3 := boxedThread(t) // a new thread of the agent: no ask
		s.model.Script("main", modeltest.Calls(mcall("g2", "execute", wget)), modeltest.Text("fetched"))
		evs, results, err := s.run(input(t3, "Fetch it."))
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, results, "g2", false, "upstream-ok")
		for _, ev := range evs {
			if ev.GetEgressRequest() != nil {
				t.Fatalf("a box of the agent asked: %v", ev)
			}
		}

		s.tenant = "beta" // another tenant's box of the same agent asks
		defer func() { s.tenant = "acme" }()
		t4 := boxedThread(t)
		s.model.Script("main", modeltest.Calls(mcall("g3", "execute", wget)), modeltest.Text("refused"))
		run = s.runLive(input(t4, "Fetch it."))
		q = asked(run)
		if _, err := s.c.DecideThreadEgress(s.ctx(), &plumbv1.DecideThreadEgressRequest{ThreadId: t4, RequestId: q.GetRequestId(),
			Decision: plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_REJECT}); err != nil {
			t.Fatal(err)
		}
		if res := resultOf(run.rest(t), "g3"); res == nil || strings.Contains(res.GetContent(), "upstream-ok") {
			t.Fatalf("beta's rejected connection: %v", res)
		}
		if l, err := s.c.ListEgressGrants(s.ctx(), &plumbv1.ListEgressGrantsRequest{Agent: "main"}); err != nil || len(l.GetGrants()) != 0 {
			t.Fatalf("beta lists acme's agent grants: %v, %v", l, err)
		}
	})

	t.Run("a new box of the thread has the grant", func(t *testing.T) {
		s.deleteSandboxes()
		s.model.Script("main", modeltest.Calls(mcall("n0", "execute", `{"command":"true"}`)), modeltest.Text("ok"))
		s.mustRun(input(thread, "Start again."))
		s.joinUpstream(cli, thread, upNet)
		s.model.Script("main", modeltest.Calls(mcall("n1", "execute", wget)), modeltest.Text("fetched"))
		evs, results, err := s.run(input(thread, "Fetch it once more."))
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, results, "n1", false, "upstream-ok")
		for _, ev := range evs {
			if ev.GetEgressRequest() != nil {
				t.Fatalf("the new box asked: %v", ev)
			}
		}
	})
}
