package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
)

//go:embed static
var static embed.FS

// CSP is the console's Content-Security-Policy: its own scripts, styles
// and connections only, no inline script or style, never framed.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// Terminal bounds.
const (
	// MaxInput is the largest terminal message read from the browser.
	MaxInput = 64 << 10
	// AuthTimeout is how long the first message (the token) may take.
	AuthTimeout = 10 * time.Second
	// outputChunk is the most output sent in one WebSocket message.
	outputChunk = 32 << 10
)

// Authenticate checks a bearer token and returns ctx with the caller's
// tenant (daemon.TokenAuth).
type Authenticate func(ctx context.Context, token string) (context.Context, error)

// Terminals starts a terminal shell in a thread's box for the context's
// tenant (*threadbox.Service).
type Terminals interface {
	Terminal(ctx context.Context, threadID string) (backend.Process, error)
}

// Config configures the console.
type Config struct {
	// Auth authenticates the terminal's token. Required.
	Auth Authenticate
	// Terminals starts shells; nil: the terminal answers 503 (no
	// sandboxd).
	Terminals Terminals
	// Logger receives the console's logs (never a token).
	Logger *zap.Logger
}

// Console serves the web console.
type Console struct {
	cfg Config
	lg  *zap.Logger
	fs  http.Handler
}

// New returns a console.
func New(cfg Config) (*Console, error) {
	if cfg.Auth == nil {
		return nil, errors.New("console: an authenticator is required")
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Console{cfg: cfg, lg: lg.Named("console"), fs: http.StripPrefix("/ui/", http.FileServerFS(sub))}, nil
}

// Handlers are the console's routes, by ServeMux pattern.
func (c *Console) Handlers() map[string]http.Handler {
	return map[string]http.Handler{
		"/ui":              headers(http.RedirectHandler("/ui/", http.StatusMovedPermanently)),
		"/ui/":             headers(http.HandlerFunc(c.page)),
		"/ui/api/terminal": headers(http.HandlerFunc(c.terminal)),
	}
}

// headers sets the security headers of every console response.
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// The page changes with the binary: revalidate, never trust a stale copy.
	w.Header().Set("Cache-Control", "no-cache")
	c.fs.ServeHTTP(w, r)
}

// hello is the terminal's first message.
type hello struct {
	Token string `json:"token"`
}

// terminal serves /ui/api/terminal?thread=ID: a WebSocket whose first
// text message is {"token": "..."}; then text or binary messages from
// the browser are the shell's stdin, and the server's binary messages its
// output. The socket closes when the shell exits (status 1000, reason
// "exit N").
func (c *Console) terminal(w http.ResponseWriter, r *http.Request) {
	thread := r.URL.Query().Get("thread")
	if thread == "" {
		http.Error(w, "the thread query parameter is required", http.StatusBadRequest)
		return
	}
	if c.cfg.Terminals == nil {
		http.Error(w, "agentd has no sandboxd: no terminal", http.StatusServiceUnavailable)
		return
	}
	// Accept checks that Origin is this host (a cross-site page cannot
	// open a terminal) before upgrading.
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(MaxInput)
	ctx := r.Context()

	actx, cancel := context.WithTimeout(ctx, AuthTimeout)
	_, msg, err := conn.Read(actx)
	cancel()
	var h hello
	if err == nil {
		err = json.Unmarshal(msg, &h)
	}
	if err != nil {
		conn.Close(websocket.StatusPolicyViolation, "the first message must be {\"token\": ...}")
		return
	}
	ctx, err = c.cfg.Auth(ctx, h.Token)
	if err != nil {
		conn.Close(websocket.StatusPolicyViolation, "unauthenticated")
		return
	}
	lg := c.lg.With(zap.String("thread-id", thread), zap.String("tenant", tenant.From(ctx)))
	p, err := c.cfg.Terminals.Terminal(ctx, thread)
	if err != nil {
		lg.Info("terminal refused", zap.Error(err))
		conn.Close(websocket.StatusPolicyViolation, closeReason(err))
		return
	}
	defer p.Close()
	lg.Info("terminal opened")
	defer lg.Info("terminal closed")

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	// Browser → stdin until the socket closes; then the shell ends.
	wg.Go(func() {
		defer cancel()
		in := p.Stdin()
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if _, err := in.Write(b); err != nil {
				return
			}
		}
	})
	// stdout (the shell's stderr is merged into it) → browser.
	buf := make([]byte, outputChunk)
	out := p.Stdout()
	for {
		n, err := out.Read(buf)
		if n > 0 {
			if werr := conn.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	exit, err := p.Wait(wctx)
	wcancel()
	if err != nil {
		conn.Close(websocket.StatusInternalError, "the shell's stream failed")
		return
	}
	conn.Close(websocket.StatusNormalClosure, "exit "+itoa(exit.ExitCode))
}

// closeReason is a short, token-free reason for a refused terminal (a
// WebSocket close reason holds at most 123 bytes).
func closeReason(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }
