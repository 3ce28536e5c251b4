package main

import (
	"os"
	"testing"
)

func TestProcName(t *testing.T) {
	for _, tc := range []struct {
		name, exe, cmdline, want string
	}{
		{"agent init by its link", "/var/lib/docker/overlay2/x/merged/.plumb/sandbox-agent", "/.plumb/sandbox-agent\x00init\x00", "sandbox-agent init"},
		{"agent started through /proc/self/exe", "/.plumb/sandbox-agent", "/proc/self/exe\x00serve\x00--root\x00/\x00", "sandbox-agent serve"},
		{"link unreadable: argv[0]", "", "/.plumb/sandbox-agent\x00serve\x00", "sandbox-agent serve"},
		{"deleted binary", "/x/sandbox-agent (deleted)", "sandbox-agent\x00init\x00", "sandbox-agent init"},
		{"another process", "/bin/busybox", "sleep\x00100\x00", "busybox"},
		{"nothing known", "", "", "?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := procName(tc.exe, []byte(tc.cmdline)); got != tc.want {
				t.Errorf("procName(%q, %q) = %q, want %q", tc.exe, tc.cmdline, got, tc.want)
			}
		})
	}
}

func TestKBField(t *testing.T) {
	status := []byte("Name:\tx\nVmRSS:\t    5120 kB\nRssAnon:\t 100 kB\nVmBad:\t12\n")
	if got, err := kBField(status, "VmRSS"); err != nil || got != 5120<<10 {
		t.Errorf("VmRSS = %d, %v", got, err)
	}
	for _, key := range []string{"VmSwap", "VmBad", "Vm"} {
		if got, err := kBField(status, key); err == nil {
			t.Errorf("%s = %d, want an error", key, got)
		}
	}
}

// TestReadProcMem reads this test process, whose figures are known to be
// positive and ordered: USS ≤ PSS ≤ RSS.
func TestReadProcMem(t *testing.T) {
	pm, err := readProcMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if pm.name != "bench.test" || pm.rss <= 0 {
		t.Fatalf("%+v", pm)
	}
	if pm.pss >= 0 && (pm.uss <= 0 || pm.uss > pm.pss || pm.pss > pm.rss) {
		t.Errorf("want 0 < USS ≤ PSS ≤ RSS: %+v", pm)
	}
	if _, err := readProcMem(1 << 30); !gone(err) {
		t.Errorf("a pid that does not exist: %v, want it gone", err)
	}
}
