package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// probeResult is what sandboxtest/tlsprobe prints.
type probeResult struct {
	Status int         `json:"status"`
	Issuer string      `json:"issuer"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
	Error  string      `json:"error"`
}

// TestEgressSecretInjection: a box whose create carries an injection rule
// reaches a real TLS server through its proxy with a Go TLS client that
// verifies (SSL_CERT_FILE): the server sees the secret in the configured
// header (over the box's own value), the box sees the box CA's certificate
// and the echoed value replaced. A host without a rule is tunnelled (the
// box sees the real certificate, the server no header); an injected host
// whose certificate does not verify gets nothing. Probes in the box (env,
// /proc, files, the proxy's own answers) never find the value, nor do the
// containers' settings, the proxy's log, sandboxd's log or Info. The proxy
// keeps its config across a worker restart; a box whose injecting proxy is
// gone is removed on adoption.
func TestEgressSecretInjection(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	const secret = "plumb-test-secret-7f3a9c2e51"
	gw := bridgeHostAddr(ctx, t, e.cli)
	api := sandboxtest.StartTLSEcho(t, gw, "plumb-test-upstream")
	plain := sandboxtest.StartTLSEcho(t, gw, "plumb-test-upstream")
	impostor := sandboxtest.StartTLSEcho(t, gw, "plumb-test-impostor")

	e.cfg.EgressProxy = sandboxtest.EgressProxy(t)
	e.cfg.EgressUpstreamCA = []byte(api.PEM + plain.PEM)
	e.cfg.Policy.EgressAllow = []string{api.Addr, plain.Addr, impostor.Addr}
	core, logs := observer.New(zap.DebugLevel)
	m := e.manager(t, sandbox.WithLogger(zap.New(core)))
	rule := egress.InjectRule{Name: "api-token", Hosts: []string{api.Addr, impostor.Addr}, Header: "Authorization", Value: "Bearer " + secret, Secret: secret}
	egressT := sandbox.Template{Network: sandbox.NetworkEgress}

	t.Run("refused", func(t *testing.T) {
		off := rule
		off.Hosts = []string{gw + ":1"}
		for name, spec := range map[string]sandbox.CreateSpec{
			"no egress":            {Inject: []egress.InjectRule{rule}},
			"host off the list":    {Overrides: egressT, Inject: []egress.InjectRule{off}},
			"value without secret": {Overrides: egressT, Inject: []egress.InjectRule{{Name: "x", Hosts: []string{api.Addr}, Header: "Authorization", Value: "Bearer", Secret: secret}}},
		} {
			_, err := m.Create(ctx, spec)
			var se *sandbox.Error
			if !errors.As(err, &se) || se.Code != sandbox.CodeInvalid || se.Field != "egress_secrets" {
				t.Errorf("%s: create = %v, want invalid_argument on egress_secrets", name, err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error shows the secret: %v", name, err)
			}
		}
	})

	info := e.create(t, m, sandbox.CreateSpec{Overrides: egressT, Inject: []egress.InjectRule{rule}})
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.Upload(ctx, []backend.UploadItem{{Path: "/workspace/tlsprobe", Content: sandboxtest.TLSProbe(t)}}); err != nil || res[0].Err != nil {
		t.Fatalf("upload the probe: %v %v", err, res)
	}
	if r := exec(t, m, info.ID, "chmod +x /workspace/tlsprobe", 10); exitCode(r) != 0 {
		t.Fatalf("chmod: %s", r.Output)
	}
	probe := func(t *testing.T, m *sandbox.Manager, url string, headers ...string) probeResult {
		t.Helper()
		cmd := "/workspace/tlsprobe " + url
		for _, h := range headers {
			cmd += " '" + h + "'"
		}
		r := exec(t, m, info.ID, cmd, 90)
		if strings.Contains(r.Output, secret) {
			t.Errorf("the box saw the secret: %s", r.Output)
		}
		var p probeResult
		if err := json.Unmarshal([]byte(r.Output), &p); err != nil {
			t.Fatalf("probe %s: %v: %q", url, err, r.Output)
		}
		return p
	}
	injected := func(t *testing.T, m *sandbox.Manager) {
		t.Helper()
		n := len(api.Headers())
		p := probe(t, m, "https://"+api.Addr+"/echo", "Authorization: Bearer box-chosen")
		if p.Status != 200 || p.Error != "" {
			t.Fatalf("injected host: %+v", p)
		}
		if p.Issuer != "plumb egress box CA" {
			t.Errorf("the box saw a certificate of %q, want the box CA's", p.Issuer)
		}
		if h := api.Headers(); len(h) != n+1 || h[n] != "Bearer "+secret {
			t.Errorf("the server saw %q, want the injected header", h[n:])
		}
		if want := "Bearer " + egress.Placeholder; p.Body != "echo authorization="+want || p.Header.Get("X-Echo") != want {
			t.Errorf("the echo reached the box as %q / %q, want the placeholder", p.Body, p.Header.Get("X-Echo"))
		}
	}
	t.Run("injected", func(t *testing.T) { injected(t, m) })
	t.Run("other host tunnelled", func(t *testing.T) {
		p := probe(t, m, "https://"+plain.Addr+"/")
		if p.Status != 200 || p.Issuer != "plumb-test-upstream" {
			t.Errorf("a host without a rule: %+v, want the real certificate", p)
		}
		if h := plain.Headers(); len(h) != 1 || h[0] != "" {
			t.Errorf("the server without a rule saw %q", h)
		}
	})
	t.Run("impostor refused", func(t *testing.T) {
		p := probe(t, m, "https://"+impostor.Addr+"/")
		if p.Status != http.StatusBadGateway || !strings.Contains(p.Body, "does not verify") {
			t.Errorf("an injected host with a bad certificate: %+v, want 502", p)
		}
		if h := impostor.Headers(); len(h) != 0 {
			t.Errorf("the impostor got %d requests", len(h))
		}
	})
	t.Run("the box cannot read it", func(t *testing.T) {
		probes := []string{
			"env", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", "cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '",
			"grep -rs -l " + secret + " / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true",
			"cat " + "/workspace/.plumb/egress-ca.pem | head -3",
			fmt.Sprintf(`printf 'GET http://%s:%d/ HTTP/1.0\r\n\r\n' | timeout 10 nc %s %d`, sandbox.EgressProxyHost, sandbox.EgressProxyPort, sandbox.EgressProxyHost, sandbox.EgressProxyPort),
			fmt.Sprintf(`printf 'GET http://%s/ HTTP/1.0\r\n\r\n' | timeout 10 nc %s %d`, api.Addr, sandbox.EgressProxyHost, sandbox.EgressProxyPort),
		}
		for _, c := range probes {
			if r := exec(t, m, info.ID, c, 60); strings.Contains(r.Output, secret) {
				t.Errorf("%q shows the secret: %s", c, r.Output)
			}
		}
		if r := exec(t, m, info.ID, "head -1 $SSL_CERT_FILE && echo $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS", 10); !strings.Contains(r.Output, "BEGIN CERTIFICATE") || strings.Count(r.Output, "/workspace/.plumb/egress-ca.pem") != 3 {
			t.Errorf("the box's CA bundle and variables: %q", r.Output)
		}
	})
	t.Run("nowhere outside the proxy", func(t *testing.T) {
		for _, name := range []string{info.ContainerID, info.ID + "-egress"} {
			ci, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(ci.Container); strings.Contains(string(b), secret) {
				t.Errorf("container %s's settings hold the secret", name)
			}
		}
		if l := proxyLogs(t, e.cli, info.ID); strings.Contains(l, secret) || !strings.Contains(l, "injecting secrets") {
			t.Errorf("proxy log: %s", l)
		}
		for _, en := range logs.All() {
			if s := fmt.Sprint(en.Message, en.ContextMap()); strings.Contains(s, secret) {
				t.Errorf("sandboxd logged the secret: %s", s)
			}
		}
		got, err := m.Get(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if s := fmt.Sprintf("%+v", got); strings.Contains(s, secret) {
			t.Errorf("Info holds the secret: %s", s)
		}
	})

	// A restarted worker adopts the box; its proxy keeps its config.
	m.Close()
	m2, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	t.Run("after a restart", func(t *testing.T) { injected(t, m2) })

	// Its proxy gone, the next restart removes the box rather than run it
	// without injection.
	m2.Close()
	if _, err := e.cli.ContainerRemove(ctx, info.ID+"-egress", client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	m3, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	if _, err := m3.Get(ctx, info.ID); err == nil {
		t.Errorf("a box whose injecting proxy is gone was adopted")
	}
	if _, err := e.cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("its container is still there: %v", err)
	}
	if err := m3.DeleteAll(ctx); err != nil {
		t.Fatal(err)
	}
}
