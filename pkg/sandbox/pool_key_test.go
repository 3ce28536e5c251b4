package sandbox

import (
	"testing"
	"time"
)

// TestPoolKey: the pool key, which drains a pool at start-up when it
// changes, follows the template, the agent binary, the sandbox user and
// the worker's labels, but not the TTL (set by each claim).
func TestPoolKey(t *testing.T) {
	base := Config{
		Agent: []byte("agent v1"), User: DefaultUser, StateDir: "/state",
		Defaults: Template{Image: "img", TTL: time.Hour}.Merge(DefaultTemplate),
		Pools:    map[string]PoolConfig{"": {Size: 1}},
	}
	key := func(cfg Config) string {
		t.Helper()
		ps, err := (&Manager{cfg: cfg}).newPools()
		if err != nil {
			t.Fatal(err)
		}
		return ps.byName[""].key
	}
	want := key(base)
	tests := []struct {
		name    string
		change  func(c *Config)
		changes bool
	}{
		{"ttl", func(c *Config) { c.Defaults.TTL = time.Minute }, false},
		{"pool size", func(c *Config) { c.Pools = map[string]PoolConfig{"": {Size: 3}} }, false},
		{"agent", func(c *Config) { c.Agent = []byte("agent v2") }, true},
		{"image", func(c *Config) { c.Defaults.Image = "img2" }, true},
		{"env", func(c *Config) { c.Defaults.Env = map[string]string{"A": "1"} }, true},
		{"memory", func(c *Config) { c.Defaults.MemoryBytes++ }, true},
		{"user", func(c *Config) { c.User = "1001:1001" }, true},
		{"labels", func(c *Config) { c.ExtraLabels = map[string]string{"team": "a"} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.change(&cfg)
			if got := key(cfg); (got != want) != tt.changes {
				t.Fatalf("key %s vs %s: changed = %v, want %v", got, want, got != want, tt.changes)
			}
		})
	}
}
