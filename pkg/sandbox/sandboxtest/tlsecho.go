package sandboxtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TLSEcho is a real HTTPS server that records the Authorization header of
// each request and echoes it back (in the X-Echo header and the body).
type TLSEcho struct {
	// Addr is its ip:port.
	Addr string
	// PEM is its self-signed certificate (its own root), CN its name.
	PEM string
	CN  string

	mu   sync.Mutex
	seen []string
}

// Headers returns the Authorization headers seen so far, in order.
func (s *TLSEcho) Headers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// StartTLSEcho serves a TLSEcho on ip with a self-signed certificate for
// ip named cn, until t ends.
func StartTLSEcho(t testing.TB, ip, cn string) *TLSEcho {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.ParseIP(ip)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(ip, "0"), &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &TLSEcho{Addr: ln.Addr().String(), CN: cn, PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		s.mu.Lock()
		s.seen = append(s.seen, a)
		s.mu.Unlock()
		w.Header().Set("X-Echo", a)
		fmt.Fprintf(w, "echo authorization=%s", a)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}
