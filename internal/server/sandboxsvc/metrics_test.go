package sandboxsvc_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/prometheus/client_golang/prometheus"
)

// TestTransfersReported: an upload and a download of more than one chunk
// through SandboxService count in plumb_sandbox_transfers_total under the
// path their bytes took: lent, since the worker's boxes run under runc
// with the agent as PID 1 (the defaults).
func TestTransfersReported(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sandboxsvc.NewTransferCollector(wk.Manager))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	big := bytes.Repeat([]byte("lent bytes "), (3<<20)/11)
	up, err := wk.Client.UploadFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, off := 0, 0; off < len(big); i, off = i+1, off+1<<20 {
		m := &plumbv1.UploadFilesRequest{Data: big[off:min(off+1<<20, len(big))], Eof: off+1<<20 >= len(big)}
		if i == 0 {
			m.SandboxId, m.Path = id, "/workspace/big.bin"
		}
		if err := up.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := up.CloseAndRecv(); err != nil || r.GetResults()[0].GetBytesWritten() != int64(len(big)) {
		t.Fatalf("upload: %v %v", r, err)
	}
	dl, err := wk.Client.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{"/workspace/big.bin"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		m, err := dl.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.GetData()...)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("downloaded %d bytes, not the %d uploaded", len(got), len(big))
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if counts["lent"] != 2 || counts["channel"] != 0 {
		t.Fatalf("plumb_sandbox_transfers_total %v, want 2 lent and none through the channel", counts)
	}
}
