package sandboxd

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// The snapshots section and the templates' idle settings load, and the
// store opens where they say (the local directory; the S3 store is tested
// against a real server in pkg/snapshot/s3store).
func TestSnapshotsConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := settle(t, `
version: 1
snapshots:
  dir: `+filepath.Join(dir, "snaps")+`
  per_tenant_bytes: 2Gi
templates:
  python:
    image: img
    idle_suspend_after: 5m
    hibernate_after: 1h
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if int64(cfg.Snapshots.PerTenant) != 2<<30 {
		t.Errorf("per_tenant_bytes = %d", cfg.Snapshots.PerTenant)
	}
	tpl := cfg.Templates["python"].spec()
	if tpl.IdleSuspendAfter != 5*time.Minute || tpl.HibernateAfter != time.Hour {
		t.Errorf("idle settings: %+v", tpl)
	}
	repo, err := openSnapshots(context.Background(), cfg)
	if err != nil || repo == nil {
		t.Fatalf("open the local store: %v %v", repo, err)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want bool // a store
	}{
		"none":      {Config{}, false},
		"state dir": {Config{StateDir: t.TempDir()}, true},
	} {
		repo, err := openSnapshots(context.Background(), &tc.cfg)
		if err != nil || (repo != nil) != tc.want {
			t.Errorf("%s: %v %v", name, repo, err)
		}
	}
	bad := &Config{Snapshots: SnapshotsConfig{Dir: dir, S3: S3Config{Endpoint: "127.0.0.1:1", Bucket: "b"}}}
	if _, err := openSnapshots(context.Background(), bad); err == nil {
		t.Error("dir and s3 together were accepted")
	}
}
