package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/tlstest"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	caPath, otherPath := ca.WriteCA(t, dir, "ca.pem"), other.WriteCA(t, dir, "other.pem")
	srvCert, srvKey, srvSN := ca.WritePair(t, dir, "server")
	cliCert, cliKey, cliSN := ca.WritePair(t, dir, "client")
	badCert, badKey, _ := other.WritePair(t, dir, "stranger")

	lg := zaptest.NewLogger(t)
	stc, err := grpccreds.ServerTLS(grpccreds.TLSFiles{Cert: srvCert, Key: srvKey, ClientCA: caPath}, lg)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveWith(t, Options{TLS: stc, ClientCertRequired: true})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// call dials afresh (a new handshake) and returns the server
	// certificate's serial and the client certificate serial the server saw.
	call := func(t *testing.T, f grpccreds.TLSFiles) (server int64, client string, err error) {
		t.Helper()
		tc, err := grpccreds.ClientTLS(f, lg)
		if err != nil {
			t.Fatal(err)
		}
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			server = cs.PeerCertificates[0].SerialNumber.Int64()
			return nil
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := plumbv1.NewSandboxServiceClient(conn).GetSandbox(ctx, &plumbv1.GetSandboxRequest{})
		return server, resp.GetSandbox().GetWorker(), err
	}

	t.Run("good client certificate", func(t *testing.T) {
		s, c, err := call(t, grpccreds.TLSFiles{CA: caPath, Cert: cliCert, Key: cliKey})
		if err != nil || s != srvSN || c != big.NewInt(cliSN).String() {
			t.Fatalf("server %d client %s err %v; want %d %d", s, c, err, srvSN, cliSN)
		}
	})
	for name, f := range map[string]grpccreds.TLSFiles{
		"no client certificate":            {CA: caPath},
		"client certificate of a stranger": {CA: caPath, Cert: badCert, Key: badKey},
		"server not trusted":               {CA: otherPath, Cert: cliCert, Key: cliKey},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := call(t, f); err == nil {
				t.Fatal("call succeeded")
			}
		})
	}
	t.Run("rotation", func(t *testing.T) {
		_, _, newSrvSN := ca.WritePair(t, dir, "server")
		_, _, newCliSN := ca.WritePair(t, dir, "client")
		s, c, err := call(t, grpccreds.TLSFiles{CA: caPath, Cert: cliCert, Key: cliKey})
		if err != nil || s != newSrvSN || c != big.NewInt(newCliSN).String() {
			t.Fatalf("after rotation: server %d client %s err %v; want %d %d", s, c, err, newSrvSN, newCliSN)
		}
		// A broken rewrite keeps the last good pair.
		writeFile(t, srvCert, "garbage")
		s, _, err = call(t, grpccreds.TLSFiles{CA: caPath, Cert: cliCert, Key: cliKey})
		if err != nil || s != newSrvSN {
			t.Fatalf("after a bad rewrite: server %d err %v; want %d", s, err, newSrvSN)
		}
	})
}

func TestSecurityStopsOnBadMaterial(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	writeFile(t, garbage, "not pem")
	writeFile(t, filepath.Join(dir, "creds"), "lonely\n")
	for name, c := range map[string]Common{
		"tls":         {TLS: grpccreds.TLSFiles{Cert: garbage, Key: garbage}},
		"credentials": {CredentialsFile: filepath.Join(dir, "creds")},
		"token":       {TokenFile: filepath.Join(dir, "missing")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Security(false, nil)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("err = %v, want a usage error naming the file", err)
			}
		})
	}
}
