package sandboxsvc_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestCreatePolicyViolations: a create over the worker's policy, or wider
// than the template it names, is PERMISSION_DENIED with reason
// policy_violation, a message naming the limit and the limit in the
// ErrorInfo metadata; nothing is created and no quota is held. A request
// inside both is served.
func TestCreatePolicyViolations(t *testing.T) {
	no := false
	templates := map[string]sandbox.Template{
		"small": {MemoryBytes: 128 << 20, Pids: 64, TTL: 10 * time.Minute},
	}
	// A template that names gVisor cannot be downgraded to runc (when
	// the engine has runsc: sandboxtest.Runtimes requires it under CI).
	gvisor := slices.Contains(sandboxtest.Runtimes(t, sandboxtest.Docker(t)), "runsc")
	if gvisor {
		templates["gvisor"] = sandbox.Template{Runtime: "runsc", Pids: 512, MemoryBytes: 256 << 20}
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{
		Policy:    sandbox.Policy{MaxMemoryBytes: 512 << 20, MaxCPUs: 1, MaxPids: 512, MaxTTL: time.Hour, AllowEgress: &no},
		Templates: templates,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	type test struct {
		name  string
		req   *plumbv1.CreateSandboxRequest
		limit string
	}
	tests := []test{
		{"memory over the ceiling", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{MemoryBytes: 1 << 30}}, "max_memory_bytes"},
		{"pids over the ceiling", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Pids: 1000}}, "max_pids"},
		{"ttl over the ceiling", &plumbv1.CreateSandboxRequest{Ttl: durationpb.New(2 * time.Hour)}, "max_ttl"},
		{"cpus over the ceiling", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Cpus: 2}}, "max_cpus"},
		{"egress off", &plumbv1.CreateSandboxRequest{Network: plumbv1.NetworkMode_NETWORK_MODE_EGRESS}, "allow_egress"},
		{"template widened: memory", &plumbv1.CreateSandboxRequest{Template: "small", Resources: &plumbv1.Resources{MemoryBytes: 256 << 20}}, "memory_bytes"},
		{"template widened: pids", &plumbv1.CreateSandboxRequest{Template: "small", Resources: &plumbv1.Resources{Pids: 128}}, "pids"},
		{"template widened: ttl", &plumbv1.CreateSandboxRequest{Template: "small", Ttl: durationpb.New(time.Hour)}, "ttl"},
		{"template widened: image", &plumbv1.CreateSandboxRequest{Template: "small", Image: "plumb-other-image:1"}, "image"},
	}
	if gvisor {
		tests = append(tests, test{"template widened: runtime downgrade", &plumbv1.CreateSandboxRequest{Template: "gvisor", Runtime: "runc"}, "runtime"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wk.Client.CreateSandbox(ctx, tt.req)
			st := status.Convert(err)
			if st.Code() != codes.PermissionDenied || pbconv.Reason(err) != string(sandbox.CodePolicy) || !strings.Contains(st.Message(), tt.limit) {
				t.Fatalf("create: %v (reason %q), want PERMISSION_DENIED %s naming %q", err, pbconv.Reason(err), sandbox.CodePolicy, tt.limit)
			}
			var limit string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					limit = info.GetMetadata()["limit"]
				}
			}
			if limit != tt.limit {
				t.Fatalf("ErrorInfo limit = %q, want %q", limit, tt.limit)
			}
			if n, mem := wk.Manager.Usage(); n != 0 || mem != 0 {
				t.Fatalf("%d sandboxes, %d bytes reserved after a refused create", n, mem)
			}
		})
	}
	sb, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Template: "small", Resources: &plumbv1.Resources{MemoryBytes: 64 << 20}})
	if err != nil || sb.GetSandbox().GetResources().GetMemoryBytes() != 64<<20 {
		t.Fatalf("create narrowing its template: %v, %v", sb, err)
	}
	_, err = wk.Client.KeepAlive(ctx, &plumbv1.KeepAliveRequest{SandboxId: sb.GetSandbox().GetId(), Ttl: durationpb.New(2 * time.Hour)})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "max_ttl") {
		t.Fatalf("keep-alive over max_ttl: %v, want PERMISSION_DENIED naming max_ttl", err)
	}
}

// TestCreateRefusesBadNumbersAndWorkingDirs: CPUs that are not a finite
// number, and a working dir outside /workspace and /home (where the
// workspace volume would shadow what the image runs, the box's tmpfs or
// the kernel's file systems), are INVALID_ARGUMENT with reason
// invalid_argument and a field violation on the request's field; nothing
// is created and no quota is held. Working dirs inside the allow-list are
// served, and commands run there.
func TestCreateRefusesBadNumbersAndWorkingDirs(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	tests := []struct {
		name  string
		req   *plumbv1.CreateSandboxRequest
		field string
	}{
		{"cpus NaN", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Cpus: math.NaN()}}, "resources.cpus"},
		{"cpus +Inf", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Cpus: math.Inf(1)}}, "resources.cpus"},
		{"cpus -Inf", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Cpus: math.Inf(-1)}}, "resources.cpus"},
		{"cpus negative", &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Cpus: -1}}, "resources.cpus"},
	}
	for _, dir := range []string{"/etc", "/bin", "/usr/bin", "/tmp", "/sys/fs/cgroup", "/proc", "/dev", "/home", "/",
		"/.plumb", "/workspace/../etc", "/workspace/", "//workspace", "/workspacex", "/home/../bin", "relative"} {
		tests = append(tests, struct {
			name  string
			req   *plumbv1.CreateSandboxRequest
			field string
		}{"working_dir " + dir, &plumbv1.CreateSandboxRequest{WorkingDir: dir}, "working_dir"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wk.Client.CreateSandbox(ctx, tt.req)
			if status.Code(err) != codes.InvalidArgument || pbconv.Reason(err) != string(sandbox.CodeInvalid) {
				t.Fatalf("create: %v (reason %q), want INVALID_ARGUMENT %s", err, pbconv.Reason(err), sandbox.CodeInvalid)
			}
			vs := pbconv.FieldViolations(err)
			if len(vs) != 1 || vs[0].Field != tt.field || vs[0].Description == "" {
				t.Fatalf("field violations %+v, want one on %s", vs, tt.field)
			}
			if n, mem := wk.Manager.Usage(); n != 0 || mem != 0 {
				t.Fatalf("%d sandboxes, %d bytes reserved after a refused create", n, mem)
			}
		})
	}
	for _, dir := range []string{"/workspace/project", "/home/agent"} {
		t.Run("working_dir "+dir+" served", func(t *testing.T) {
			res, err := wk.Client.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{WorkingDir: dir})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			id := res.GetSandbox().GetId()
			t.Cleanup(func() {
				_, _ = wk.Client.DeleteSandbox(context.Background(), &plumbv1.DeleteSandboxRequest{SandboxId: id})
			})
			if got := res.GetSandbox().GetWorkingDir(); got != dir {
				t.Fatalf("working dir %q, want %q", got, dir)
			}
			r, err := wk.Client.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "pwd && touch f && echo ok"}})
			if err != nil || r.GetResult().GetOutput() != dir+"\nok\n" {
				t.Fatalf("execute in %s: %q, %v", dir, r.GetResult().GetOutput(), err)
			}
		})
	}
}
