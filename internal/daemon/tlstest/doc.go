// Package tlstest makes throw-away certificate authorities and leaf
// certificates in-process (crypto/x509) for TLS and mTLS tests.
package tlstest
