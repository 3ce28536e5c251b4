package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// chromium returns Debian's chromium: missing, the test fails under
// CI=true and skips elsewhere (scripts/test-deps.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is missing (apt-get install chromium, or make test-deps)")
	}
	t.Skip("chromium is missing (apt-get install chromium)")
	return ""
}

// browser starts a headless chromium of its own (a profile under the
// test's temp dir) and returns a tab's context. The browser process is
// stopped, and waited for, when the test ends, also when it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.UserDataDir(profile),
		chromedp.NoSandbox, // root in CI containers; the page is our own
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, stopTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		// Closes the browser and waits for its process to exit.
		_ = chromedp.Cancel(ctx)
		stopTab()
		stopAlloc()
		// No process of this browser is left (its profile dir is in
		// every one's command line); one that is, is killed and fails
		// the test.
		if left := processesWith(profile); len(left) > 0 {
			for _, p := range left {
				_ = p.Kill()
			}
			t.Errorf("chromium left %d processes behind", len(left))
		}
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// processesWith returns the processes whose command line contains s.
func processesWith(s string) []*os.Process {
	var out []*os.Process
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), s) {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// steps runs named browser steps, each with a generous deadline (a hang
// guard, not a speed bound), saving a screenshot after each one to the
// test's artifact directory.
type steps struct {
	t   *testing.T
	ctx context.Context
	dir string
	n   int
}

func (s *steps) do(name string, actions ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	err := chromedp.Do(ctx, actions...)
	s.n++
	shot := filepath.Join(s.dir, fmt.Sprintf("%02d-%s.png", s.n, strings.ReplaceAll(name, " ", "-")))
	sctx, scancel := context.WithTimeout(s.ctx, time.Minute)
	if png, serr := chromedp.Run(sctx, chromedp.FullScreenshot(100)); serr == nil {
		_ = os.WriteFile(shot, png, 0o644)
		s.t.Logf("step %q: screenshot %s", name, shot)
	}
	scancel()
	if err != nil {
		log, _ := chromedp.Run(s.ctx, chromedp.TextContent(chromedp.CSS("body")))
		s.t.Fatalf("step %q: %v\npage text:\n%s", name, err, log)
	}
}

// xss is markup that would run script if the console parsed data as
// HTML: each sets window.__xss.
const (
	xssMessage = `Please demo <img src=x onerror="window.__xss='message'"><script>window.__xss='script'</script>`
	xssName    = `<img src=x onerror=window.__xss=1>.txt`
	xssContent = `<img src=x onerror="window.__xss=3"><b>bold?</b>`
)

// TestConsoleInBrowser walks the console as a person does: sign in, start
// the demo run, watch it stream, approve its gated command, see it finish,
// find the file it wrote, use the terminal; and checks that markup sent
// through model output, a file name and file contents stays text.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	s := start(t)
	base := "http://" + s.agentd.HTTPAddr
	st := &steps{t: t, ctx: ctx, dir: t.ArtifactDir()}
	t.Logf("screenshots in %s", st.dir)

	var ok bool
	st.do("sign in page",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	st.do("signed in",
		chromedp.SendKeys(chromedp.CSS("#token"), acmeToken),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		chromedp.WaitVisible(chromedp.CSS("#message")),
	)
	st.do("run streams to its approval",
		chromedp.SendKeys(chromedp.CSS("#message"), xssMessage),
		chromedp.Click(chromedp.CSS("#send")),
		chromedp.WaitVisible(chromedp.CSS(`#todos li`)),
		chromedp.WaitVisible(chromedp.CSS(`#log details.tool[data-tool-call-id]`)),
		chromedp.WaitVisible(chromedp.CSS(`.interrupt button[data-decision="DECISION_TYPE_APPROVE"]`)),
	)
	st.do("model output is text",
		eval(`window.__xss === undefined &&
			document.querySelectorAll('#log img, #log script, #log b').length === 0 &&
			[...document.querySelectorAll('#log .msg.assistant')].some(e => e.textContent.includes('<img src=x onerror='))`, &ok),
	)
	if !ok {
		t.Fatal("the model's echo of markup did not render as text")
	}
	st.do("approved, run finished",
		chromedp.Click(chromedp.CSS(`.interrupt button[data-decision="DECISION_TYPE_APPROVE"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#log .run-finished`)),
	)
	var nested, result bool
	st.do("subagent nested, command ran",
		eval(`!!document.querySelector('#log details.tool .sub details.tool')`, &nested),
		eval(`[...document.querySelectorAll('#log details.tool pre.result')].some(e => e.textContent.includes('hello from the plumb demo'))`, &result),
	)
	if !nested {
		t.Error("the subagent's tool calls are not nested under the task call that started them")
	}
	if !result {
		t.Error("the approved command's output is not shown")
	}
	st.do("file browser shows the script",
		chromedp.Click(chromedp.CSS("#tab-files")),
		clickWhenThere(`#file-list button[data-path="/workspace/hello.sh"]`),
		chromedp.WaitVisible(chromedp.CSS("#file-content")),
		waitText("#file-content", "hello from the plumb demo"),
	)
	st.do("terminal runs a command",
		chromedp.Click(chromedp.CSS("#tab-terminal")),
		waitText("#term-out", "$"),
		chromedp.SendKeys(chromedp.CSS("#term-in"), "echo term-$((6*7))\n"),
		waitText("#term-out", "term-42"),
	)
	// A hostile file name and contents, made in the box.
	cmd := fmt.Sprintf("printf '%%s' '%s' > '%s' && echo made-it\n", xssContent, xssName)
	st.do("hostile file made in the terminal",
		chromedp.SendKeys(chromedp.CSS("#term-in"), cmd),
		waitText("#term-out", "made-it"),
	)
	st.do("hostile file name and contents are text",
		chromedp.Click(chromedp.CSS("#tab-files")),
		clickWhenThere(`#file-list button[data-path="/workspace/`+cssString(xssName)+`"]`),
		waitText("#file-content", "bold?"),
		eval(`window.__xss === undefined &&
			document.querySelectorAll('#app img, #app script, #app b').length === 0 &&
			document.querySelector('#file-content').textContent === `+jsString(xssContent)+` &&
			[...document.querySelectorAll('#file-list button')].some(b => b.textContent === `+jsString(xssName)+`)`, &ok),
	)
	if !ok {
		t.Fatal("a hostile file name or its contents did not render as text")
	}
	var users int
	st.do("a thread's history",
		clickWhenThere(`#thread-rows a`),
		chromedp.WaitVisible(chromedp.CSS(`#log .msg.user`)),
		waitText("#log", "hello from the plumb demo"),
		waitText("#log", "Done: the script is in"),
		eval(`document.querySelectorAll('#log .msg.user').length`, &users),
	)
	if users != 1 {
		t.Errorf("the history shows %d user messages, want 1", users)
	}
	edit := `.interrupt button[data-decision="DECISION_TYPE_EDIT"]`
	st.do("a second run, to its approval",
		chromedp.SendKeys(chromedp.CSS("#message"), "once more"),
		chromedp.Click(chromedp.CSS("#send")),
		chromedp.WaitVisible(chromedp.CSS(edit)),
	)
	st.do("edited arguments are checked against the schema",
		chromedp.Click(chromedp.CSS(edit)),
		chromedp.SetValue(chromedp.CSS(".interrupt textarea"), `{"command": 5}`),
		chromedp.Click(chromedp.CSS(edit)),
		waitText(".interrupt .error", "want string"),
	)
	st.do("edited call runs",
		chromedp.SetValue(chromedp.CSS(".interrupt textarea"), `{"command": "echo edited-$((1+1))"}`),
		chromedp.Click(chromedp.CSS(edit)),
		waitText("#log", "edited-2"),
		chromedp.WaitVisible(chromedp.CSS(`#log .run-finished`)),
	)
	var bg string
	st.do("dark mode",
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
			})
			return err
		}),
		eval(`getComputedStyle(document.body).backgroundColor`, &bg),
	)
	if bg != "rgb(17, 19, 23)" {
		t.Errorf("dark mode background is %s", bg)
	}
	var term string
	st.do("no token in the page's URL or storage beyond the session",
		eval(`location.href + ' ' + localStorage.length`, &term),
	)
	if strings.Contains(term, acmeToken) || !strings.HasSuffix(term, " 0") {
		t.Errorf("the token leaked into the URL or localStorage: %q", term)
	}
}

// waitText waits until the element's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector(%s)?.textContent || '').includes(%s)`, jsString(sel), jsString(want)),
		chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}

// clickWhenThere waits for an element and clicks it in one page-side
// step, so a list re-rendered in between cannot leave a stale node.
func clickWhenThere(sel string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.click(); return true; })()`, jsString(sel)),
		chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}

// eval evaluates expr into out.
func eval[T any](expr string, out *T) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		v, err := chromedp.Evaluate[T](expr)(ctx, t)
		*out = v
		return err
	})
}

func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// cssString escapes s for a double-quoted CSS attribute value.
func cssString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
