package ext2fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fsck formats an image of size bytes with at most inodes inodes and runs
// the real e2fsck over it (read-only, forced). The only finding it
// accepts is the missing lost+found, which Format leaves out on purpose.
func fsck(t testing.TB, size, inodes int64) Layout {
	t.Helper()
	l, err := Plan(size, inodes)
	if err != nil {
		t.Fatalf("plan %d %d: %v", size, inodes, err)
	}
	p := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := Format(f, l, time.Now()); err != nil {
		t.Fatal(err)
	}
	e2fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		e2fsck = "/usr/sbin/e2fsck"
	}
	out, err := exec.Command(e2fsck, "-fn", p).CombinedOutput()
	text := string(out)
	if err != nil {
		// Exit 4 with the one finding about lost+found is accepted.
		rest := strings.ReplaceAll(text, "/lost+found not found.  Create? no", "")
		if strings.Contains(rest, "?") || strings.Contains(strings.ToLower(rest), "error") || !strings.Contains(text, "lost+found") {
			t.Fatalf("e2fsck %d bytes %d inodes: %v\n%s", size, inodes, err, text)
		}
	}
	return l
}

func TestFormatChecksClean(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/e2fsck"); err != nil {
		if _, err := exec.LookPath("e2fsck"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("e2fsck (e2fsprogs) is needed under CI=true")
			}
			t.Skip("no e2fsck")
		}
	}
	for _, tc := range []struct {
		name         string
		size, inodes int64
		wantInodes   uint32
	}{
		{"1MiB", 1 << 20, 256, 256},
		{"64MiB", 64 << 20, 16384, 16384},
		{"odd size and inodes", 100<<20 + 12345, 25000, 24992},
		{"last group too small for its inode table", 129 << 20, (129 << 20) / 4096, 32768},
		{"small last group kept", 128<<20 + 100*4096, 1000, 960},
		{"tiny last group dropped", 128<<20 + 50*4096, 1000, 992},
		{"two full groups", 256 << 20, 1 << 16, 1 << 16},
		{"1GiB", 1 << 30, 1 << 18, 1 << 18},
		{"3GiB many groups", 3 << 30, 3 << 18, 3 << 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := fsck(t, tc.size, tc.inodes)
			if int64(l.Inodes) > tc.inodes {
				t.Fatalf("%d inodes, over the %d asked", l.Inodes, tc.inodes)
			}
			if l.Inodes != tc.wantInodes {
				t.Errorf("%d inodes, want %d", l.Inodes, tc.wantInodes)
			}
		})
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name         string
		size, inodes int64
	}{
		{"too small", MinBlocks*BlockSize - 1, 100},
		{"too few inodes", 1 << 20, 5},
		{"too large", 1 << 45, 100},
	} {
		if _, err := Plan(tc.size, tc.inodes); err == nil {
			t.Errorf("%s: Plan(%d, %d) succeeded", tc.name, tc.size, tc.inodes)
		}
	}
}

// FuzzPlan: whatever the size and inode count, a layout Plan accepts fits
// in the size, has no more inodes than asked, and every group holds its
// metadata and at least one data block.
func FuzzPlan(f *testing.F) {
	f.Add(int64(1<<20), int64(256))
	f.Add(int64(129<<20), int64(33024))
	f.Add(int64(128<<20+50*4096), int64(1000))
	f.Fuzz(func(t *testing.T, size, inodes int64) {
		l, err := Plan(size, inodes)
		if err != nil {
			return
		}
		if int64(l.Blocks)*BlockSize > size || int64(l.Inodes) > max(inodes, int64(l.Groups)*inodesPerBlock) || l.Inodes < firstIno+1 {
			t.Fatalf("Plan(%d, %d) = %+v", size, inodes, l)
		}
		if l.Inodes != l.Groups*l.InodesPerGroup || l.InodesPerGroup%inodesPerBlock != 0 || l.InodesPerGroup > maxInodesPerGrp {
			t.Fatalf("Plan(%d, %d): inconsistent %+v", size, inodes, l)
		}
		for g := range l.Groups {
			if l.groupBlocks(g) <= l.overhead(g) {
				t.Fatalf("Plan(%d, %d): group %d has no data block: %+v", size, inodes, g, l)
			}
		}
	})
}

// TestRootOwner: a layout's RootUID and RootGID own the root directory
// (a named volume's root belongs to the sandbox user), and the image
// still checks clean.
func TestRootOwner(t *testing.T) {
	for _, tt := range []struct {
		name     string
		uid, gid uint16
	}{{"root", 0, 0}, {"sandbox user", 1000, 1000}, {"apart", 1000, 2000}} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Plan(4<<20, 1024)
			if err != nil {
				t.Fatal(err)
			}
			l.RootUID, l.RootGID = tt.uid, tt.gid
			p := filepath.Join(t.TempDir(), "img")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(4 << 20); err != nil {
				t.Fatal(err)
			}
			if err := Format(f, l, time.Now()); err != nil {
				t.Fatal(err)
			}
			_, _, it := l.bitmaps(0)
			ino := make([]byte, InodeSize)
			if _, err := f.ReadAt(ino, int64(it)*BlockSize+(rootIno-1)*InodeSize); err != nil {
				t.Fatal(err)
			}
			uid, gid := uint16(ino[2])|uint16(ino[3])<<8, uint16(ino[24])|uint16(ino[25])<<8
			if uid != tt.uid || gid != tt.gid {
				t.Errorf("root directory owned by %d:%d, want %d:%d", uid, gid, tt.uid, tt.gid)
			}
			if debugfs, err := exec.LookPath("debugfs"); err == nil {
				out, _ := exec.Command(debugfs, "-R", "stat /", p).CombinedOutput()
				want := regexp.MustCompile(`User: +` + strconv.Itoa(int(tt.uid)) + ` +Group: +` + strconv.Itoa(int(tt.gid)) + `\b`)
				if !want.Match(out) {
					t.Errorf("debugfs stat /: %s (want %s)", out, want)
				}
			}
		})
	}
}
