package sandbox

import (
	"errors"
	"slices"
	"testing"
)

// TestUnharden: Config.Unhardened (benchmarks only) removes exactly the
// hardening and keeps the resource limits, the network and the mounts;
// the agent then gets no sandbox user.
func TestUnharden(t *testing.T) {
	tmpl := DefaultTemplate
	tmpl.Image, tmpl.MemoryBytes, tmpl.Pids = "img", 256<<20, 64
	tests := []struct {
		name       string
		unhardened bool
		wantCaps   bool
		wantSecOpt string
		wantRO     bool
		wantArgs   []string
	}{
		{"hardened", false, true, "no-new-privileges:true", true, []string{"--uid", "1000", "--gid", "1000"}},
		{"unhardened", true, false, "seccomp=unconfined", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, hc := containerSpec("sb-1", "w", "img", "vol", tmpl, nil)
			if tt.unhardened {
				unharden(hc)
			}
			if got := len(hc.CapDrop) > 0 && len(hc.CapAdd) > 0; got != tt.wantCaps {
				t.Errorf("caps drop %v add %v", hc.CapDrop, hc.CapAdd)
			}
			if !slices.Equal(hc.SecurityOpt, []string{tt.wantSecOpt}) {
				t.Errorf("security opts %v, want %s", hc.SecurityOpt, tt.wantSecOpt)
			}
			if hc.ReadonlyRootfs != tt.wantRO || (len(hc.Ulimits) > 0) != tt.wantRO {
				t.Errorf("read-only %v, ulimits %v", hc.ReadonlyRootfs, hc.Ulimits)
			}
			if hc.Memory != tmpl.MemoryBytes || *hc.PidsLimit != tmpl.Pids || hc.NetworkMode != "none" || len(hc.Mounts) != 1 || hc.Privileged {
				t.Errorf("limits, network or mounts changed: %+v", hc)
			}
			cmd := agentCmd("/", "/workspace", 1000, 1000, tt.unhardened)
			if want := append([]string{AgentPath, "serve", "--root", "/", "--workspace", "/workspace"}, tt.wantArgs...); !slices.Equal(cmd, want) {
				t.Errorf("agent command %q, want %q", cmd, want)
			}
		})
	}
}

// TestUnhardenedRefusesPools: pool boxes are keyed without the flag, so
// the two do not mix.
func TestUnhardenedRefusesPools(t *testing.T) {
	_, err := NewManager(t.Context(), nil, Config{Worker: "w", Agent: []byte("x"), Unhardened: true,
		Pools: map[string]PoolConfig{"": {Size: 1}}})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("NewManager: %v, want a ConfigError", err)
	}
}

func TestOwnedKey(t *testing.T) {
	for _, tt := range []struct {
		ref, owner, key string
		ok              bool
	}{
		{ownTag(DerivedRepository, "0123abcd", "w1"), "w1", "0123abcd", true},
		{ownTag(DerivedRepository, "0123abcd", "node-a.b"), "node-a.b", "0123abcd", true},
		{ownTag(DerivedRepository, "0123abcd", "b-a"), "a", "", false}, // another worker whose name ends like ours
		{ownTag(DerivedRepository, "0123abcd", "a"), "b-a", "", false}, // and the other way round
		{DerivedRepository + ":0123abcd", "w1", "", false},             // a tag of before ownership: nobody's
		{ownTag(egressImageRepo, "0123abcd", "w1"), "w1", "", false},   // another repository
		{DerivedRepository + ":-w1", "w1", "", false},                  // no key
	} {
		key, ok := ownedKey(tt.ref, DerivedRepository, tt.owner)
		if ok != tt.ok || ok && key != tt.key {
			t.Errorf("ownedKey(%q, %q) = %q, %v; want %q, %v", tt.ref, tt.owner, key, ok, tt.key, tt.ok)
		}
	}
}
