package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/pkg/backend"
	sandboxbackend "github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

const otherToken = "e2e-other-tenant-token"

// startWithPreviews starts the stack with a preview listener, a signing
// key and a second tenant ("other").
func startWithPreviews(t *testing.T) *stack {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "preview.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", preview.MinKeyBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("other "+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extraArgs = []string{"--preview-addr", "127.0.0.1:0", "--preview-key-file", key, "--credentials-file", creds}
	t.Cleanup(func() { extraArgs = nil })
	return start(t)
}

// get fetches url and returns the response (body read) or the error.
func get(t *testing.T, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET a preview: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// pollStatus GETs url until it answers want (generous deadline: a busy
// machine), and returns the last body.
func pollStatus(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, body := get(t, url, nil)
		if resp.StatusCode == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s... answered %d %q, want %d", url[:strings.Index(url, "/p/")+3], resp.StatusCode, body, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func reason(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || pbconv.Reason(err) != want {
		t.Fatalf("got %v (reason %q), want %s %s", err, pbconv.Reason(err), code, want)
	}
}

// TestPreviewURLs: a server the agent starts in its box with execute is
// reached through a preview URL over HTTP and WebSocket; the URL works only
// for its port and its lifetime, strips the client's credentials and the
// token, sandboxes the page; another tenant cannot see or revoke it; a
// port with nothing listening, an expired, a forged and a revoked token,
// and a deleted box each get a clear answer.
func TestPreviewURLs(t *testing.T) {
	s := startWithPreviews(t)
	ac := plumbv1.NewAgentServiceClient(s.conn)
	other := plumbv1.NewAgentServiceClient(daemontest.Dial(t, s.agentd, otherToken))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A thread without a sandbox has nothing to preview.
	th, err := ac.CreateThread(ctx, &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ac.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: th.GetThread().GetId(), Port: 8000})
	reason(t, err, codes.FailedPrecondition, "NO_SANDBOX")
	for _, bad := range []*plumbv1.CreatePreviewRequest{
		{ThreadId: th.GetThread().GetId(), Port: 0},
		{ThreadId: th.GetThread().GetId(), Port: 70000},
		{ThreadId: th.GetThread().GetId(), Port: 8000, Ttl: durationpb.New(48 * time.Hour)},
		{Port: 8000},
	} {
		_, err := ac.CreatePreview(ctx, bad)
		reason(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	}

	// The first run creates the thread's box; the binary goes in; the
	// second run's execute starts the server in the background.
	s.model.Script("main", modeltest.Calls(modeltest.Call{ID: "c1", Name: "execute", Args: `{"command":"true"}`}), modeltest.Text("box ready"))
	out, err := s.agentctl(t, "run", "--json", "Get a box.")
	if err != nil {
		t.Fatal(err)
	}
	threadID := events(t, out)[0].GetThreadId()
	got, err := ac.GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threadID})
	if err != nil || got.GetThread().GetSandboxId() == "" {
		t.Fatalf("thread = %v, %v; want a sandbox", got, err)
	}
	sandboxID := got.GetThread().GetSandboxId()
	bin, err := os.ReadFile(bins["previewserver"])
	if err != nil {
		t.Fatal(err)
	}
	box := sandboxbackend.New(daemontest.Dial(t, s.sandboxd, sandboxdToken), sandboxID, "/workspace")
	if res, err := box.Upload(ctx, []backend.UploadItem{{Path: "/workspace/previewserver", Content: bin}}); err != nil || res[0].Err != nil {
		t.Fatalf("upload the server: %v %+v", err, res)
	}
	s.model.Script("main", modeltest.Calls(modeltest.Call{ID: "c2", Name: "execute",
		Args: `{"command":"chmod +x /workspace/previewserver && (/workspace/previewserver 8000 >/workspace/server.log 2>&1 &) && echo started"}`}), modeltest.Text("serving"))
	if _, err := s.agentctl(t, "run", "--json", "--thread", threadID, "Serve it."); err != nil {
		t.Fatal(err)
	}

	created, err := ac.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: threadID, Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	url := created.GetUrl()
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(url, "/p/") || !strings.HasSuffix(url, "/") {
		t.Fatalf("preview URL %q", url)
	}
	if p := created.GetPreview(); p.GetPort() != 8000 || p.GetThreadId() != threadID || p.GetRevoked() || time.Until(p.GetExpireTime().AsTime()) < 50*time.Minute {
		t.Fatalf("preview = %v, want port 8000 of the thread for an hour", p)
	}

	t.Run("HTTP", func(t *testing.T) {
		body := pollStatus(t, url+"hello", http.StatusOK)
		if body != "hello from the box" {
			t.Fatalf("body %q", body)
		}
		resp, _ := get(t, url+"hello", nil)
		h := resp.Header
		if len(h.Values("Set-Cookie")) != 0 || h.Get("Service-Worker-Allowed") != "" {
			t.Errorf("a box's cookie or service-worker scope reached the client: %v", h)
		}
		if h.Get("Content-Security-Policy") != preview.CSP || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("response headers %v, want the sandboxing CSP and no-referrer", h)
		}
		// The box sees neither the token nor the client's credentials.
		resp, body = get(t, url+"echo?x=1", http.Header{"Authorization": {"Bearer " + agentdToken}, "Cookie": {"session=secret"}, "X-Custom": {"kept"}})
		tok := strings.TrimSuffix(url[strings.Index(url, "/p/")+3:], "/")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "path=/echo\n") || !strings.Contains(body, "query=x=1\n") ||
			!strings.Contains(body, "host=localhost:8000\n") || !strings.Contains(body, "header X-Custom: kept") {
			t.Fatalf("the box saw %d %q", resp.StatusCode, body)
		}
		for _, leak := range []string{agentdToken, "session=secret", tok, "Authorization", "Cookie", "X-Forwarded-For"} {
			if strings.Contains(body, leak) {
				t.Errorf("the box saw %q: %s", leak, body)
			}
		}
		// Without the trailing slash: redirected to it.
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(url, "/"), nil)
		r, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusFound || !strings.HasSuffix(r.Header.Get("Location"), tok+"/") {
			t.Errorf("no trailing slash: %d %q", r.StatusCode, r.Header.Get("Location"))
		}
	})

	t.Run("WebSocket", func(t *testing.T) {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		c.SetReadLimit(4 << 20)
		for _, msg := range []string{"one", strings.Repeat("x", 1<<20), "three"} {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.Read(ctx)
			if err != nil || string(got) != "echo: "+msg {
				t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
			}
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		// A port nothing listens on.
		p, err := ac.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: threadID, Port: 8001})
		if err != nil {
			t.Fatal(err)
		}
		if body := pollStatus(t, p.GetUrl(), http.StatusBadGateway); !strings.Contains(body, "nothing listens on port 8001") {
			t.Errorf("502 body %q", body)
		}
		// A forged token, and a token signed with another key.
		base := url[:strings.Index(url, "/p/")+3]
		if resp, body := get(t, base+"AAAA/", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("forged token: %d %q", resp.StatusCode, body)
		}
		otherKeys, _ := preview.NewKeys([]byte(strings.Repeat("o", preview.MinKeyBytes)), nil)
		forged, _ := otherKeys.Sign(p.GetPreview().GetId(), time.Now().Add(time.Hour))
		if resp, body := get(t, base+forged+"/", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("token signed with another key: %d %q", resp.StatusCode, body)
		}
		// Expiry.
		short, err := ac.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: threadID, Port: 8000, Ttl: durationpb.New(2 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if body := pollStatus(t, short.GetUrl()+"hello", http.StatusGone); !strings.Contains(body, "expired") {
			t.Errorf("410 body %q", body)
		}
	})

	t.Run("Tenancy", func(t *testing.T) {
		_, err := other.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: threadID, Port: 8000})
		reason(t, err, codes.NotFound, "THREAD_NOT_FOUND")
		_, err = other.ListPreviews(ctx, &plumbv1.ListPreviewsRequest{ThreadId: threadID})
		reason(t, err, codes.NotFound, "THREAD_NOT_FOUND")
		_, err = other.RevokePreview(ctx, &plumbv1.RevokePreviewRequest{PreviewId: created.GetPreview().GetId()})
		reason(t, err, codes.NotFound, "PREVIEW_NOT_FOUND")
		pollStatus(t, url+"hello", http.StatusOK)
	})

	t.Run("Revoke", func(t *testing.T) {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		if _, err := ac.RevokePreview(ctx, &plumbv1.RevokePreviewRequest{PreviewId: created.GetPreview().GetId()}); err != nil {
			t.Fatal(err)
		}
		if resp, body := get(t, url+"hello", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("revoked preview: %d %q", resp.StatusCode, body)
		}
		// The open WebSocket is closed too (at the next re-check).
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer rcancel()
		for {
			if err := c.Write(rctx, websocket.MessageText, []byte("still there?")); err != nil {
				break
			}
			if _, _, err := c.Read(rctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatal("the WebSocket of a revoked preview stayed open")
				}
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		list, err := ac.ListPreviews(ctx, &plumbv1.ListPreviewsRequest{ThreadId: threadID})
		if err != nil {
			t.Fatal(err)
		}
		revoked := false
		for _, p := range list.GetPreviews() {
			revoked = revoked || p.GetId() == created.GetPreview().GetId() && p.GetRevoked()
		}
		if !revoked {
			t.Errorf("ListPreviews = %v, want the revoked preview marked", list.GetPreviews())
		}
	})

	t.Run("CLI", func(t *testing.T) {
		out, err := s.agentctl(t, "preview", "create", "--thread", threadID, "--port", "8000", "--ttl", "10m", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var resp plumbv1.CreatePreviewResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil || resp.GetPreview().GetPort() != 8000 {
			t.Fatalf("preview create --json printed %q: %v", out, err)
		}
		pollStatus(t, resp.GetUrl()+"hello", http.StatusOK)
		if out, err := s.agentctl(t, "preview", "ls", "--thread", threadID); err != nil || !strings.Contains(out, resp.GetPreview().GetId()) {
			t.Fatalf("preview ls: %q, %v", out, err)
		}
		if _, err := s.agentctl(t, "preview", "rm", resp.GetPreview().GetId()); err != nil {
			t.Fatal(err)
		}
		pollStatus(t, resp.GetUrl()+"hello", http.StatusNotFound)
		if _, err := s.agentctl(t, "preview", "create", "--thread", threadID, "--port", "0"); err == nil || !strings.Contains(err.Error(), "port") {
			t.Fatalf("preview create --port 0: %v", err)
		}
	})

	t.Run("BoxGone", func(t *testing.T) {
		p, err := ac.CreatePreview(ctx, &plumbv1.CreatePreviewRequest{ThreadId: threadID, Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		pollStatus(t, p.GetUrl()+"hello", http.StatusOK)
		sc := plumbv1.NewSandboxServiceClient(daemontest.Dial(t, s.sandboxd, sandboxdToken))
		if _, err := sc.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: sandboxID}); err != nil {
			t.Fatal(err)
		}
		if body := pollStatus(t, p.GetUrl()+"hello", http.StatusBadGateway); !strings.Contains(body, "gone") {
			t.Errorf("502 body %q", body)
		}
	})
}
