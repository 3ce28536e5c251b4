package grpccreds_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/internal/daemon/tlstest"
	"github.com/plumbhq/plumb/internal/grpccreds"
)

func TestTLSMaterialErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	cert, key, _ := ca.WritePair(t, dir, "ok")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name   string
		server bool
		f      grpccreds.TLSFiles
		want   string
	}{
		{"missing cert", true, grpccreds.TLSFiles{Cert: missing, Key: key}, missing},
		{"missing key", true, grpccreds.TLSFiles{Cert: cert, Key: missing}, missing},
		{"garbage cert", true, grpccreds.TLSFiles{Cert: garbage, Key: key}, garbage},
		{"garbage client CA", true, grpccreds.TLSFiles{Cert: cert, Key: key, ClientCA: garbage}, garbage},
		{"cert without key", true, grpccreds.TLSFiles{Cert: cert}, "--tls-key"},
		{"garbage CA", false, grpccreds.TLSFiles{CA: garbage}, garbage},
		{"missing client key", false, grpccreds.TLSFiles{Cert: cert, Key: missing}, missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.server {
				_, err = grpccreds.ServerTLS(tt.f, nil)
			} else {
				_, err = grpccreds.ClientTLS(tt.f, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line naming %q", err, tt.want)
			}
		})
	}
}
