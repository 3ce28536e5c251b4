package fleet

import (
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
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
