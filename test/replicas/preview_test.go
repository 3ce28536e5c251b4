package replicas

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	sandboxbackend "github.com/plumbhq/plumb/pkg/backend/sandboxclient"
)

// TestPreviewOnEveryReplica: a preview created on replica a is served by
// replica b too (the URL names no worker, the record is in the shared
// store), and revoking it on b ends it on a.
func TestPreviewOnEveryReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc = "preview"
	run := f.run(t, f.a, sc)
	run.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	thread := run.thread(t)
	th, err := f.a.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil || th.GetThread().GetSandboxId() == "" {
		t.Fatalf("thread %v, %v; want a sandbox", th, err)
	}
	id := th.GetThread().GetSandboxId()
	bin, err := os.ReadFile(bins["previewserver"])
	if err != nil {
		t.Fatal(err)
	}
	box := sandboxbackend.New(f.worker, id, "/workspace")
	if res, err := box.Upload(f.ctx, []backend.UploadItem{{Path: "/workspace/previewserver", Content: bin}}); err != nil || res[0].Err != nil {
		t.Fatalf("upload the server: %v %+v", err, res)
	}
	if _, err := box.Execute(f.ctx, backend.ExecuteRequest{Command: "chmod +x previewserver && (./previewserver 8000 >/dev/null 2>&1 &)"}); err != nil {
		t.Fatal(err)
	}

	onA, err := f.a.c.CreatePreview(f.ctx, &plumbv1.CreatePreviewRequest{ThreadId: thread, Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	onB, err := f.b.c.CreatePreview(f.ctx, &plumbv1.CreatePreviewRequest{ThreadId: thread, Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	base := func(url string) string { return url[:strings.Index(url, "/p/")] }
	path := onA.GetUrl()[len(base(onA.GetUrl())):]
	if base(onA.GetUrl()) == base(onB.GetUrl()) {
		t.Fatalf("both replicas gave the base URL %s", base(onA.GetUrl()))
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET a preview: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	viaB := base(onB.GetUrl()) + path + "hello"
	waitFor(t, "replica b to serve replica a's preview", func() bool {
		code, body := get(viaB)
		return code == http.StatusOK && body == "hello from the box"
	})
	if _, err := f.b.c.RevokePreview(f.ctx, &plumbv1.RevokePreviewRequest{PreviewId: onA.GetPreview().GetId()}); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{onA.GetUrl() + "hello", viaB} {
		if code, body := get(url); code != http.StatusNotFound {
			t.Errorf("a preview revoked on replica b answered %d %q", code, body)
		}
	}
	if code, _ := get(onB.GetUrl() + "hello"); code != http.StatusOK {
		t.Errorf("the other preview answered %d after one was revoked", code)
	}
}
