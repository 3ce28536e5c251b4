// Package pgtest gives tests a real, throwaway PostgreSQL server: Debian's
// binaries (/usr/lib/postgresql/<version>/bin, else initdb and postgres on
// PATH) run a fresh cluster in a temporary directory, listening on a free
// loopback port and on a unix socket in that directory, and every test
// gets a database of its own. As root the cluster runs as the postgres
// system user (PostgreSQL refuses to run as root).
//
// A package's tests share one server, started by the first New and
// stopped, with its directory removed, by Main after the last test; if the
// test binary dies first, the kernel stops the server with it. When
// PostgreSQL is not installed, New fails the test under CI=true and skips
// it otherwise, saying to apt-get install postgresql.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Install is what to do when PostgreSQL is missing.
const Install = "apt-get install postgresql"

// Root is where Debian installs PostgreSQL's server binaries, one
// directory per major version.
var Root = "/usr/lib/postgresql"

var (
	mu       sync.Mutex
	inMain   bool
	srv      *server
	startErr error
	dbs      atomic.Int64
)

// Main runs the package's tests, then stops the server New started and
// removes its cluster. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	mu.Lock()
	inMain = true
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if srv != nil {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			code = 1
		}
		srv = nil
	}
	return code
}

// New returns the DSN of a new, empty database on the package's server
// (started on first use) and drops the database when t ends.
func New(t testing.TB) string {
	t.Helper()
	s, err := shared()
	if errors.Is(err, errNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is not installed: %s", Install)
		}
		t.Skipf("PostgreSQL is not installed: %s", Install)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	name := "test_" + strconv.FormatInt(dbs.Add(1), 10)
	if err := s.exec(ctx, "CREATE DATABASE "+name+s.createOptions); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.dsn(name)
}

func shared() (*server, error) {
	mu.Lock()
	defer mu.Unlock()
	if !inMain {
		return nil, errors.New("pgtest: call pgtest.Main from the package's TestMain, so the server stops after the tests")
	}
	if srv == nil && startErr == nil {
		srv, startErr = start(false)
	}
	return srv, startErr
}

var errNotInstalled = errors.New("PostgreSQL is not installed")

// Binaries returns the directory holding initdb and postgres: the newest
// version under Root, else the one on PATH.
func Binaries() (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(Root, "*", "bin", "initdb"))
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		va, vb := version(a), version(b)
		switch {
		case va < vb:
			return -1
		case va > vb:
			return 1
		}
		return 0
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		bin := filepath.Dir(dirs[i])
		if _, err := os.Stat(filepath.Join(bin, "postgres")); err == nil {
			return bin, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		bin := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(bin, "postgres")); err == nil {
			return bin, nil
		}
	}
	return "", errNotInstalled
}

// server is one running cluster.
type server struct {
	dir  string // cluster, socket and log
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the postmaster exited
	wait error
	// createOptions make CREATE DATABASE copy files rather than log the
	// template's pages: several times faster (PostgreSQL 15 and newer).
	createOptions string
}

func (s *server) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

func (s *server) exec(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// Server is a throwaway server for programs that are not tests (the
// benchmark harness). Unlike the tests' shared server it is durable:
// fsync and synchronous commit stay on, as in production.
type Server struct{ s *server }

// Start runs a new durable server on a free loopback port. The caller must
// Stop it; if the program dies first, the kernel stops the server with it.
func Start() (*Server, error) {
	s, err := start(true)
	if err != nil {
		return nil, err
	}
	return &Server{s: s}, nil
}

// CreateDatabase creates an empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+s.s.createOptions); err != nil {
		return "", err
	}
	return s.s.dsn(name), nil
}

// Stop shuts the server down and removes its cluster.
func (s *Server) Stop() error { return s.s.stop() }

// start creates a cluster in a new temporary directory and runs a server
// on it until stop. A durable server keeps fsync and synchronous commit
// on; the tests' server turns them off for speed.
func start(durable bool) (_ *server, err error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: the postgres user must be able to reach it.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v: %s", err, bytes.TrimSpace(out))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s := &server{dir: dir, port: port, done: make(chan struct{})}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "dynamic_shared_memory_type=mmap"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// The kernel sends the parent-death signal when the thread that
	// started the process exits: one locked thread starts and waits for
	// the postmaster, so the server lives exactly as long as this test
	// binary wants it (SIGINT is PostgreSQL's fast shutdown).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer close(s.done)
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.wait = s.cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	if err := s.ready(); err != nil {
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

// ready waits until the server accepts connections, or fails with its log
// when it exits first.
func (s *server) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := pgx.Connect(ctx, s.dsn("postgres"))
		if err == nil {
			major, _, _ := strings.Cut(c.PgConn().ParameterStatus("server_version"), ".")
			if v, _ := strconv.Atoi(major); v >= 15 {
				s.createOptions = " STRATEGY FILE_COPY"
			}
			return c.Close(ctx)
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres exited (%v): %s", s.wait, bytes.TrimSpace(log))
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres did not accept connections: %w", err)
		case <-tick.C:
		}
	}
}

// stop shuts the server down (fast shutdown, then SIGKILL if it hangs) and
// removes its directory.
func (s *server) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgtest: stop postgres: %w", err)
	}
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute): // hang guard
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return os.RemoveAll(s.dir)
}

// credential is the postgres system user's when running as root (nil
// otherwise: the server runs as the current user).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs the postgres system user (%s creates it): %w", Install, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
