// Command tlsprobe is a test client that plumb's tests copy into a box: it
// sends one HTTPS request the way an ordinary program does (HTTPS_PROXY,
// SSL_CERT_FILE) and prints what it got as one JSON line, so a test can
// tell what a TLS client in the box sees.
//
// Usage: tlsprobe URL [header: value]...
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// result is what the probe prints.
type result struct {
	Status int         `json:"status"`
	Issuer string      `json:"issuer"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
	Error  string      `json:"error,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tlsprobe URL [header: value]...")
		os.Exit(2)
	}
	var r result
	req, err := http.NewRequest(http.MethodGet, os.Args[1], nil)
	if err == nil {
		for _, h := range os.Args[2:] {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		c := &http.Client{Timeout: 60 * time.Second}
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			r.Status, r.Header, r.Body = resp.StatusCode, resp.Header, string(b)
			if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
				r.Issuer = resp.TLS.PeerCertificates[0].Issuer.CommonName
			}
		}
	}
	if err != nil {
		r.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
