package sandboxd

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store"
)

// Worker is a wired sandbox worker: its service, ready to register, and
// the metrics registry to serve.
type Worker struct {
	Service  *sandboxsvc.Service
	Registry *prometheus.Registry

	docker       *client.Client
	mgr          *sandbox.Manager
	lg           *zap.Logger
	deleteOnExit bool
}

// Binaries are the programs a worker bakes into its sandboxes.
type Binaries struct {
	// Agent is the static sandbox-agent.
	Agent []byte
	// EgressProxy is the static plumb-egress (nil: egress sandboxes are
	// refused).
	EgressProxy []byte
	// EgressUpstreamCA is the PEM bundle of Config.EgressUpstreamCA (nil:
	// the system bundle).
	EgressUpstreamCA []byte
}

// ReadBinaries reads the sandbox-agent and plumb-egress binaries cfg
// names, or those next to this executable. A binary it cannot read is a
// daemon.UsageError.
func ReadBinaries(cfg *Config) (Binaries, error) {
	agent, err := readAgent(cfg.AgentBinary)
	if err != nil {
		return Binaries{}, &daemon.UsageError{Err: err}
	}
	egressProxy, err := readEgressProxy(cfg.EgressProxyBinary)
	if err != nil {
		return Binaries{}, &daemon.UsageError{Err: err}
	}
	var upstreamCA []byte
	if cfg.EgressUpstreamCA != "" {
		if upstreamCA, err = os.ReadFile(cfg.EgressUpstreamCA); err != nil {
			return Binaries{}, &daemon.UsageError{Err: fmt.Errorf("--egress-upstream-ca: %w", err)}
		}
		if !x509.NewCertPool().AppendCertsFromPEM(upstreamCA) {
			return Binaries{}, &daemon.UsageError{Err: fmt.Errorf("--egress-upstream-ca %s: no PEM certificate", cfg.EgressUpstreamCA)}
		}
	}
	return Binaries{Agent: agent, EgressProxy: egressProxy, EgressUpstreamCA: upstreamCA}, nil
}

// Options are what Build needs besides the config.
type Options struct {
	Binaries Binaries
	Logger   *zap.Logger
	// DeleteOnExit removes every sandbox at Close.
	DeleteOnExit bool
}

// Build connects to the Docker Engine and starts the sandbox manager
// (re-adopting this worker's sandboxes) for the validated cfg. A config
// the manager refuses is a daemon.UsageError. Close the Worker when done.
func Build(ctx context.Context, cfg *Config, o Options) (*Worker, error) {
	lg := o.Logger
	// The client traces an Engine API call made while serving an RPC
	// under that RPC's span (it takes the provider from the parent span);
	// the background reaper's calls, with no span, make none.
	docker, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = docker.Info(pctx, client.InfoOptions{})
	cancel()
	if err != nil {
		docker.Close()
		if errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "permission denied") {
			// Most often a non-root sandboxd outside the socket's group (on
			// Kubernetes: supplementalGroups, overlays/host-docker/docker-group.yaml).
			return nil, fmt.Errorf("cannot reach the Docker Engine: %w (run sandboxd in the group that owns the socket: stat -c %%g on it gives the gid)", err)
		}
		return nil, fmt.Errorf("cannot reach the Docker Engine: %w", err)
	}
	templates, pools := cfg.templates()
	snaps, err := openSnapshots(ctx, cfg)
	if err != nil {
		docker.Close()
		return nil, err
	}
	mgr, err := sandbox.NewManager(ctx, docker, sandbox.Config{
		Snapshots:      snaps,
		Volumes:        sandbox.VolumeConfig{PerTenantBytes: int64(cfg.Volumes.PerTenant)},
		Worker:         cfg.Worker,
		Agent:          o.Binaries.Agent,
		Templates:      templates,
		Pools:          pools,
		Defaults:       cfg.Defaults.spec(),
		MaxSandboxes:   cfg.MaxSandboxes,
		MaxMemoryBytes: int64(cfg.MaxMemory),
		ExtraLabels:    cfg.Labels,

		ChannelMemoryBytes:  int64(cfg.ChannelMemory),
		Policy:              cfg.Policy.spec(),
		StateDir:            cfg.StateDir,
		EgressProxy:         o.Binaries.EgressProxy,
		EgressUpstreamCA:    o.Binaries.EgressUpstreamCA,
		DiskEnforcement:     cfg.DiskEnforcement,
		Channel:             cfg.Channel,
		NoMemoryCheckpoints: cfg.Snapshots.Memory == "off",
	}, sandbox.WithLogger(lg))
	if err != nil {
		docker.Close()
		if ce := (*sandbox.ConfigError)(nil); errors.As(err, &ce) {
			return nil, &daemon.UsageError{Err: err}
		}
		return nil, err
	}
	w := &Worker{docker: docker, mgr: mgr, lg: lg, deleteOnExit: o.DeleteOnExit}
	runtimes, err := mgr.Runtimes(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.Service = sandboxsvc.New(mgr, runtimes, lg, sandboxsvc.WithResume(cfg.Resume.spec()))
	w.Registry = prometheus.NewRegistry()
	w.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), sandboxsvc.NewPoolCollector(mgr), sandboxsvc.NewTransferCollector(mgr))
	return w, nil
}

// Close kills the resumable executions still running (their goroutines
// end), stops the manager, first removing every sandbox when the worker
// was built to delete them on exit (otherwise the next start re-adopts
// them), and closes the Docker client.
func (w *Worker) Close() {
	if w.Service != nil {
		w.Service.Close()
	}
	if w.deleteOnExit {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := w.mgr.DeleteAll(ctx); err != nil {
			w.lg.Warn("delete sandboxes at exit", zap.Error(err))
		}
		cancel()
	}
	w.mgr.Close()
	w.docker.Close()
}

// readAgent loads the sandbox-agent binary: the given path, or
// sandbox-agent next to this executable.
func readAgent(path string) ([]byte, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate sandbox-agent: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), "sandbox-agent")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox-agent binary: %w (build it with make build, or set --agent-binary)", err)
	}
	return b, nil
}

// readEgressProxy loads the plumb-egress binary: the given path (which
// must exist), or plumb-egress next to this executable when there is one
// (nil otherwise: egress sandboxes are then refused).
func readEgressProxy(path string) ([]byte, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "plumb-egress"))
		if err != nil {
			return nil, nil
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plumb-egress binary: %w (build it with make build, or set --egress-proxy-binary)", err)
	}
	return b, nil
}

// openSnapshots opens the snapshot store of cfg.Snapshots (nil when none is
// configured and there is no state dir).
func openSnapshots(ctx context.Context, cfg *Config) (*snapshot.Repo, error) {
	sc := cfg.Snapshots
	var store snapshot.Store
	switch {
	case sc.S3.Endpoint != "" || sc.S3.Bucket != "":
		if sc.Dir != "" {
			return nil, &daemon.UsageError{Err: errors.New("snapshots: set dir or s3, not both")}
		}
		s, err := s3store.New(ctx, s3store.Config{
			Endpoint: sc.S3.Endpoint, Bucket: sc.S3.Bucket, Prefix: sc.S3.Prefix, Region: sc.S3.Region,
			Secure: !sc.S3.Insecure, CreateBucket: sc.S3.CreateBucket, AccessKey: sc.S3.AccessKey, SecretKey: sc.S3.SecretKey,
		})
		if err != nil {
			return nil, err
		}
		store = s
	case sc.Dir != "" || cfg.StateDir != "":
		dir := sc.Dir
		if dir == "" {
			dir = filepath.Join(cfg.StateDir, "snapshots")
		}
		d, err := snapshot.NewDir(dir)
		if err != nil {
			return nil, err
		}
		store = d
	default:
		return nil, nil
	}
	return snapshot.NewRepo(store, int64(sc.PerTenant))
}
