package sandbox

import (
	"errors"
	"math"
	"path"
	"strings"
	"testing"
	"time"
)

var testHost = Host{MemoryBytes: 8 << 30, CPUs: 4, Runtimes: []string{"runc", "runsc"}, DefaultRuntime: "runc"}

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func base() Template {
	t := Template{Image: "busybox:1.36"}.Merge(DefaultTemplate)
	return t
}

func with(f func(*Template)) Template {
	t := base()
	f(&t)
	return t
}

// TestPolicyCheck: each ceiling and allow-list refuses what is over it
// with CodePolicy naming the limit, and lets through what is at it.
func TestPolicyCheck(t *testing.T) {
	no := false
	tests := []struct {
		name    string
		policy  Policy
		t       Template
		digests []string
		limit   string // "" = allowed
	}{
		{"defaults allow the default template", Policy{}, base(), nil, ""},
		{"host memory is the default ceiling", Policy{}, with(func(t *Template) { t.MemoryBytes = 8<<30 + 1 }), nil, "max_memory_bytes"},
		{"host memory exactly", Policy{}, with(func(t *Template) { t.MemoryBytes = 8 << 30 }), nil, ""},
		{"host cpus are the default ceiling", Policy{}, with(func(t *Template) { t.CPUs = 4.5 }), nil, "max_cpus"},
		{"default pids ceiling", Policy{}, with(func(t *Template) { t.Pids = DefaultMaxPids + 1 }), nil, "max_pids"},
		{"default pids ceiling exactly", Policy{}, with(func(t *Template) { t.Pids = DefaultMaxPids }), nil, ""},
		{"memory ceiling", Policy{MaxMemoryBytes: 1 << 30}, with(func(t *Template) { t.MemoryBytes = 2 << 30 }), nil, "max_memory_bytes"},
		{"memory ceiling above the host is the host", Policy{MaxMemoryBytes: 64 << 30}, with(func(t *Template) { t.MemoryBytes = 9 << 30 }), nil, "max_memory_bytes"},
		{"cpus ceiling", Policy{MaxCPUs: 0.5}, with(func(t *Template) { t.CPUs = 1 }), nil, "max_cpus"},
		{"pids ceiling", Policy{MaxPids: 100}, with(func(t *Template) { t.Pids = 101 }), nil, "max_pids"},
		{"ttl ceiling", Policy{MaxTTL: time.Hour}, with(func(t *Template) { t.TTL = 2 * time.Hour }), nil, "max_ttl"},
		{"disk ceiling", Policy{MaxDiskBytes: 1 << 30}, with(func(t *Template) { t.DiskBytes = 2 << 30 }), nil, "max_disk_bytes"},
		{"disk within", Policy{MaxDiskBytes: 1 << 30}, with(func(t *Template) { t.DiskBytes = 1 << 30 }), nil, ""},
		{"egress refused", Policy{AllowEgress: &no}, with(func(t *Template) { t.Network = NetworkEgress }), nil, "allow_egress"},
		{"no egress allowed when egress is off", Policy{AllowEgress: &no}, base(), nil, ""},
		{"egress allowed by default", Policy{}, with(func(t *Template) { t.Network = NetworkEgress }), nil, ""},
		{"runtime not allowed", Policy{AllowedRuntimes: []string{"runsc"}}, with(func(t *Template) { t.Runtime = "runc" }), nil, "allowed_runtimes"},
		{"engine default runtime stands for empty", Policy{AllowedRuntimes: []string{"runsc"}}, base(), nil, "allowed_runtimes"},
		{"runtime allowed", Policy{AllowedRuntimes: []string{"runsc"}}, with(func(t *Template) { t.Runtime = "runsc" }), nil, ""},
		{"image pattern", Policy{AllowedImages: []string{"busybox:*"}}, base(), nil, ""},
		{"image pattern misses", Policy{AllowedImages: []string{"python:*"}}, base(), nil, "allowed_images"},
		{"untagged image matches :latest", Policy{AllowedImages: []string{"busybox:latest"}}, with(func(t *Template) { t.Image = "busybox" }), nil, ""},
		{"pattern does not cross /", Policy{AllowedImages: []string{"*"}}, with(func(t *Template) { t.Image = "evil.example/x:1" }), nil, "allowed_images"},
		{"registry pattern", Policy{AllowedImages: []string{"reg.example/*"}}, with(func(t *Template) { t.Image = "reg.example/x:1" }), nil, ""},
		{"digest matches image id", Policy{AllowedImages: []string{digestA}}, base(), []string{digestA}, ""},
		{"digest matches repo digest", Policy{AllowedImages: []string{digestA}}, base(), []string{"sha256:bbbb", "busybox@" + digestA}, ""},
		{"digest in reference", Policy{AllowedImages: []string{digestA}}, with(func(t *Template) { t.Image = "busybox@" + digestA }), nil, ""},
		{"digest misses", Policy{AllowedImages: []string{digestA}}, base(), []string{"sha256:bbbb"}, "allowed_images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.policy.Validate(); err != nil {
				t.Fatal(err)
			}
			err := tt.policy.resolve(testHost).check(tt.t, tt.digests)
			checkLimit(t, err, tt.limit)
		})
	}
}

func checkLimit(t *testing.T, err error, limit string) {
	t.Helper()
	if limit == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	e, ok := err.(*Error)
	if !ok || e.Code != CodePolicy || e.Limit != limit || !strings.Contains(e.Message, limit) {
		t.Fatalf("err = %#v, want %s naming %q", err, CodePolicy, limit)
	}
}

// TestNarrows: a request may only narrow the template it names.
func TestNarrows(t *testing.T) {
	tmpl := with(func(t *Template) { t.Runtime = "runsc"; t.DiskBytes = 1 << 30 })
	tests := []struct {
		name  string
		req   Template
		base  Template
		limit string
	}{
		{"empty request", Template{}, tmpl, ""},
		{"less of everything", Template{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 32, TTL: time.Minute, DiskBytes: 1 << 20}, tmpl, ""},
		{"same runtime", Template{Runtime: "runsc"}, tmpl, ""},
		{"more memory", Template{MemoryBytes: tmpl.MemoryBytes + 1}, tmpl, "memory_bytes"},
		{"more cpus", Template{CPUs: tmpl.CPUs + 1}, tmpl, "cpus"},
		{"more pids", Template{Pids: tmpl.Pids + 1}, tmpl, "pids"},
		{"longer ttl", Template{TTL: tmpl.TTL + time.Second}, tmpl, "ttl"},
		{"more disk", Template{DiskBytes: 2 << 30}, tmpl, "disk_bytes"},
		{"runtime downgrade", Template{Runtime: "runc"}, tmpl, "runtime"},
		{"egress where the template has none", Template{Network: NetworkEgress}, tmpl, "network"},
		{"egress where the template has egress", Template{Network: NetworkEgress}, with(func(t *Template) { t.Network = NetworkEgress }), ""},
		{"none where the template has egress", Template{Network: NetworkNone}, with(func(t *Template) { t.Network = NetworkEgress }), ""},
		{"another image", Template{Image: "python:3"}, tmpl, "image"},
		{"the template's image", Template{Image: tmpl.Image}, tmpl, ""},
		{"any runtime when the template names none", Template{Runtime: "runsc"}, base(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLimit(t, narrows(tt.req, tt.base, "tmpl"), tt.limit)
		})
	}
}

// TestPolicyValidate: malformed policies are refused with the field named.
func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want string
	}{
		{"zero", Policy{}, ""},
		{"negative memory", Policy{MaxMemoryBytes: -1}, "max_memory_bytes"},
		{"negative cpus", Policy{MaxCPUs: -1}, "max_cpus"},
		{"negative pids", Policy{MaxPids: -1}, "max_pids"},
		{"ttl too long", Policy{MaxTTL: 200 * time.Hour}, "max_ttl"},
		{"negative disk", Policy{MaxDiskBytes: -1}, "max_disk_bytes"},
		{"per-tenant limits", Policy{PerTenant: TenantLimits{MaxSandboxes: 4, MaxMemoryBytes: 4 << 30, MaxCPUs: 2.5}}, ""},
		{"negative per-tenant sandboxes", Policy{PerTenant: TenantLimits{MaxSandboxes: -1}}, "per_tenant.max_sandboxes"},
		{"negative per-tenant memory", Policy{PerTenant: TenantLimits{MaxMemoryBytes: -1}}, "per_tenant.max_memory_bytes"},
		{"NaN per-tenant cpus", Policy{PerTenant: TenantLimits{MaxCPUs: math.NaN()}}, "per_tenant.max_cpus"},
		{"infinite per-tenant cpus", Policy{PerTenant: TenantLimits{MaxCPUs: math.Inf(1)}}, "per_tenant.max_cpus"},
		{"bad pattern", Policy{AllowedImages: []string{"busybox:["}}, "allowed_images"},
		{"empty pattern", Policy{AllowedImages: []string{""}}, "allowed_images"},
		{"short digest is a pattern", Policy{AllowedImages: []string{"sha256:abc"}}, ""},
		{"default runtime not allowed", Policy{AllowedRuntimes: []string{"runc"}, DefaultRuntime: "runsc"}, "default_runtime"},
		{"empty runtime name", Policy{AllowedRuntimes: []string{""}}, "allowed_runtimes"},
		{"egress allow-list", Policy{EgressAllow: []string{"pypi.org", "*.pythonhosted.org:443", "10.0.0.0/8", "[2001:db8::/32]:443"}}, ""},
		{"bad egress allow entry", Policy{EgressAllow: []string{"https://pypi.org"}}, "egress_allow"},
		{"egress deny of a name", Policy{EgressDeny: []string{"pypi.org"}}, "egress_deny"},
		{"egress deny with a port", Policy{EgressDeny: []string{"10.0.0.0/8:443"}}, "egress_deny"},
		{"egress deny prefix", Policy{EgressDeny: []string{"198.51.100.0/24", "2001:db8::1"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

// TestCheckTemplate: a configured template over the policy is refused
// without the engine; images allowed by digest wait for create time.
func TestCheckTemplate(t *testing.T) {
	p := Policy{MaxMemoryBytes: 1 << 30, AllowedImages: []string{"busybox:*"}}
	if err := p.CheckTemplate(base()); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, p.CheckTemplate(with(func(t *Template) { t.MemoryBytes = 2 << 30 })), "max_memory_bytes")
	checkLimit(t, p.CheckTemplate(with(func(t *Template) { t.Image = "python:3" })), "allowed_images")
	p.AllowedImages = append(p.AllowedImages, digestA)
	if err := p.CheckTemplate(with(func(t *Template) { t.Image = "python:3" })); err != nil {
		t.Fatalf("digest-allowed image refused at config time: %v", err)
	}
}

// FuzzImageAllowed: matching never panics, and an empty allow-list allows
// everything.
func FuzzImageAllowed(f *testing.F) {
	f.Add("busybox:*", "busybox")
	f.Add(digestA, "x@"+digestA)
	f.Add("[", "a")
	f.Fuzz(func(t *testing.T, pattern, ref string) {
		_ = imageAllowed([]string{pattern}, ref, []string{ref})
		if !imageAllowed(nil, ref, nil) {
			t.Fatal("empty allow-list refused")
		}
	})
}

// FuzzParseExpiry: the expiry record decoder never panics and accepts
// only version 1.
func FuzzParseExpiry(f *testing.F) {
	f.Add([]byte(`{"version":1,"expires":{"sbx-w-a":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`nope`))
	f.Fuzz(func(t *testing.T, data []byte) {
		exp, err := parseExpiry(data)
		if err == nil && exp == nil {
			t.Fatal("nil record without error")
		}
	})
}

// TestValidWorkingDir: only /workspace, directories under it and
// directories under /home, spelled cleanly.
func TestValidWorkingDir(t *testing.T) {
	for dir, want := range map[string]bool{
		"/workspace": true, "/workspace/a": true, "/workspace/a/b": true, "/home/agent": true, "/home/a/b": true,
		"/": false, "": false, "relative": false, "/home": false, "/home/": false, "/workspace/": false, "//workspace": false,
		"/workspacex": false, "/homes/a": false, "/workspace/../etc": false, "/home/../bin": false, "/home/./a": false,
		"/etc": false, "/bin": false, "/usr/bin": false, "/tmp": false, "/sys/fs/cgroup": false, "/proc": false,
		"/dev": false, "/.plumb": false, "/.plumb/x": false, "/workspace/a\x00": false,
	} {
		if got := validWorkingDir(dir); got != want {
			t.Errorf("validWorkingDir(%q) = %v, want %v", dir, got, want)
		}
	}
}

// FuzzValidWorkingDir: an accepted working dir is clean, has no NUL and
// lies under /workspace (or is it) or under /home.
func FuzzValidWorkingDir(f *testing.F) {
	for _, s := range []string{"/workspace", "/home/a", "/etc", "/workspace/../etc", "//workspace", "/home", "/proc", "/.plumb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dir string) {
		if !validWorkingDir(dir) {
			return
		}
		if path.Clean(dir) != dir || strings.ContainsRune(dir, 0) || strings.Contains(dir, "/../") || strings.HasSuffix(dir, "/..") {
			t.Fatalf("accepted unclean %q", dir)
		}
		if dir != DefaultWorkingDir && !strings.HasPrefix(dir, DefaultWorkingDir+"/") && !(strings.HasPrefix(dir, HomeDir+"/") && len(dir) > len(HomeDir)+1) {
			t.Fatalf("accepted %q outside the allow-list", dir)
		}
	})
}

// TestCheckNumbers: a request's CPUs must be a finite number.
func TestCheckNumbers(t *testing.T) {
	for _, cpus := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := Template{CPUs: cpus}.checkNumbers()
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalid || e.Field != "cpus" {
			t.Errorf("cpus %g: %v, want invalid on cpus", cpus, err)
		}
		if err := (Template{Image: "x", CPUs: cpus}).Merge(DefaultTemplate).validate(); CodeOf(err) != CodeInvalid {
			t.Errorf("validate cpus %g: %v, want invalid", cpus, err)
		}
	}
	if err := (Template{CPUs: 0.5}).checkNumbers(); err != nil {
		t.Errorf("cpus 0.5: %v", err)
	}
	if err := (Policy{MaxCPUs: math.NaN()}).Validate(); err == nil {
		t.Error("policy max_cpus NaN accepted")
	}
}

// TestDiskBytesRange: disk_bytes is 0 (none) or what a workspace file
// system can be, 1 MiB up to MaxDiskBytes; anything else is invalid on
// the disk_bytes field.
func TestDiskBytesRange(t *testing.T) {
	for _, tc := range []struct {
		disk int64
		ok   bool
	}{
		{0, true}, {MinDiskBytes, true}, {64 << 20, true}, {MaxDiskBytes, true},
		{-1, false}, {1, false}, {MinDiskBytes - 1, false}, {MaxDiskBytes + 1, false},
	} {
		err := Template{Image: "x", DiskBytes: tc.disk}.Merge(DefaultTemplate).validate()
		var e *Error
		if tc.ok && err != nil {
			t.Errorf("disk_bytes %d: %v", tc.disk, err)
		}
		if !tc.ok && (!errors.As(err, &e) || e.Code != CodeInvalid || e.Field != "disk_bytes") {
			t.Errorf("disk_bytes %d: %v, want invalid on disk_bytes", tc.disk, err)
		}
	}
}
