package browser

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// boxOf finds the sandbox of thread in the operator's fleet listing.
func boxOf(t *testing.T, ctx context.Context, ops plumbv1.AgentServiceClient, thread string) *plumbv1.Sandbox {
	t.Helper()
	r, err := ops.ListFleetSandboxes(ctx, &plumbv1.ListFleetSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range r.GetWorkers() {
		for _, sb := range w.GetSandboxes() {
			if sb.GetLabels()["thread-id"] == thread {
				return sb
			}
		}
	}
	return nil
}

// TestSandboxesInBrowser: an operator opens the Sandboxes view and sees
// both tenants' thread boxes on their worker, with the unreachable worker
// listed as such; filters, sorts, and deletes another tenant's box with
// the keyboard after confirming; a tenant's session has no such view and
// its RPC answers PERMISSION_DENIED (OPERATOR_ONLY), over gRPC and HTTP.
func TestSandboxesInBrowser(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // a worker that cannot be reached
	ctx := browser(t)
	s := start(t, withWorkers(deadAddr))
	base := "http://" + s.agentd.HTTPAddr
	st := &steps{t: t, ctx: ctx, dir: t.ArtifactDir()}
	t.Logf("screenshots in %s", st.dir)

	gctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acme := plumbv1.NewAgentServiceClient(s.conn)
	ops := plumbv1.NewAgentServiceClient(s.ops)
	threadA := runToInterrupt(t, gctx, acme)
	threadB := runToInterrupt(t, gctx, plumbv1.NewAgentServiceClient(s.other))
	boxA, boxB := boxOf(t, gctx, ops, threadA), boxOf(t, gctx, ops, threadB)
	if boxA == nil || boxB == nil || boxA.GetTenant() != "acme" || boxB.GetTenant() != "other" {
		t.Fatalf("the operator's listing: box of A %v, box of B %v", boxA, boxB)
	}

	// A tenant's credential: PERMISSION_DENIED, over gRPC.
	for name, call := range map[string]func() error{
		"ListFleetSandboxes": func() error {
			_, err := acme.ListFleetSandboxes(gctx, &plumbv1.ListFleetSandboxesRequest{})
			return err
		},
		"DeleteFleetSandbox": func() error {
			_, err := acme.DeleteFleetSandbox(gctx, &plumbv1.DeleteFleetSandboxRequest{SandboxId: boxB.GetId()})
			return err
		},
	} {
		err := call()
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || reason(st) != "OPERATOR_ONLY" {
			t.Errorf("%s by a tenant: %v, want PERMISSION_DENIED (OPERATOR_ONLY)", name, err)
		}
	}

	st.do("operator signed in",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), opsToken),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-sandboxes")),
		waitText("#who", "operator"),
	)
	rowA := `#sbx-rows tr[data-id="` + boxA.GetId() + `"]`
	rowB := `#sbx-rows tr[data-id="` + boxB.GetId() + `"]`
	var cells string
	var down, live bool
	st.do("sandboxes of every tenant, per worker",
		chromedp.Click(chromedp.CSS("#view-sandboxes")),
		chromedp.WaitVisible(chromedp.CSS(rowA)),
		chromedp.WaitVisible(chromedp.CSS(rowB)),
		waitText("#workers", "unreachable"),
		eval(`[...document.querySelectorAll(`+jsString(rowA+" td")+`)].map(td => td.textContent).join('|')`, &cells),
		eval(`[...document.querySelectorAll('#workers .worker.down')].some(w => w.textContent.includes(`+jsString(deadAddr)+`))`, &down),
		eval(`[...document.querySelectorAll('#workers .worker:not(.down)')].some(w => w.dataset.worker === `+jsString(boxA.GetWorker())+` && w.textContent.includes('healthy'))`, &live),
	)
	for _, want := range []string{boxA.GetId(), boxA.GetWorker(), "running", "acme", threadA, "ago", "in ", "256 MiB"} {
		if !strings.Contains(cells, want) {
			t.Errorf("row of A's box %q lacks %q", cells, want)
		}
	}
	if !down {
		t.Error("the unreachable worker is not shown as such")
	}
	if !live {
		t.Error("the live worker is not shown healthy beside the unreachable one")
	}
	var shown int
	var sorted string
	st.do("filtered by tenant and sorted",
		chromedp.SendKeys(chromedp.CSS("#sbx-filter"), "other"),
		chromedp.WaitNotPresent(chromedp.CSS(rowA)),
		eval(`document.querySelectorAll('#sbx-rows tr').length`, &shown),
		setInput("#sbx-filter", ""),
		chromedp.Click(chromedp.CSS(`#sbx-table button[data-sort="tenant"]`)),
		chromedp.Click(chromedp.CSS(`#sbx-table button[data-sort="tenant"]`)),
		chromedp.WaitVisible(chromedp.CSS(rowA)),
		eval(`document.querySelector('#sbx-table th:has(button[data-sort="tenant"])').getAttribute('aria-sort') + ' ' +
			[...document.querySelectorAll('#sbx-rows td.tenant')].map(td => td.textContent).join(',')`, &sorted),
	)
	if shown != 1 {
		t.Errorf("the filter 'other' shows %d rows, want 1", shown)
	}
	if !strings.HasPrefix(sorted, "descending other,") || !strings.HasSuffix(sorted, "acme") {
		t.Errorf("sorted by tenant, descending: %q", sorted)
	}
	var confirmFocused bool
	st.do("delete asks for confirmation",
		chromedp.Click(chromedp.CSS(rowB+` button[data-action="delete"]`)),
		chromedp.WaitVisible(chromedp.CSS(rowB+` button[data-action="confirm"]`)),
		eval(`document.activeElement?.dataset.action === 'confirm' && document.activeElement.closest('tr').dataset.id === `+jsString(boxB.GetId()), &confirmFocused),
	)
	if !confirmFocused {
		t.Fatal("the confirmation button does not have the focus")
	}
	st.do("confirmed with the keyboard: the box is gone",
		chromedp.KeyEvent(kb.Enter),
		waitText("#sbx-note", "deleted "+boxB.GetId()+" (tenant other)"),
		chromedp.WaitNotPresent(chromedp.CSS(rowB)),
		chromedp.WaitVisible(chromedp.CSS(rowA)),
	)
	if boxOf(t, gctx, ops, threadB) != nil {
		t.Error("the deleted box is still listed by the RPC")
	}
	var bg string
	st.do("dark mode",
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
			})
			return err
		}),
		eval(`getComputedStyle(document.querySelector('#sandboxes')).backgroundColor`, &bg),
	)
	if bg != "rgb(26, 29, 35)" {
		t.Errorf("dark mode: the Sandboxes card's background is %s", bg)
	}

	// A tenant's session: no Sandboxes view, and the HTTP route answers 403
	// with the same reason.
	var denied string
	var hidden bool
	st.do("a tenant sees no sandboxes view",
		chromedp.Click(chromedp.CSS("#signout")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), acmeToken),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#message")),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			v, err := chromedp.Evaluate[string](`(async () => {
				const r = await fetch('/plumb.v1.AgentService/ListFleetSandboxes', {method: 'POST',
					headers: {'Content-Type': 'application/json', Authorization: 'Bearer ' + sessionStorage.getItem('plumb.token')}, body: '{}'});
				const b = await r.json();
				return r.status + ' ' + b.status + ' ' + b.reason;
			})()`, chromedp.EvalAwaitPromise)(ctx, t)
			denied = v
			return err
		}),
		eval(`document.querySelector('#views').hidden && document.querySelector('#sandboxes').hidden`, &hidden),
	)
	if denied != "403 PERMISSION_DENIED OPERATOR_ONLY" {
		t.Errorf("a tenant's HTTP call: %q, want 403 PERMISSION_DENIED OPERATOR_ONLY", denied)
	}
	if !hidden {
		t.Error("a tenant's session shows the Sandboxes view")
	}
}

// setInput sets an input's value as typing does (an input event follows).
func setInput(sel, v string) chromedp.Action[chromedp.Void] {
	var ok bool
	return eval(`(() => { const e = document.querySelector(`+jsString(sel)+`); e.value = `+jsString(v)+`;
		e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, &ok)
}
