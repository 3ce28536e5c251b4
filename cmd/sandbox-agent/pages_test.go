package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/testroot"
)

func TestParseSpans(t *testing.T) {
	maps := `00400000-00567000 r-xp 00000000 00:3c 1311 /.plumb/sandbox-agent
00567000-00702000 r--p 00167000 00:3c 1311 /.plumb/sandbox-agent
00702000-0071f000 rw-p 00302000 00:3c 1311 /.plumb/sandbox-agent
0071f000-00750000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 00:3c 1312 /other
c000000000-c000400000 rw-p 00000000 00:00 0
7ffc1d1e0000-7ffc1d1e4000 r--p 00000000 00:00 0 [vvar]
bad-line
00800000-00700000 r--p 00000000 00:3c 1311 /.plumb/sandbox-agent
zz-00900000 r--p 00000000 00:3c 1311 /.plumb/sandbox-agent
`
	got := parseSpans([]byte(maps), 1311)
	want := []span{{0x400000, 0x567000}, {0x567000, 0x702000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parseSpans = %x, want %x (the binary's read-only mappings only)", got, want)
	}
}

// TestReleasePages pages this test binary's read-only mappings out from a
// thread whose fsuid is nobody's, as the agent's are the sandbox user's,
// and checks that its resident file pages shrink (the kernel honours the
// advice only for a caller whose fsuid owns the file: the release takes
// root's for the call) and that the thread's fsuid is nobody's again.
// It needs root (CAP_SETUID), as the agent has; CI runs as root.
func TestReleasePages(t *testing.T) {
	testroot.Require(t, "(the release takes fsuid 0 for its call)")
	spans, err := binarySpans()
	if err != nil || len(spans) == 0 {
		t.Fatalf("binarySpans = %v, %v", spans, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const nobody = 65534
	prev, _ := setfsuid(nobody)
	defer setfsuid(prev)
	before := rssFileKiB(t)
	releasePages(spans)
	after := rssFileKiB(t)
	t.Logf("RssFile %d KiB before the release, %d KiB after", before, after)
	if after >= before {
		t.Errorf("RssFile went from %d to %d KiB: the release paged nothing out", before, after)
	}
	if cur, ok := setfsuid(invalidID); !ok || cur != nobody {
		t.Errorf("fsuid after the release is %d (ok %v), want %d as before", cur, ok, nobody)
	}
}

// rssFileKiB reads this process's RssFile.
func rssFileKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
