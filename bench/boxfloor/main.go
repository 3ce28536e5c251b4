package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noPreempt is the runtime setting boxfloor runs with: its one goroutine
// waits in a raw read, where the runtime would signal it every 10 ms to no
// effect (a preemption request).
const noPreempt = "asyncpreemptoff=1"

func main() {
	if !strings.Contains(os.Getenv("GODEBUG"), noPreempt) {
		// The setting is read at start: run again with it.
		env := []string{"GODEBUG=" + noPreempt}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GODEBUG=") {
				env = append(env, kv)
			}
		}
		err := syscall.Exec("/proc/self/exe", os.Args, env)
		fmt.Fprintln(os.Stderr, "boxfloor: exec:", err)
		os.Exit(1)
	}
	// One processor, as the box's CPU quota gives.
	runtime.GOMAXPROCS(1)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "boxfloor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: boxfloor DIR")
	}
	return serve(args[0], rawFD(0), rawFD(1))
}

// lineBytes is the size of a request and of its answer.
const lineBytes = 64

// serve makes DIR and answers requests read from in until it ends: each
// is a line of lineBytes naming an operation (padded with spaces), which
// serve makes once before it writes the same line back to out; a failed
// or unknown operation is answered with a line starting "ERR ". Each read
// and write is one system call on the file it is given, so a request costs
// its channel's round trip and the operation's own calls, no more.
func serve(dir string, in io.Reader, out io.Writer) error {
	f, err := setup(dir)
	if err != nil {
		return err
	}
	defer closefd(f.dir)
	ops := f.ops()
	line := make([]byte, lineBytes)
	for {
		if _, err := io.ReadFull(in, line); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		name := string(bytes.TrimRight(line[:lineBytes-1], " "))
		answer := line
		if do, ok := ops[name]; !ok {
			answer = errLine(fmt.Errorf("unknown operation %q", name))
		} else if err := do(); err != nil {
			answer = errLine(fmt.Errorf("%s: %w", name, err))
		}
		if _, err := out.Write(answer); err != nil {
			return err
		}
	}
}

// errLine is err as a serve answer.
func errLine(err error) []byte {
	return []byte(fmt.Sprintf("ERR %-*.*s\n", lineBytes-5, lineBytes-5, err.Error()))
}

// rawFD reads and writes a blocking file descriptor with raw calls.
type rawFD int

func (fd rawFD) Read(b []byte) (int, error) {
	n, err := read(int(fd), b)
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

func (fd rawFD) Write(b []byte) (int, error) { return write(int(fd), b) }

// The system calls, all raw: made without telling the Go scheduler, as a
// server in C makes them. A regular call would let the runtime's monitor
// thread hand the processor to another thread during a slow call and wake
// threads for it: under gVisor, futex and nanosleep calls on other
// threads, each a trip through the sentry, that the floor must not
// charge. An interrupted call is made again.
func raw(trap, a1, a2, a3, a4 uintptr) (uintptr, error) {
	for {
		r, _, errno := unix.RawSyscall6(trap, a1, a2, a3, a4, 0, 0)
		switch errno {
		case 0:
			return r, nil
		case unix.EINTR:
			continue
		}
		return r, errno
	}
}

func cstr(s string) *byte {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err) // the fixture's names have no NUL
	}
	return p
}

func fstatat(dir int, name string, st *unix.Stat_t) error {
	p := cstr(name)
	_, err := raw(unix.SYS_NEWFSTATAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW)
	return err
}

func openat(dir int, name string, flags int, mode uint32) (int, error) {
	p := cstr(name)
	fd, err := raw(unix.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC), uintptr(mode))
	return int(fd), err
}

func fstat(fd int, st *unix.Stat_t) error {
	_, err := raw(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0, 0)
	return err
}

func read(fd int, b []byte) (int, error) {
	n, err := raw(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0)
	return int(n), err
}

func write(fd int, b []byte) (int, error) {
	n, err := raw(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0)
	return int(n), err
}

func fchmod(fd int, mode uint32) error {
	_, err := raw(unix.SYS_FCHMOD, uintptr(fd), uintptr(mode), 0, 0)
	return err
}

func closefd(fd int) error {
	_, err := raw(unix.SYS_CLOSE, uintptr(fd), 0, 0, 0)
	return err
}

func renameat(dir int, from, to string) error {
	p, q := cstr(from), cstr(to)
	_, err := raw(unix.SYS_RENAMEAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(dir), uintptr(unsafe.Pointer(q)))
	return err
}

func getdents(fd int, b []byte) (int, error) {
	n, err := raw(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0)
	return int(n), err
}

// ops are the operations by name.
func (f *fixture) ops() map[string]func() error {
	return map[string]func() error{
		"echo": func() error { return nil },
		"read": func() error {
			return f.inFiles(func(d int) error { _, err := f.read(d, "r.txt"); return err })
		},
		"write": func() error {
			return f.inFiles(func(d int) error { return f.write(d, "w.txt", f.content, true) })
		},
		"edit": func() error { return f.inFiles(f.edit) },
		"ls":   func() error { return f.list("") },
		"glob": func() error { return f.list(".go") },
	}
}

// inFiles runs op on DIR/f, the directory of the files read, written and
// edited, opened for the request and closed after it: a request names its
// file by a path, which can lead somewhere else at the next request (a
// directory renamed, a symlink put in its place), so a server that keeps
// plumb's contract resolves the parent each time, following no symlink.
func (f *fixture) inFiles(op func(dir int) error) error {
	d, err := openat(f.dir, "f", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer closefd(d)
	return op(d)
}

// fixture is DIR, open, with the content B1 reads and writes.
type fixture struct {
	dir     int // DIR, O_RDONLY|O_DIRECTORY
	content []byte
	buf     []byte
	names   []byte // getdents64 buffer
}

// setup makes DIR and its files.
func setup(dir string) (*fixture, error) {
	var b bytes.Buffer
	for i := 1; i <= 64; i++ {
		line := fmt.Sprintf("line %04d FLOR ", i)
		b.WriteString(line + strings.Repeat("x", 63-len(line)) + "\n")
	}
	files := map[string][]byte{"f/r.txt": b.Bytes(), "f/e.txt": b.Bytes()}
	for i := range 10 {
		files[fmt.Sprintf("src/file%02d.go", i)] = []byte("package src\n")
		files[fmt.Sprintf("src/note%02d.txt", i)] = []byte("note\n")
	}
	for _, sub := range []string{"/src", "/f"} {
		if err := os.MkdirAll(dir+sub, 0o755); err != nil {
			return nil, err
		}
	}
	for name, data := range files {
		if err := os.WriteFile(dir+"/"+name, data, 0o644); err != nil {
			return nil, err
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &fixture{dir: fd, content: b.Bytes(), buf: make([]byte, 64<<10), names: make([]byte, 8<<10)}, nil
}

// read reads name whole: fstatat (a special file is refused without being
// opened: docs/file-tools.md), openat, fstat (still that file?), one read
// of its size, close.
func (f *fixture) read(dir int, name string) ([]byte, error) {
	var st unix.Stat_t
	if err := fstatat(dir, name, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	fd, err := openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer closefd(fd)
	if err := fstat(fd, &st); err != nil {
		return nil, err
	}
	n, err := read(fd, f.buf[:min(int(st.Size), len(f.buf))])
	if err != nil {
		return nil, err
	}
	return f.buf[:n], nil
}

// write replaces name with data atomically: fstatat of the target when
// lstat is set (a directory is refused, an existing file keeps its mode:
// docs/file-tools.md; edit has it from its read), a new temp file, write,
// fchmod, close, renameat.
func (f *fixture) write(dir int, name string, data []byte, lstat bool) error {
	if lstat {
		var st unix.Stat_t
		err := fstatat(dir, name, &st)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = fmt.Errorf("%s is a directory", name)
		}
		if err != nil && err != unix.ENOENT {
			return err
		}
	}
	tmp := "." + name + ".tmp"
	fd, err := openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = write(fd, data)
	if err == nil {
		err = fchmod(fd, 0o644)
	}
	if cerr := closefd(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameat(dir, tmp, name)
	}
	return err
}

// edit reads e.txt of dir and writes it back with line 32 toggled.
func (f *fixture) edit(dir int) error {
	b, err := f.read(dir, "e.txt")
	if err != nil {
		return err
	}
	old, nu := []byte("line 0032 FLOR"), []byte("line 0032 ROLF")
	if !bytes.Contains(b, old) {
		old, nu = nu, old
	}
	return f.write(dir, "e.txt", bytes.Replace(b, old, nu, 1), false)
}

// list reads src's entries and stats those whose name ends with suffix
// ("" for all).
func (f *fixture) list(suffix string) error {
	fd, err := openat(f.dir, "src", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer closefd(fd)
	var names []string
	for {
		n, err := getdents(fd, f.names)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(f.names[:n], -1, names)
	}
	stats := 0
	for _, name := range names {
		if !strings.HasSuffix(name, suffix) {
			continue
		}
		var st unix.Stat_t
		if err := fstatat(fd, name, &st); err != nil {
			return err
		}
		stats++
	}
	if want := map[string]int{"": 20, ".go": 10}[suffix]; stats != want {
		return fmt.Errorf("src: %d entries ending in %q, want %d", stats, suffix, want)
	}
	return nil
}
