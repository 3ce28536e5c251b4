package replicas

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/httpapi"
)

// TestHTTPSessionOnEveryReplica: a browser session made on replica a
// (POST /v1/session) authenticates on replica b, as a load balancer
// without sticky sessions would send it, because the session lives in the
// shared PostgreSQL store; signing out on b ends it on a too.
func TestHTTPSessionOnEveryReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
	defer cancel()
	a, b := "http://"+f.a.proc.HTTPAddr, "http://"+f.b.proc.HTTPAddr
	do := func(method, url string, cookie *http.Cookie, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, string(out)
	}

	resp, body := do(http.MethodPost, a+"/v1/session", nil, `{"token":"`+agentdToken+`"}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign in on a: HTTP %d %s", resp.StatusCode, body)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == httpapi.SessionCookie {
			cookie = c
		}
	}
	if cookie == nil || strings.Contains(cookie.Value, agentdToken) {
		t.Fatalf("session cookie %v", cookie)
	}

	// A thread made with the cookie on a, read with it on b.
	resp, body = do(http.MethodPost, a+"/plumb.v1.AgentService/CreateThread", cookie, `{"metadata":{"made":"on-a"}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CreateThread on a: HTTP %d %s", resp.StatusCode, body)
	}
	for _, base := range []string{a, b} {
		resp, body = do(http.MethodPost, base+"/plumb.v1.AgentService/ListThreads", cookie, `{}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "on-a") {
			t.Fatalf("ListThreads with a's cookie on %s: HTTP %d %s", base, resp.StatusCode, body)
		}
	}

	// Signing out on b ends the session everywhere.
	if resp, body = do(http.MethodDelete, b+"/v1/session", cookie, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign out on b: HTTP %d %s", resp.StatusCode, body)
	}
	for _, base := range []string{a, b} {
		resp, body = do(http.MethodPost, base+"/plumb.v1.AgentService/ListThreads", cookie, `{}`)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, httpapi.ReasonSession) {
			t.Fatalf("a signed-out cookie on %s: HTTP %d %s", base, resp.StatusCode, body)
		}
	}
}
