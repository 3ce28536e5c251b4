package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/ext2fs"
)

// loopMajor is the block device major number of loop devices.
const loopMajor = 7

// validDiskName reports whether name may name a workspace image (a
// sandbox id): 1 to 128 of [A-Za-z0-9_.-], the first alphanumeric. Not a
// regexp: its {0,127} compiled at start-up cost every agent ~120 KB of
// heap.
func validDiskName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// runDisk runs `disk attach DIR NAME BYTES INODES [UID:GID]` and `disk
// detach DIR NAME`. The worker runs them in its disk helper container
// (docs/security.md, "Workspace disk limit"): attach makes DIR/NAME.img,
// a sparse ext2 image of BYTES bytes with at most INODES inodes, unless
// it exists, attaches it to a loop device unless one already has it, and
// prints the device's number (UID:GID own a new image's root directory:
// a named volume's belongs to the sandbox user); detach detaches every loop device of
// DIR/NAME.img and deletes it. A failed attach of a new image deletes it.
func runDisk(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sandbox-agent: disk:", err)
		return 1
	}
	if len(args) < 3 || !validDiskName(args[2]) {
		fmt.Fprint(stderr, diskUsage)
		return 2
	}
	img := filepath.Join(args[1], args[2]+".img")
	switch {
	case args[0] == "attach" && (len(args) == 5 || len(args) == 6):
		size, err1 := strconv.ParseInt(args[3], 10, 64)
		inodes, err2 := strconv.ParseInt(args[4], 10, 64)
		var uid, gid uint64
		var err3, err4 error
		if len(args) == 6 {
			u, g, ok := strings.Cut(args[5], ":")
			if !ok {
				err3 = errors.New("owner: want UID:GID")
			} else {
				uid, err3 = strconv.ParseUint(u, 10, 16)
				gid, err4 = strconv.ParseUint(g, 10, 16)
			}
		}
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			fmt.Fprintf(stderr, "sandbox-agent: disk: bad number in %q\n", args)
			return 2
		}
		n, err := attach(img, size, inodes, uint16(uid), uint16(gid))
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, n)
		return 0
	case args[0] == "detach" && len(args) == 3:
		if err := detach(img); err != nil {
			return fail(err)
		}
		return 0
	}
	fmt.Fprint(stderr, diskUsage)
	return 2
}

const diskUsage = "usage: sandbox-agent disk attach DIR NAME BYTES INODES [UID:GID] | detach DIR NAME\n"

// attach makes img when it does not exist and returns the number of the
// loop device it is attached to.
func attach(img string, size, inodes int64, uid, gid uint16) (n int, err error) {
	made, err := makeImage(img, size, inodes, uid, gid)
	if err != nil {
		return -1, err
	}
	defer func() {
		if err != nil && made {
			os.Remove(img)
		}
	}()
	st, err := os.Stat(img)
	if err != nil {
		return -1, err
	}
	if n, err := findLoop(st); err != nil || n >= 0 {
		return n, err
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return -1, err
	}
	defer ctl.Close()
	// Another helper may take the free device between the two calls:
	// ask again then.
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return -1, fmt.Errorf("find a free loop device: %w", err)
		}
		if err := setLoop(n, f); !errors.Is(err, unix.EBUSY) {
			return n, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, errors.New("every free loop device was taken meanwhile")
}

// makeImage creates img as a sparse ext2 image unless it exists; made
// says it was created.
func makeImage(img string, size, inodes int64, uid, gid uint16) (made bool, err error) {
	l, err := ext2fs.Plan(size, inodes)
	if err != nil {
		return false, err
	}
	l.RootUID, l.RootGID = uid, gid
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(img)
		}
	}()
	if err := f.Truncate(int64(l.Blocks) * ext2fs.BlockSize); err != nil {
		return false, err
	}
	if err := ext2fs.Format(f, l, time.Now()); err != nil {
		return false, err
	}
	return true, f.Sync()
}

// loopDev opens loop device n, making its node in this container's /dev
// first when it has none (the device may be newer than the container).
func loopDev(n int) (*os.File, error) {
	p := fmt.Sprintf("/dev/loop%d", n)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(loopMajor, uint32(n)))); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("make %s: %w", p, err)
		}
	}
	return os.OpenFile(p, os.O_RDWR, 0)
}

// setLoop attaches f to loop device n.
func setLoop(n int, f *os.File) error {
	dev, err := loopDev(n)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(f.Fd())); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("loop device %d is in use: %w", n, err)
		}
		return fmt.Errorf("attach loop device %d: %w", n, err)
	}
	info := unix.LoopInfo64{}
	copy(info.File_name[:], filepath.Base(f.Name()))
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("set up loop device %d: %w", n, err)
	}
	return nil
}

// findLoop returns the number of the loop device whose backing file is
// st (same device and inode), or -1 when none is.
func findLoop(st os.FileInfo) (int, error) {
	ns, err := loops()
	if err != nil {
		return -1, err
	}
	for _, n := range ns {
		if backs(n, st) {
			return n, nil
		}
	}
	return -1, nil
}

// loops lists the numbers of the loop devices that have a backing file.
func loops() ([]int, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "loop")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop/backing_file")); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// backs reports whether loop device n's backing file is st.
func backs(n int, st os.FileInfo) bool {
	dev, err := loopDev(n)
	if err != nil {
		return false
	}
	defer dev.Close()
	info, err := unix.IoctlLoopGetStatus64(int(dev.Fd()))
	if err != nil {
		return false
	}
	sys := st.Sys().(*syscall.Stat_t)
	return info.Inode == sys.Ino && info.Device == sys.Dev
}

// detach detaches every loop device backed by img and deletes it. A
// device still mounted is detached by the kernel when it is unmounted.
func detach(img string) error {
	st, err := os.Stat(img)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ns, err := loops()
	if err != nil {
		return err
	}
	for _, n := range ns {
		if !backs(n, st) {
			continue
		}
		dev, err := loopDev(n)
		if err != nil {
			return err
		}
		err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		dev.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("detach loop device %d: %w", n, err)
		}
	}
	return os.Remove(img)
}
