package sandboxd

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/daemon"
)

// settle loads doc (none when empty) as sandboxd does: the file, then the
// flags args and environment env over it, then the checks.
func settle(t *testing.T, doc string, env map[string]string, args ...string) (*Config, error) {
	t.Helper()
	cfg := &Config{}
	if doc != "" {
		path := filepath.Join(t.TempDir(), "sandboxd.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var err error
		if cfg, err = Load(path); err != nil {
			return nil, err
		}
	}
	var fl Flags
	f := daemon.NewFlags("sandboxd")
	fl.Bind(f)
	if err := f.Parse(args, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	fl.Apply(f, cfg)
	return cfg, cfg.Validate()
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string // testdata/NAME.yaml when it ends in .yaml
		env  map[string]string
		args []string
		want string
	}{
		{name: "bad worker name", args: []string{"--worker", "no spaces"}, want: `invalid worker name "no spaces"`},
		{name: "bad worker env", env: map[string]string{"SANDBOXD_WORKER": "a/b"}, want: `invalid worker name "a/b"`},
		{name: "negative quota", args: []string{"--max-sandboxes", "-1"}, want: "max_sandboxes (--max-sandboxes) must not be negative"},
		{name: "bad egress allow-list", args: []string{"--policy-egress-allow", "pypi.org,http://x"}, want: "egress_allow"},
		{name: "unhardened sandboxes (benchmarks only)", doc: "unhardened.yaml", want: "unhardened: unknown key (line 3; known keys: agent_binary, channel, channel_memory, defaults,"},
		{name: "own label key", doc: "own-label.yaml", want: `"plumb.worker" is one of plumb's own label keys`},
		{name: "template over the policy", doc: "policy-template.yaml", want: `template "big" breaks the worker policy: memory 2147483648 bytes exceeds this worker's ceiling max_memory_bytes=1073741824`},
		{name: "malformed policy", doc: "policy-bad.yaml", want: `allowed_images entry "busybox:["`},
		{name: "malformed per-tenant limit", doc: "per-tenant-bad.yaml", want: "per_tenant.max_cpus -1 must be a finite number"},
		{name: "defaults over a policy flag", args: []string{"--policy-max-memory-bytes", "100000000"}, want: "defaults break the worker policy: memory 536870912 bytes exceeds this worker's ceiling max_memory_bytes=100000000"},
		{name: "policy env", env: map[string]string{"SANDBOXD_POLICY_MAX_PIDS": "10"}, want: "max_pids=10"},
		{name: "pool without a state dir", args: []string{"--pool-size", "1"}, want: "pool: warm pools need --state-dir"},
		{name: "negative pool", args: []string{"--pool-size", "-1"}, want: "pool.size (--pool-size) -1 must not be negative"},
		{name: "pool too big", args: []string{"--pool-size", "65", "--state-dir", "/tmp"}, want: "pool: size 65 is over the maximum 64"},
		{name: "template pool without a state dir", doc: "pool.yaml", want: "templates.py.pool: warm pools need --state-dir"},
		{name: "default runtime not allowed", doc: "policy-template.yaml", args: []string{"--default-runtime", "runc"}, want: `default_runtime "runc" is not in allowed_runtimes`},
		{name: "version", doc: "version: 2\n", want: "version 2 is not supported (want 1)"},
		{name: "bad unit", doc: "templates:\n  py:\n    memory: 1GB\n", want: `templates.py.memory: size "1GB": want bytes or a number with Ki, Mi, Gi or Ti (or K, M, G, T) (line 3)`},
		{name: "bad unit in the policy", doc: "policy:\n  max_disk: 10 gigs\n", want: `policy.max_disk: size "10 gigs"`},
		{name: "bad unit under an old key", doc: "defaults: {disk_bytes: 1.5.0}\n", want: `defaults.disk: size "1.5.0"`},
		{name: "negative size", doc: "max_memory: -1Gi\n", want: `max_memory: size "-1Gi"`},
		{name: "old and new memory", doc: "templates:\n  py: {memory_bytes: 1073741824, memory: 1Gi}\n",
			want: "templates.py: memory (line 2) and memory_bytes (line 2) both given: memory_bytes is the deprecated spelling of memory, keep only memory"},
		{name: "old and new policy ceiling", doc: "policy:\n  max_memory: 1Gi\n  max_memory_bytes: 1073741824\n", want: "policy: max_memory (line 2) and max_memory_bytes (line 3) both given"},
		{name: "old and new per-tenant memory", doc: "policy:\n  per_tenant: {max_memory_bytes: 1, max_memory: 1Gi}\n", want: "policy.per_tenant: max_memory (line 2) and max_memory_bytes (line 2) both given"},
		{name: "old and new cpus", doc: "defaults: {cpu: 1, cpus: 2}\n", want: "defaults: cpus (line 1) and cpu (line 1) both given"},
		{name: "ill-typed cpus", doc: "defaults: {cpus: two}\n", want: "defaults.cpus: cannot unmarshal !!str `two` into float64 (line 1)"},
		{name: "negative resume grace", doc: "resume: {grace: -1s}\n", want: "resume.grace -1s: want 0 (the default, 30s) up to 1h0m0s"},
		{name: "resume grace too long", doc: "resume: {grace: 2h}\n", want: "resume.grace 2h0m0s: want 0"},
		{name: "resume buffer too small", doc: "resume: {buffer: 1Ki}\n", want: "resume.buffer 1024 bytes: want 0 (the default, 1Mi) or 64Ki up to 256Mi"},
		{name: "resume buffer too big", doc: "resume: {buffer: 1Gi}\n", want: "resume.buffer 1073741824 bytes"},
		{name: "resume buffer without a unit", doc: "resume: {buffer: 1MB}\n", want: `resume.buffer: size "1MB"`},
		{name: "unknown resume key", doc: "resume: {timeout: 1s}\n", want: "resume.timeout: unknown key (line 1; known keys: buffer, grace)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.doc
			if strings.HasSuffix(doc, ".yaml") {
				b, err := os.ReadFile(filepath.Join("testdata", doc))
				if err != nil {
					t.Fatal(err)
				}
				doc = string(b)
			}
			_, err := settle(t, doc, tt.env, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v; want one line containing %q", err, tt.want)
			}
		})
	}
}

// TestSpellings: sizes take units under the new keys; the old byte-count
// keys (and agentd's old cpu) mean the same and are reported as
// deprecated, naming the key that replaces them.
func TestSpellings(t *testing.T) {
	newKeys := `
version: 1
max_memory: 8Gi
channel_memory: 64Mi
defaults: {cpus: 1.5, memory: 1Gi, disk: 10Gi}
templates:
  py: {image: python, memory: 512Mi, disk: 2G}
policy:
  max_memory: 4Gi
  max_disk: 20Gi
  per_tenant: {max_memory: 6Gi}
`
	oldKeys := `
version: 1
max_memory_bytes: 8589934592
channel_memory_bytes: 67108864
defaults: {cpu: 1.5, memory_bytes: 1073741824, disk_bytes: 10737418240}
templates:
  py: {image: python, memory_bytes: 536870912, disk_bytes: 2000000000}
policy:
  max_memory_bytes: 4294967296
  max_disk_bytes: 21474836480
  per_tenant: {max_memory_bytes: 6442450944}
`
	want := func(c *Config) {
		t.Helper()
		if c.MaxMemory != 8<<30 || c.ChannelMemory != 64<<20 {
			t.Errorf("worker sizes %d, %d", c.MaxMemory, c.ChannelMemory)
		}
		d := c.Defaults.spec()
		if d.CPUs != 1.5 || d.MemoryBytes != 1<<30 || d.DiskBytes != 10<<30 {
			t.Errorf("defaults %+v", d)
		}
		ts, _ := c.templates()
		if py := ts["py"]; py.Image != "python" || py.MemoryBytes != 512<<20 || py.DiskBytes != 2e9 {
			t.Errorf("template py %+v", py)
		}
		p := c.Policy.spec()
		if p.MaxMemoryBytes != 4<<30 || p.MaxDiskBytes != 20<<30 || p.PerTenant.MaxMemoryBytes != 6<<30 {
			t.Errorf("policy %+v", p)
		}
	}
	c, err := settle(t, newKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(c)
	if len(c.Deprecated) != 0 {
		t.Errorf("new keys reported deprecated: %v", c.Deprecated)
	}
	c, err = settle(t, oldKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(c)
	var got []string
	for _, d := range c.Deprecated {
		got = append(got, d.Path+"->"+d.Use)
	}
	wantDep := []string{"max_memory_bytes->max_memory", "channel_memory_bytes->channel_memory", "defaults.cpu->defaults.cpus",
		"defaults.memory_bytes->defaults.memory", "defaults.disk_bytes->defaults.disk", "templates.py.memory_bytes->templates.py.memory",
		"templates.py.disk_bytes->templates.py.disk", "policy.max_memory_bytes->policy.max_memory", "policy.max_disk_bytes->policy.max_disk",
		"policy.per_tenant.max_memory_bytes->policy.per_tenant.max_memory"}
	if !reflect.DeepEqual(got, wantDep) {
		t.Errorf("deprecations\n %q\nwant\n %q", got, wantDep)
	}
}

// TestFlagsOverConfig: a flag given on the command line or in the
// environment wins over the file; the file wins over a flag's default.
func TestFlagsOverConfig(t *testing.T) {
	doc := `
worker: from-file
state_dir: /var/lib/file
max_sandboxes: 7
defaults: {image: file-image, pids: 10}
pool: {size: 2, idle_lifetime: 5m}
policy: {max_memory: 2Gi, max_cpus: 2, max_pids: 100, max_ttl: 1h, max_disk: 1Gi, default_runtime: "", allow_egress: false, egress_allow: [pypi.org]}
`
	c, err := settle(t, doc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker != "from-file" || c.StateDir != "/var/lib/file" || c.MaxSandboxes != 7 || c.Defaults.Image != "file-image" ||
		c.Pool.Size != 2 || c.Pool.IdleLifetime != 5*time.Minute || c.Policy.MaxMemory != 2<<30 || *c.Policy.AllowEgress ||
		c.Policy.EgressAllow[0] != "pypi.org" {
		t.Fatalf("file values lost: %+v", c)
	}
	c, err = settle(t, doc, map[string]string{"SANDBOXD_STATE_DIR": "/var/lib/env", "SANDBOXD_POLICY_ALLOW_EGRESS": "true"},
		"--worker", "from-flag", "--max-sandboxes", "0", "--default-image", "flag-image", "--pool-size", "1", "--pool-idle-lifetime", "1m",
		"--policy-max-memory-bytes", "1073741824", "--policy-max-cpus", "1", "--policy-max-pids", "50", "--policy-max-ttl", "30m",
		"--policy-max-disk-bytes", "1000", "--policy-egress-allow", "example.com, ,x.org")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy
	if c.Worker != "from-flag" || c.StateDir != "/var/lib/env" || c.MaxSandboxes != 0 || c.Defaults.Image != "flag-image" ||
		c.Pool.Size != 1 || c.Pool.IdleLifetime != time.Minute || p.MaxMemory != 1<<30 || p.MaxCPUs != 1 || p.MaxPids != 50 ||
		p.MaxTTL != 30*time.Minute || p.MaxDisk != 1000 || !*p.AllowEgress || !reflect.DeepEqual(p.EgressAllow, []string{"example.com", "x.org"}) {
		t.Fatalf("flags lost: %+v", c)
	}
	c, err = settle(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker != defaultWorker() || c.Policy.AllowEgress != nil {
		t.Fatalf("defaults: %+v", c)
	}
}

// TestSchemaCoversManager: every field of the manager's template, policy
// and per-tenant limits has a config key (a field added there and not here
// fails this test).
func TestSchemaCoversManager(t *testing.T) {
	var tc Template
	fill(t, reflect.ValueOf(&tc).Elem())
	var pc Policy
	fill(t, reflect.ValueOf(&pc).Elem())
	for name, v := range map[string]any{"sandbox.Template": tc.spec(), "sandbox.Policy": pc.spec(), "sandbox.TenantLimits": pc.spec().PerTenant} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%s.%s has no config key in internal/sandboxd", name, rv.Type().Field(i).Name)
			}
		}
	}
}

// fill sets every field of struct v to a non-zero value.
func fill(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Float64:
			f.SetFloat(1)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem())
		case reflect.Struct:
			fill(t, f)
		default:
			t.Fatalf("fill: field %s of kind %s", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// TestVolumesConfig: volumes.per_tenant_bytes takes a size; a bad one
// names its key.
func TestVolumesConfig(t *testing.T) {
	c, err := settle(t, "version: 1\nvolumes: {per_tenant_bytes: 20Gi}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Volumes.PerTenant != 20<<30 {
		t.Errorf("volumes.per_tenant_bytes = %d", c.Volumes.PerTenant)
	}
	if _, err := settle(t, "version: 1\nvolumes: {per_tenant_bytes: 20GB}\n", nil); err == nil || !strings.Contains(err.Error(), "volumes.per_tenant_bytes") {
		t.Errorf("a bad size: %v", err)
	}
	if _, err := settle(t, "version: 1\nvolumes: {max: 1}\n", nil); err == nil || !strings.Contains(err.Error(), "volumes") {
		t.Errorf("an unknown key: %v", err)
	}
}

// TestResumeConfig: resume.grace and resume.buffer reach the registry's
// config; unset, they are 0 (the registry's defaults).
func TestResumeConfig(t *testing.T) {
	c, err := settle(t, "version: 1\nresume: {grace: 2m, buffer: 4Mi}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Resume.spec(); got.Grace != 2*time.Minute || got.Buffer != 4<<20 {
		t.Errorf("resume = %+v, want 2m and 4Mi", got)
	}
	c, err = settle(t, "version: 1\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Resume.spec(); got.Grace != 0 || got.Buffer != 0 {
		t.Errorf("unset resume = %+v, want zero (the defaults)", got)
	}
}

// TestChannelConfig: channel takes exec or stdio and reaches the manager's
// config; anything else names the key.
func TestChannelConfig(t *testing.T) {
	for _, v := range []string{"exec", "stdio"} {
		c, err := settle(t, "version: 1\nchannel: "+v+"\n", nil)
		if err != nil || c.Channel != v {
			t.Errorf("channel: %s: %q, %v", v, c.Channel, err)
		}
	}
	if _, err := settle(t, "version: 1\nchannel: pipe\n", nil); err == nil || !strings.Contains(err.Error(), "channel") {
		t.Errorf("a bad channel: %v", err)
	}
}

// TestSnapshotsMemoryConfig: snapshots.memory takes auto or off; anything
// else names the key.
func TestSnapshotsMemoryConfig(t *testing.T) {
	for _, v := range []string{"auto", "off"} {
		c, err := settle(t, "version: 1\nsnapshots:\n  memory: "+v+"\n", nil)
		if err != nil || c.Snapshots.Memory != v {
			t.Errorf("snapshots.memory: %s: %q, %v", v, c.Snapshots.Memory, err)
		}
	}
	if _, err := settle(t, "version: 1\nsnapshots:\n  memory: on\n", nil); err == nil || !strings.Contains(err.Error(), "snapshots.memory") {
		t.Errorf("a bad snapshots.memory: %v", err)
	}
}
