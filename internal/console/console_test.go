package console

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
)

const goodToken = "s3cret-token"

func auth(ctx context.Context, tok string) (context.Context, error) {
	if tok != goodToken {
		return nil, status.Error(codes.Unauthenticated, "wrong token")
	}
	return tenant.With(ctx, "acme"), nil
}

// refuseTerminals fails the test if a terminal is started: the cases
// using it must be refused before.
type refuseTerminals struct{ t *testing.T }

func (r refuseTerminals) Terminal(context.Context, string) (backend.Process, error) {
	r.t.Error("a terminal was started")
	return nil, errors.New("no")
}

func server(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range c.Handlers() {
		mux.Handle(p, h)
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestPageShell(t *testing.T) {
	s := server(t, Config{Auth: auth})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
		location     string
	}{
		{"GET", "/ui/", 200, "text/html", ""},
		{"GET", "/ui/app.js", 200, "text/javascript", ""},
		{"GET", "/ui/schema.js", 200, "text/javascript", ""},
		{"GET", "/ui/sandboxes.js", 200, "text/javascript", ""},
		{"GET", "/ui/style.css", 200, "text/css", ""},
		{"HEAD", "/ui/", 200, "text/html", ""},
		{"GET", "/ui", 301, "", "/ui/"},
		{"GET", "/ui/nope.js", 404, "", ""},
		{"POST", "/ui/", 405, "", ""},
		{"GET", "/ui/api/terminal", 400, "", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
			resp, err := noFollow.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tc.ctype)
			}
			if tc.location != "" && resp.Header.Get("Location") != tc.location {
				t.Errorf("Location %q, want %q", resp.Header.Get("Location"), tc.location)
			}
			for h, want := range map[string]string{
				"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
				"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(CSP, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	if strings.Contains(CSP, "unsafe") {
		t.Errorf("CSP allows unsafe sources: %s", CSP)
	}
}

// TestAssetsAreSafe checks the embedded page: every asset it names is
// embedded, nothing is fetched from elsewhere, no inline script, style or
// handler (the CSP would block them), and the scripts never parse data as
// HTML.
func TestAssetsAreSafe(t *testing.T) {
	html, err := fs.ReadFile(static, "static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(html), -1) {
		if strings.Contains(m[1], "//") {
			t.Errorf("index.html fetches %s from elsewhere", m[1])
			continue
		}
		if _, err := fs.Stat(static, "static/"+m[1]); err != nil {
			t.Errorf("index.html names %s, not embedded: %v", m[1], err)
		}
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`), // inline script
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\sstyle=`),
		regexp.MustCompile(`\son[a-z]+=`),
	} {
		if bad.Match(html) {
			t.Errorf("index.html has inline code: %s", bad)
		}
	}
	err = fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".js") {
			return err
		}
		src, err := fs.ReadFile(static, path)
		if err != nil {
			return err
		}
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"} {
			if strings.Contains(string(src), sink) {
				t.Errorf("%s uses %s", path, sink)
			}
		}
		if regexp.MustCompile(`https?://`).Match(src) {
			t.Errorf("%s names an absolute URL", path)
		}
		// Every module a script imports is embedded beside it.
		for _, m := range regexp.MustCompile(`(?m)^import .* from '([^']+)';`).FindAllSubmatch(src, -1) {
			name := strings.TrimPrefix(string(m[1]), "./")
			if strings.Contains(name, "/") {
				t.Errorf("%s imports %s from elsewhere", path, m[1])
				continue
			}
			if _, err := fs.Stat(static, "static/"+name); err != nil {
				t.Errorf("%s imports %s, not embedded: %v", path, m[1], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTerminalRefusals(t *testing.T) {
	s := server(t, Config{Auth: auth, Terminals: refuseTerminals{t}})
	off := server(t, Config{Auth: auth})
	ws := "ws" + strings.TrimPrefix(s.URL, "http") + "/ui/api/terminal?thread=t1"
	ctx := context.Background()

	t.Run("no sandboxd", func(t *testing.T) {
		resp, err := http.Get(off.URL + "/ui/api/terminal?thread=t1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", resp.StatusCode)
		}
	})
	t.Run("cross-site origin", func(t *testing.T) {
		_, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
		if err == nil {
			t.Fatal("a cross-site page opened a terminal")
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("answer %v, want 403", resp)
		}
	})
	for _, tc := range []struct{ name, first string }{
		{"wrong token", `{"token":"nope"}`},
		{"no token", `{}`},
		{"not JSON", `hello`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := websocket.Dial(ctx, ws, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if err := c.Write(ctx, websocket.MessageText, []byte(tc.first)); err != nil {
				t.Fatal(err)
			}
			_, _, err = c.Read(ctx)
			if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v (%v), want policy violation", got, err)
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) && strings.Contains(ce.Reason, goodToken) {
				t.Errorf("close reason carries a token: %q", ce.Reason)
			}
		})
	}
}
