// Package weedtest starts a real S3-compatible server for tests: SeaweedFS's
// `weed server -s3` on loopback ports in a temporary directory, stopped
// (with its whole process group) when the test ends. The binary is
// $PLUMB_WEED, or ~/.cache/plumb/weed-<Version>/weed as
// scripts/test-deps.sh builds it from the Go module proxy, or `weed` on
// PATH. Without one a test skips, and fails under CI=true.
package weedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the SeaweedFS module version scripts/test-deps.sh builds.
const Version = "v0.0.0-20261109003541-7506e5f91cd6"

// Server is a running weed S3 gateway.
type Server struct {
	Endpoint             string // host:port, plain HTTP
	AccessKey, SecretKey string
}

// Binary returns the weed binary's path, or "".
func Binary() string {
	if p := os.Getenv("PLUMB_WEED"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "plumb", "weed-"+Version, "weed")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("weed"); err == nil {
		return p
	}
	return ""
}

// freePorts returns n loopback ports free now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start runs a weed server with S3 for the rest of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "no SeaweedFS weed binary (run scripts/test-deps.sh, or set PLUMB_WEED)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// A generous deadline: a busy machine starts four services slowly.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, stop, err := Run(ctx, bin, t.TempDir(), "plumbtestaccess", "plumbtestsecret0123456789")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s
}

// Run starts weed (binary bin) with S3 on loopback ports, its data and log
// in dir, with one identity of the given keys, and returns once its S3
// gateway answers (or ctx ends). stop ends the server's whole process
// group; the caller removes dir.
func Run(ctx context.Context, bin, dir, accessKey, secretKey string) (_ *Server, stop func(), _ error) {
	s := &Server{AccessKey: accessKey, SecretKey: secretKey}
	cfg := map[string]any{"identities": []any{map[string]any{
		"name": "plumb", "credentials": []any{map[string]string{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
		"actions": []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, nil, err
	}
	p, err := freePorts(8)
	if err != nil {
		return nil, nil, err
	}
	s.Endpoint = "127.0.0.1:" + strconv.Itoa(p[3])
	args := []string{"server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + data, "-volume.max=32",
		"-master.volumeSizeLimitMB=32", "-master.telemetry=false",
		fmt.Sprintf("-master.port=%d", p[0]), fmt.Sprintf("-master.port.grpc=%d", p[4]),
		fmt.Sprintf("-volume.port=%d", p[1]), fmt.Sprintf("-volume.port.grpc=%d", p[5]),
		"-filer", fmt.Sprintf("-filer.port=%d", p[2]), fmt.Sprintf("-filer.port.grpc=%d", p[6]),
		"-s3", fmt.Sprintf("-s3.port=%d", p[3]), fmt.Sprintf("-s3.port.grpc=%d", p[7]),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + cfgPath}
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, nil, fmt.Errorf("start weed: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		log.Close()
	}
	cl, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		stop()
		return nil, nil, err
	}
	// Poll until the gateway answers.
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.ListBuckets(lctx)
		cancel()
		if err == nil {
			return s, stop, nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(log.Name())
			stop()
			return nil, nil, fmt.Errorf("weed exited before its S3 gateway answered: %s", tail(out))
		case <-ctx.Done():
			out, _ := os.ReadFile(log.Name())
			stop()
			return nil, nil, fmt.Errorf("weed's S3 gateway did not answer: %v\n%s", err, tail(out))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
