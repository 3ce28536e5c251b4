package agentd

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

func secretsKey(t *testing.T) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestSecretRPCs: secrets are stored per tenant, listed without values,
// sealed in the database file, and refused clearly without a key or with
// a bad name or value.
func TestSecretRPCs(t *testing.T) {
	const value = "sk-live-0123456789abcdef"
	s := startStack(t, nil, "secrets: {key: "+secretsKey(t)+"}\n")
	s.tenant = "acme"
	put, err := s.c.PutSecret(s.ctx(), &plumbv1.PutSecretRequest{Name: "OPENAI_KEY", Value: value})
	if err != nil || !put.GetCreated() || put.GetSecret().GetName() != "OPENAI_KEY" {
		t.Fatalf("put = %v, %v", put, err)
	}
	again, err := s.c.PutSecret(s.ctx(), &plumbv1.PutSecretRequest{Name: "OPENAI_KEY", Value: value + "2"})
	if err != nil || again.GetCreated() || !again.GetSecret().GetCreateTime().AsTime().Equal(put.GetSecret().GetCreateTime().AsTime()) {
		t.Fatalf("replace = %v, %v", again, err)
	}
	list, err := s.c.ListSecrets(s.ctx(), &plumbv1.ListSecretsRequest{})
	if err != nil || len(list.GetSecrets()) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if b, _ := protojson.Marshal(list); bytes.Contains(b, []byte(value)) {
		t.Fatal("the listing holds the value")
	}
	files, _ := filepath.Glob(s.core.Config.Storage.SQLitePath + "*") // with -wal and -shm
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || bytes.Contains(b, []byte(value)) {
			t.Fatalf("%s holds the value (or: %v)", f, err)
		}
	}
	if len(files) == 0 {
		t.Fatal("no database file")
	}

	s.tenant = "beta"
	if l, err := s.c.ListSecrets(s.ctx(), &plumbv1.ListSecretsRequest{}); err != nil || len(l.GetSecrets()) != 0 {
		t.Fatalf("beta lists %v, %v", l, err)
	}
	if _, err := s.c.DeleteSecret(s.ctx(), &plumbv1.DeleteSecretRequest{Name: "OPENAI_KEY"}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta deletes acme's secret: %v", err)
	}
	for _, tc := range []struct {
		req   *plumbv1.PutSecretRequest
		field string
	}{
		{&plumbv1.PutSecretRequest{Name: "bad name", Value: "x"}, "name"},
		{&plumbv1.PutSecretRequest{Name: "", Value: "x"}, "name"},
		{&plumbv1.PutSecretRequest{Name: "ok", Value: ""}, "value"},
		{&plumbv1.PutSecretRequest{Name: "ok", Value: strings.Repeat("x", 17<<10)}, "value"},
	} {
		_, err := s.c.PutSecret(s.ctx(), tc.req)
		if status.Code(err) != codes.InvalidArgument || len(pbconv.FieldViolations(err)) != 1 || pbconv.FieldViolations(err)[0].Field != tc.field {
			t.Errorf("put %q: %v, want INVALID_ARGUMENT on %s", tc.req.GetName(), err, tc.field)
		}
	}
	if _, err := s.c.PutSecret(s.ctx(), &plumbv1.PutSecretRequest{Name: "ok", Value: "a\r\nb"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a value with a line break: %v", err)
	}

	s.tenant = "acme"
	if _, err := s.c.DeleteSecret(s.ctx(), &plumbv1.DeleteSecretRequest{Name: "OPENAI_KEY"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.c.ListSecrets(s.ctx(), &plumbv1.ListSecretsRequest{}); err != nil || len(l.GetSecrets()) != 0 {
		t.Fatalf("after delete: %v, %v", l, err)
	}

	nokey := startStack(t, nil, "")
	_, err = nokey.c.PutSecret(nokey.ctx(), &plumbv1.PutSecretRequest{Name: "x", Value: "y"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "PLUMB_SECRETS_KEY") {
		t.Fatalf("put without a key: %v", err)
	}
}

// TestEgressSecretConfig: sandbox.template.egress_secrets is checked when
// agentd starts.
func TestEgressSecretConfig(t *testing.T) {
	base := "sandbox: {template: {network: egress, egress_secrets: [%s]}}\nsecrets: {key: " + secretsKey(t) + "}\n"
	for name, tc := range map[string]struct{ rule, err string }{
		"ok":          {rule: `{secret: GH, hosts: [api.github.com], header: Authorization, format: "Bearer {{value}}"}`},
		"bad name":    {rule: `{secret: "a b", hosts: [x.example], header: X-Key}`, err: "egress_secrets[0].secret"},
		"no value":    {rule: `{secret: GH, hosts: [x.example], header: X-Key, format: "Bearer"}`, err: "egress_secrets[0].format"},
		"wildcard":    {rule: `{secret: GH, hosts: ["*.example"], header: X-Key}`, err: "exact host"},
		"host header": {rule: `{secret: GH, hosts: [x.example], header: Host}`, err: "header"},
		"unknown key": {rule: `{secret: GH, hosts: [x.example], header: X-Key, value: oops}`, err: "value"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(fmt.Sprintf(base, tc.rule)))
			if err == nil {
				err = validate(cfg)
			}
			if tc.err == "" && err != nil && !strings.Contains(err.Error(), "defaults.model") || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestEgressSecretsEndToEnd: a tenant stores a secret; the agent's box
// (egress, with an egress_secrets rule) runs a TLS client the model calls
// through execute; the real server gets the secret in its header, and the
// tool result, the thread's messages and events carry only the
// placeholder.
func TestEgressSecretsEndToEnd(t *testing.T) {
	const value = "e2e-secret-6d1f0b77a2"
	ctx := t.Context()
	cli := sandboxtest.Docker(t)
	gw := bridgeAddr(t, cli)
	api := sandboxtest.StartTLSEcho(t, gw, "plumb-test-upstream")
	w := sandboxsvctest.StartWorker(t, sandbox.Config{
		EgressProxy: sandboxtest.EgressProxy(t), EgressUpstreamCA: []byte(api.PEM),
		Policy: sandbox.Policy{EgressAllow: []string{api.Addr}},
	})
	s := startStack(t, nil, fmt.Sprintf(`sandbox:
  address: %s
  template:
    memory: 256Mi
    ttl: 30m
    network: egress
    egress_secrets: [{secret: API_TOKEN, hosts: ["%s"], header: Authorization, format: "Bearer {{value}}"}]
backends: {default: sandbox}
secrets: {key: %s}
`, w.Addr, api.Addr, secretsKey(t)))
	s.tenant = "acme"
	if _, err := s.c.PutSecret(s.ctx(), &plumbv1.PutSecretRequest{Name: "API_TOKEN", Value: value}); err != nil {
		t.Fatal(err)
	}
	// The first run creates the box; the test puts the probe into it.
	s.model.Script("main", modeltest.Calls(mcall("e1", "execute", `{"command":"echo $SSL_CERT_FILE"}`)), modeltest.Text("ok"))
	thread, results := s.mustRun(input("", "Where is the CA bundle?"))
	wantResult(t, results, "e1", false, "/workspace/.plumb/egress-ca.pem")
	th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.Manager.Files(th.GetThread().GetSandboxId())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.Upload(ctx, []backend.UploadItem{{Path: "/workspace/tlsprobe", Content: sandboxtest.TLSProbe(t)}}); err != nil || res[0].Err != nil {
		t.Fatalf("upload the probe: %v %v", err, res)
	}

	cmd := fmt.Sprintf(`chmod +x /workspace/tlsprobe && /workspace/tlsprobe https://%s/echo`, api.Addr)
	s.model.Script("main", modeltest.Calls(mcall("e2", "execute", fmt.Sprintf(`{"command":%q}`, cmd))), modeltest.Text("done"))
	_, results = s.mustRun(input(thread, "Call the API."))
	r := wantResult(t, results, "e2", false, "echo authorization=Bearer "+egress.Placeholder)
	if h := api.Headers(); len(h) != 1 || h[0] != "Bearer "+value {
		t.Fatalf("the server saw %q, want the injected header", h)
	}
	if strings.Contains(r.String(), value) {
		t.Fatal("the tool result holds the secret")
	}
	msgs, err := s.c.ListMessages(s.ctx(), &plumbv1.ListMessagesRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := protojson.Marshal(msgs); bytes.Contains(b, []byte(value)) {
		t.Fatal("the thread's messages hold the secret")
	}
	for _, req := range s.model.Requests("main") {
		if strings.Contains(fmt.Sprint(req), value) {
			t.Fatal("a model request holds the secret")
		}
	}
}

// bridgeAddr is the default bridge's address on the host side.
func bridgeAddr(t *testing.T, cli *client.Client) string {
	t.Helper()
	br, err := cli.NetworkInspect(t.Context(), "bridge", client.NetworkInspectOptions{})
	if err != nil || len(br.Network.IPAM.Config) == 0 {
		t.Fatalf("default bridge: %v", err)
	}
	subnet := br.Network.IPAM.Config[0].Subnet
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if p, err := netip.ParsePrefix(ad.String()); err == nil && subnet.Contains(p.Addr()) {
			return p.Addr().String()
		}
	}
	t.Fatalf("no host address in the default bridge's subnet %s", subnet)
	return ""
}
