package sandbox_test

import (
	"context"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
)

// A snapshot taken on one worker restores on another through a shared
// S3-compatible bucket (a real SeaweedFS server).
func TestSnapshotRestoresOnAnotherWorker(t *testing.T) {
	srv := weedtest.Start(t)
	repo := func(t *testing.T) *snapshot.Repo {
		s, err := s3store.New(context.Background(), s3store.Config{Endpoint: srv.Endpoint, Bucket: "fleet", CreateBucket: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		r, err := snapshot.NewRepo(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	e1, e2 := newEnv(t), newEnv(t)
	e1.cfg.Snapshots, e2.cfg.Snapshots = repo(t), repo(t)
	m1, m2 := e1.manager(t), e2.manager(t)
	ctx := ctxMinute(t)
	a := e1.create(t, m1, sandbox.CreateSpec{Tenant: "acme"})
	if r := exec(t, m1, a.ID, workspaceScript, 60); r.Output != "ok\n" {
		t.Fatalf("fill: %q", r.Output)
	}
	want := exec(t, m1, a.ID, listScript, 60).Output
	snap, err := m1.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m2.Create(ctx, sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("restore on another worker: %v", err)
	}
	if sandbox.WorkerOf(b.ID) == sandbox.WorkerOf(a.ID) {
		t.Fatal("both boxes on one worker")
	}
	if got := exec(t, m2, b.ID, listScript, 60).Output; got != want {
		t.Errorf("restored on another worker:\n got: %s\nwant: %s", got, want)
	}
	if err := m2.DeleteSnapshot(ctx, "acme", snap.ID); err != nil {
		t.Error(err)
	}
}
