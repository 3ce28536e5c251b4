package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// Secret injection (docs/security.md, "Egress secrets"): a create may carry
// rules that make the box's egress proxy set a header, holding a secret, on
// requests to some hosts. The values exist in sandboxd only in memory during
// the create; they go to the proxy in a file copied into its container
// before it starts (injectConfigPath), never in flags, env, labels, logs or
// Info. The box gets a per-box CA certificate (its key stays with the proxy)
// in a bundle at EgressCABundle and the variables that name it.
const (
	// LabelEgressInject marks a box whose proxy injects secrets: its proxy
	// cannot be re-created (sandboxd keeps no value), so an adopted box
	// whose proxy is gone is removed.
	LabelEgressInject = "plumb.egress-inject"
	// injectConfigPath is the proxy's config file in its container.
	injectConfigPath = "/plumb-egress.json"
	// egressCAName is the box's CA bundle, under the working directory.
	egressCAName = ".plumb/egress-ca.pem"
	// boxCAValidity bounds the box CA's life (a box lives as long as it is
	// used; a year is far beyond any TTL in practice).
	boxCAValidity = 365 * 24 * time.Hour
	// maxInjectRules bounds the rules of one create.
	maxInjectRules = 32
)

// systemRootFiles are where Linux distributions keep the system bundle.
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem",
}

// upstreamRoots are the roots an injecting proxy verifies upstreams with:
// Config.EgressUpstreamCA, or the worker's system bundle.
func (m *Manager) upstreamRoots() ([]byte, error) {
	if len(m.cfg.EgressUpstreamCA) > 0 {
		return m.cfg.EgressUpstreamCA, nil
	}
	for _, f := range systemRootFiles {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	return nil, errorf(CodeInvalid, "egress secrets are not available on worker %s: it has no system certificate bundle to verify upstreams with (set egress_upstream_ca)", m.cfg.Worker)
}

// checkInject checks a create's injection rules against its settings and
// the worker's egress allow-list. Errors never show a value.
func (m *Manager) checkInject(t Template, rules []egress.InjectRule) error {
	if len(rules) == 0 {
		return nil
	}
	if t.Network != NetworkEgress {
		return invalidField("egress_secrets", "egress secrets need network egress (the box's network is %q)", t.Network)
	}
	if len(rules) > maxInjectRules {
		return invalidField("egress_secrets", "%d egress secret rules exceed %d", len(rules), maxInjectRules)
	}
	allow, err := egress.ParseRules(m.cfg.Policy.EgressAllow)
	if err != nil {
		return err
	}
	pol := egress.Policy{Allow: allow}
	for _, r := range rules {
		if err := egress.CheckRule(r); err != nil {
			return invalidField("egress_secrets", "%v", err)
		}
		for _, h := range r.Hosts {
			host, port, _ := egress.ParseInjectHost(h)
			if !pol.Admits(host, port) {
				return invalidField("egress_secrets", "egress secret %q: host %s:%d is not on worker %s's egress allow-list", r.Name, host, port, m.cfg.Worker)
			}
		}
	}
	return nil
}

// injection is what one create hands to its proxy and its box.
type injection struct {
	config []byte // the proxy's InjectConfig, JSON
	bundle []byte // the box's CA bundle
}

// newInjection makes the box CA and the proxy's config for rules.
func (m *Manager) newInjection(rules []egress.InjectRule) (*injection, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	roots, err := m.upstreamRoots()
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, r := range rules {
		hosts = append(hosts, r.Hosts...)
	}
	caPEM, keyPEM, err := egress.NewCA(hosts, boxCAValidity)
	if err != nil {
		return nil, fmt.Errorf("box CA: %w", err)
	}
	b, err := json.Marshal(egress.InjectConfig{Rules: rules, CACert: caPEM, CAKey: keyPEM, UpstreamRoots: string(roots)})
	if err != nil {
		return nil, err
	}
	if len(b) > egress.MaxInjectConfigBytes {
		return nil, errorf(CodeInvalid, "egress secrets: the proxy's configuration is %d bytes (at most %d; the upstream roots are most of it)", len(b), egress.MaxInjectConfigBytes)
	}
	return &injection{config: b, bundle: append([]byte(caPEM), roots...)}, nil
}

// egressCAPath is where the box finds its CA bundle.
func egressCAPath(t Template) string { return path.Join(t.WorkingDir, egressCAName) }

// injectEnv names the box's CA bundle to the usual TLS clients.
func injectEnv(t Template) []string {
	p := egressCAPath(t)
	return []string{"SSL_CERT_FILE=" + p, "REQUESTS_CA_BUNDLE=" + p, "CURL_CA_BUNDLE=" + p, "NODE_EXTRA_CA_CERTS=" + p}
}

// copyInjectConfig copies the proxy's config into its created, not yet
// started, container, readable by the proxy's user only.
func (m *Manager) copyInjectConfig(ctx context.Context, cid string, config []byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: injectConfigPath[1:], Mode: 0o400, Uid: 65532, Gid: 65532, Size: int64(len(config)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(config); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := m.api.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		// The engine's error names the container, never the content.
		return fmt.Errorf("copy the injection config into the egress proxy: %w", err)
	}
	return nil
}

// writeCABundle writes the box's CA bundle through its agent, before the
// box is handed out.
func (m *Manager) writeCABundle(ctx context.Context, sb *sandbox, bundle []byte) error {
	ch, err := m.channel(ctx, sb)
	if err != nil {
		return err
	}
	t := sb.info.Settings
	p := egressCAPath(t)
	if t.Home() == "/" { // file operations see the working dir as "/"
		p = "/" + egressCAName
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ch.exchange(wctx, agentproto.OpWrite, agentproto.WriteArgs{Path: p}, bundle, nil); err != nil {
		return fmt.Errorf("write the egress CA bundle: %w", err)
	}
	return nil
}

// errProxyGone is why an adopted injecting box is removed.
var errProxyGone = errors.New("its egress proxy injected secrets and is gone; sandboxd keeps no secret to re-create it")
