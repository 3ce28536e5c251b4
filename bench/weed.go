package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/snapshot/s3store"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
)

// startWeed runs SeaweedFS's `weed server -s3` on loopback ports in a
// temporary directory, as pkg/snapshot/s3store/weedtest starts it for the
// tests (the same binary: $PLUMB_WEED, ~/.cache/plumb/weed-<version>/weed
// or weed on PATH), and returns an S3 snapshot store on a new bucket of
// it. stop ends the server's whole process group and removes its data.
// Without the binary it is an error naming how to get one: the rows that
// need it fail rather than skip.
func startWeed(ctx context.Context, e *env) (*s3store.Store, func(), error) {
	bin := weedtest.Binary()
	if bin == "" {
		return nil, nil, errors.New("no SeaweedFS weed binary: run scripts/test-deps.sh (it builds ~/.cache/plumb/weed-" + weedtest.Version + "/weed) or set PLUMB_WEED")
	}
	dir, err := os.MkdirTemp("", "plumb-bench-weed")
	if err != nil {
		return nil, nil, err
	}
	const access, secret = "plumbbenchaccess", "plumbbenchsecret0123456789"
	cfg, _ := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name": "plumb", "credentials": []any{map[string]string{"accessKey": access, "secretKey": secret}},
		"actions": []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	cfgPath, data := filepath.Join(dir, "s3.json"), filepath.Join(dir, "data")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	p, err := freePorts(8)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	endpoint := "127.0.0.1:" + strconv.Itoa(p[3])
	args := []string{"server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + data, "-volume.max=32",
		"-master.volumeSizeLimitMB=32", "-master.telemetry=false",
		fmt.Sprintf("-master.port=%d", p[0]), fmt.Sprintf("-master.port.grpc=%d", p[4]),
		fmt.Sprintf("-volume.port=%d", p[1]), fmt.Sprintf("-volume.port.grpc=%d", p[5]),
		"-filer", fmt.Sprintf("-filer.port=%d", p[2]), fmt.Sprintf("-filer.port.grpc=%d", p[6]),
		"-s3", fmt.Sprintf("-s3.port=%d", p[3]), fmt.Sprintf("-s3.port.grpc=%d", p[7]),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + cfgPath}
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start weed: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	// Poll until the gateway makes the bucket (a busy machine starts
	// weed's four services slowly).
	e.log("waiting for weed's S3 gateway on %s", endpoint)
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := s3store.New(sctx, s3store.Config{Endpoint: endpoint, Bucket: "plumb-bench", AccessKey: access, SecretKey: secret, CreateBucket: true})
		cancel()
		if err == nil {
			return st, stop, nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logf.Name())
			stop()
			return nil, nil, fmt.Errorf("weed exited before its S3 gateway answered: %s", tailOf(out))
		case <-ctx.Done():
			stop()
			return nil, nil, fmt.Errorf("weed's S3 gateway did not answer: %v: %w", err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
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

func tailOf(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
