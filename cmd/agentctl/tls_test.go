package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/daemon/tlstest"
	"github.com/plumbhq/plumb/internal/grpccreds"
)

// agentctl reaches daemons that require client certificates with
// --tls-ca/--tls-cert/--tls-key, and fails without a certificate.
func TestHealthOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caPath := ca.WriteCA(t, dir, "ca.pem")
	srvCert, srvKey, _ := ca.WritePair(t, dir, "server")
	cliCert, cliKey, _ := ca.WritePair(t, dir, "client")
	stc, err := grpccreds.ServerTLS(grpccreds.TLSFiles{Cert: srvCert, Key: srvKey, ClientCA: caPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Serve(ctx, daemon.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownGrace: time.Second,
			TLS: stc, ClientCertRequired: true, Ready: func(g, _ net.Addr) { ready <- g.String() }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	health := func(extra ...string) (string, error) {
		var out bytes.Buffer
		args := append([]string{"--agentd", addr, "--sandboxd", addr, "--timeout", "1m"}, extra...)
		err := run(context.Background(), append(args, "health"), stdio{in: strings.NewReader(""), out: &out, err: &out, getenv: func(string) string { return "" }})
		return out.String(), err
	}
	if out, err := health("--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey); err != nil || strings.Count(out, "SERVING") != 2 {
		t.Fatalf("with a client certificate: %q, %v", out, err)
	}
	if _, err := health("--tls-ca", caPath); err == nil {
		t.Fatal("health without a client certificate succeeded")
	}
	if _, err := health("--tls-ca", dir+"/missing.pem"); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("missing CA file: %v", err)
	}
}
