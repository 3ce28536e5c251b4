package fleet

import (
	"context"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestVolumesWorker(t *testing.T) {
	mounts := func(names ...string) *plumbv1.CreateSandboxRequest {
		req := &plumbv1.CreateSandboxRequest{}
		for _, n := range names {
			req.Volumes = append(req.Volumes, &plumbv1.VolumeMount{Name: n, MountPath: "/m/" + n})
		}
		return req
	}
	for _, tt := range []struct {
		name   string
		req    *plumbv1.CreateSandboxRequest
		worker string
		code   codes.Code
	}{
		{"no volumes", mounts(), "", codes.OK},
		{"by name only: placement decides", mounts("data", "cache"), "", codes.OK},
		{"by id", mounts("vol-w1-abc"), "w1", codes.OK},
		{"ids and names", mounts("data", "vol-eu.1-abc", "vol-eu.1-def"), "eu.1", codes.OK},
		{"two workers", mounts("vol-w1-abc", "vol-w2-def"), "", codes.InvalidArgument},
		{"not an id", mounts("vol-"), "", codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _, err := volumesWorker(tt.req)
			if w != tt.worker || status.Code(err) != tt.code {
				t.Errorf("volumesWorker = %q, %v; want %q, %s", w, err, tt.worker, tt.code)
			}
		})
	}
}

// TestCreateRoutesToTheVolumesWorker: a sandbox that mounts a volume by
// id is created on the volume's worker even when placement would pick
// another; by name, placement decides (and the other worker has no such
// volume).
func TestCreateRoutesToTheVolumesWorker(t *testing.T) {
	a := sandboxsvctest.StartWorker(t, sandbox.Config{})
	b := sandboxsvctest.StartWorker(t, sandbox.Config{})
	p, err := Dial([]string{a.Addr, b.Addr}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vol, err := b.Manager.CreateVolume(ctx, "", "data", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	// b is the busier worker: placement picks a.
	if _, err := b.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	byID := &plumbv1.CreateSandboxRequest{Volumes: []*plumbv1.VolumeMount{{Name: vol.ID, MountPath: "/data"}}}
	sb, err := p.Create(ctx, byID)
	if err != nil || sb.GetWorker() != b.Name {
		t.Fatalf("create mounting %s: %v on %q, want worker %s", vol.ID, err, sb.GetWorker(), b.Name)
	}
	byName := &plumbv1.CreateSandboxRequest{Volumes: []*plumbv1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	if _, err := p.Create(ctx, byName); status.Code(err) != codes.NotFound {
		t.Errorf("create mounting data by name, placed on %s: %v, want NOT_FOUND", a.Name, err)
	}
	if err := p.Delete(ctx, sb.GetId()); err != nil {
		t.Fatal(err)
	}
}
