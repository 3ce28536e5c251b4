package grpccreds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.uber.org/zap"
)

// TLSFiles names a daemon's TLS material: the server side (Cert, Key and,
// to require client certificates, ClientCA) or a client side (CA to verify
// the server, Cert and Key to present).
type TLSFiles struct {
	// Cert and Key are a PEM certificate chain and its private key.
	Cert, Key string
	// CA is the PEM bundle a client verifies the server with (empty =
	// the system roots).
	CA string
	// ClientCA, on a server, is the PEM bundle client certificates must
	// chain to; setting it requires a client certificate.
	ClientCA string
}

// loader caches what it loads from files and loads again when one of them
// changes (modification time or size). A load that fails after the first
// keeps the previous value and logs one line.
type loader[T any] struct {
	files []string
	load  func() (T, error)
	lg    *zap.Logger

	mu     sync.Mutex
	stamps []FileStamp
	val    T
}

func newLoader[T any](files []string, lg *zap.Logger, load func() (T, error)) (*loader[T], error) {
	l := &loader[T]{files: files, load: load, lg: lg}
	stamps, err := l.stat()
	if err != nil {
		return nil, err
	}
	if l.val, err = load(); err != nil {
		return nil, err
	}
	l.stamps = stamps
	return l, nil
}

func (l *loader[T]) stat() ([]FileStamp, error) {
	out := make([]FileStamp, len(l.files))
	for i, f := range l.files {
		st, err := StampOf(f)
		if err != nil {
			return nil, fmt.Errorf("TLS file %s: %w", f, err)
		}
		out[i] = st
	}
	return out, nil
}

func (l *loader[T]) get() T {
	l.mu.Lock()
	defer l.mu.Unlock()
	stamps, err := l.stat()
	if err != nil || equalStamps(stamps, l.stamps) {
		return l.val
	}
	l.stamps = stamps // a bad file is logged once per change
	v, err := l.load()
	if err != nil {
		l.lg.Warn("TLS material not reloaded; keeping the current one", zap.Error(err))
		return l.val
	}
	l.lg.Info("TLS material reloaded", zap.Strings("files", l.files))
	l.val = v
	return v
}

func equalStamps(a, b []FileStamp) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func loadPair(cert, key string) (tls.Certificate, error) {
	if _, err := os.Stat(cert); err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS certificate %s: %w", cert, err)
	}
	if _, err := os.Stat(key); err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS key %s: %w", key, err)
	}
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("TLS certificate %s / key %s: %v", cert, key, err)
	}
	return c, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("TLS CA file %s: %w", path, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", path)
	}
	return p, nil
}

// Enabled reports whether a server side is configured (Cert and Key).
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// ServerTLS loads the server side of f and returns a config that re-reads
// the files on the first handshake after one of them changed. Material
// that does not load is an error naming the file.
func ServerTLS(f TLSFiles, lg *zap.Logger) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("TLS: --tls-cert and --tls-key go together (and --tls-client-ca needs both)")
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	files := []string{f.Cert, f.Key}
	if f.ClientCA != "" {
		files = append(files, f.ClientCA)
	}
	l, err := newLoader(files, lg, func() (*tls.Config, error) {
		pair, err := loadPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}}
		if f.ClientCA != "" {
			if c.ClientCAs, err = loadPool(f.ClientCA); err != nil {
				return nil, err
			}
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return l.get(), nil },
	}, nil
}

// ClientTLS returns the client side of f: the server is verified with CA
// (or the system roots), and Cert/Key, when given, are presented and
// re-read when they change. Material that does not load is an error
// naming the file.
func ClientTLS(f TLSFiles, lg *zap.Logger) (*tls.Config, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		p, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		c.RootCAs = p
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("TLS: a client certificate needs both its certificate and its key file")
	}
	if f.Cert != "" {
		l, err := newLoader([]string{f.Cert, f.Key}, lg, func() (*tls.Certificate, error) {
			pair, err := loadPair(f.Cert, f.Key)
			return &pair, err
		})
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return l.get(), nil }
	}
	return c, nil
}
