package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
)

// runLabel marks every container and volume a run creates, with the run id
// as value, so the end of the run can prove that nothing was left behind.
const runLabel = "plumb.bench"

// maxMsg is the gRPC message cap on both ends, as sandboxd and agentd set
// it.
const maxMsg = 16 << 20

// env is what scenarios share: the Docker client, the sandbox image, the
// freshly built sandbox agent and one worker, all started on first use.
type env struct {
	quick   bool
	runID   string
	loadAvg string // at start
	lg      *zap.Logger
	log     func(format string, args ...any)
	started time.Time

	docker *client.Client
	engine client.ServerVersionResult
	image  string // the busybox sandbox image
	worker *worker
	agent  []byte // the sandbox-agent binary, built on first use
	// runtime is the OCI runtime of the sandboxes newBox creates ("" =
	// the engine's default).
	runtime string
	// unhardened makes newBox create its sandboxes on unhardenedW, a
	// second worker with sandbox.Config.Unhardened (rows B1-unhardened,
	// B2-unhardened: what the hardening costs).
	unhardened  bool
	unhardenedW *worker
	// channel is every worker's sandbox.Config.Channel ("" = exec).
	channel string
}

// worker is a sandbox Manager on the local engine served as SandboxService
// on a loopback port, and a client connection to it: sandboxd's serving
// path, in this process so that its heap can be measured.
type worker struct {
	m    *sandbox.Manager
	srv  *grpc.Server
	conn *grpc.ClientConn
	c    plumbv1.SandboxServiceClient
}

func newEnv(quick bool, lg *zap.Logger, logw io.Writer) *env {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &env{quick: quick, runID: hex.EncodeToString(b), lg: lg, started: time.Now()}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		e.loadAvg = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	e.log = func(format string, args ...any) {
		fmt.Fprintf(logw, "[%6.1fs] %s\n", time.Since(e.started).Seconds(), fmt.Sprintf(format, args...))
	}
	return e
}

// labels are the labels of everything the run creates directly.
func (e *env) labels() map[string]string { return map[string]string{runLabel: e.runID} }

// engineClient connects to the local engine and imports the sandbox image.
func (e *env) engineClient(ctx context.Context) (*client.Client, error) {
	if e.docker != nil {
		return e.docker, nil
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := cli.ServerVersion(pctx, client.ServerVersionOptions{})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("the Docker Engine is unreachable: %w", err)
	}
	img, err := testimage.Ensure(ctx, cli, "")
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox image: %w", err)
	}
	e.docker, e.engine, e.image = cli, v, img
	return cli, nil
}

// sandboxWorker starts the worker on first use.
func (e *env) sandboxWorker(ctx context.Context) (*worker, error) {
	if e.worker != nil {
		return e.worker, nil
	}
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, err
	}
	w, err := e.startWorker(ctx, cli, sandbox.Config{Worker: "bench" + e.runID})
	if err != nil {
		return nil, err
	}
	e.worker = w
	return w, nil
}

// unhardenedWorker starts the worker of unhardened sandboxes on first
// use: the same defaults as the main worker, without the container
// hardening and the agent's sandbox user (benchmarks only).
func (e *env) unhardenedWorker(ctx context.Context) (*worker, error) {
	if e.unhardenedW != nil {
		return e.unhardenedW, nil
	}
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, err
	}
	w, err := e.startWorker(ctx, cli, sandbox.Config{Worker: "benchu" + e.runID, Unhardened: true})
	if err != nil {
		return nil, err
	}
	e.unhardenedW = w
	return w, nil
}

// startWorker starts a worker with the benchmark's defaults (Agent,
// Defaults and ExtraLabels are filled in).
func (e *env) startWorker(ctx context.Context, cli *client.Client, cfg sandbox.Config) (*worker, error) {
	if e.agent == nil {
		e.log("building the static sandbox-agent")
		agent, err := buildAgent(ctx)
		if err != nil {
			return nil, err
		}
		e.agent = agent
	}
	cfg.Agent = e.agent
	if cfg.Channel == "" {
		cfg.Channel = e.channel
	}
	cfg.Defaults = sandbox.Template{Image: e.image, MemoryBytes: 512 << 20, Pids: 1024}
	cfg.ExtraLabels = e.labels()
	m, err := sandbox.NewManager(ctx, cli, cfg, sandbox.WithLogger(e.lg))
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg), grpc.ForceServerCodecV2(sandboxsvc.Codec()))
	plumbv1.RegisterSandboxServiceServer(srv, sandboxsvc.New(m, []string{"runc"}, e.lg))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.Close()
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		srv.Stop()
		m.Close()
		return nil, err
	}
	return &worker{m: m, srv: srv, conn: conn, c: plumbv1.NewSandboxServiceClient(conn)}, nil
}

// stop stops serving, deletes the worker's sandboxes (and pool boxes) and
// closes its manager.
func (w *worker) stop(ctx context.Context) error {
	w.conn.Close()
	w.srv.Stop()
	err := w.m.DeleteAll(ctx)
	w.m.Close()
	return err
}

// buildAgent compiles cmd/sandbox-agent statically for the engine's
// architecture (the same as this process's: the engine is local).
func buildAgent(ctx context.Context) ([]byte, error) {
	return buildStatic(ctx, "github.com/plumbhq/plumb/cmd/sandbox-agent")
}

// buildStatic compiles the command pkg as a static binary for the
// engine's architecture and returns it.
func buildStatic(ctx context.Context, pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "plumb-bench-build")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, path.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v: %s", path.Base(pkg), err, b)
	}
	return os.ReadFile(out)
}

// box is one sandbox created through SandboxService.
type box struct {
	id  string
	cid string // its container, for the Engine-API baselines
	b   *sandboxclient.Backend
	w   *worker // the worker that created it
}

// newBox creates a sandbox through the gRPC API (on the unhardened worker
// when e.unhardened is set).
func (e *env) newBox(ctx context.Context) (*box, error) {
	get := e.sandboxWorker
	if e.unhardened {
		get = e.unhardenedWorker
	}
	w, err := get(ctx)
	if err != nil {
		return nil, err
	}
	res, err := w.c.CreateSandbox(ctx, e.createRequest())
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	sb := res.GetSandbox()
	info, err := w.m.Get(ctx, sb.GetId())
	if err != nil {
		return nil, err
	}
	return &box{id: sb.GetId(), cid: info.ContainerID, b: sandboxclient.New(w.conn, sb.GetId(), sandboxclient.HomeOf(sb)), w: w}, nil
}

// createRequest is the CreateSandbox request of the benchmark sandboxes:
// the worker's defaults under the current runtime (the defaults allow
// 1024 pids because under runsc the limit also counts gVisor's sentry
// threads).
func (e *env) createRequest() *plumbv1.CreateSandboxRequest {
	return &plumbv1.CreateSandboxRequest{Runtime: e.runtime}
}

// dropBox deletes a sandbox (cleanup: errors only reach the log, and the
// leftover check at the end catches what was not removed).
func (e *env) dropBox(b *box) {
	if b == nil || b.w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: b.id}); err != nil {
		e.log("delete sandbox %s: %v", b.id, err)
	}
}

// close stops the worker, deletes its sandboxes and returns what carries
// this run's label afterwards (after trying to remove it).
func (e *env) close() []string {
	if e.docker == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, w := range []*worker{e.worker, e.unhardenedW} {
		if w == nil {
			continue
		}
		if err := w.stop(ctx); err != nil {
			e.log("delete sandboxes: %v", err)
		}
	}
	e.removeImageTags(ctx)
	left, err := e.leftovers(ctx)
	if err != nil {
		left = append(left, "cannot list leftovers: "+err.Error())
	}
	if len(left) > 0 {
		e.removeLabelled(ctx)
	}
	e.docker.Close()
	return left
}

// leftovers lists the containers and volumes labelled with this run and
// its workers' image tags.
func (e *env) leftovers(ctx context.Context) ([]string, error) {
	f := client.Filters{}.Add("label", runLabel+"="+e.runID)
	cl, err := e.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cl.Items {
		out = append(out, "container "+c.ID[:12])
	}
	vl, err := e.docker.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return out, err
	}
	for _, v := range vl.Items {
		out = append(out, "volume "+v.Name)
	}
	tags, err := e.imageTags(ctx)
	for _, t := range tags {
		out = append(out, "image tag "+t)
	}
	sort.Strings(out)
	return out, err
}

// imageTags lists the derived-image tags this run's workers made: a
// worker tags what it derives <content key>-<worker> (pkg/sandbox's
// ownership scheme), and every worker of a run is named bench…<run id>.
// The images themselves are the engine's cache: they stay while another
// tag (a test's keeper, a real worker's) does.
func (e *env) imageTags(ctx context.Context) ([]string, error) {
	list, err := e.docker.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", sandbox.DerivedRepository+":*")})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, img := range list.Items {
		for _, ref := range img.RepoTags {
			tag := strings.TrimPrefix(ref, sandbox.DerivedRepository+":")
			if _, owner, ok := strings.Cut(tag, "-"); ok && strings.HasPrefix(owner, "bench") && strings.HasSuffix(owner, e.runID) {
				out = append(out, ref)
			}
		}
	}
	return out, nil
}

// removeImageTags removes this run's derived-image tags (imageTags).
func (e *env) removeImageTags(ctx context.Context) {
	tags, err := e.imageTags(ctx)
	if err != nil {
		e.log("list image tags: %v", err)
	}
	for _, t := range tags {
		if _, err := e.docker.ImageRemove(ctx, t, client.ImageRemoveOptions{}); err != nil {
			e.log("remove image tag %s: %v", t, err)
		}
	}
}

// removeLabelled force-removes whatever carries this run's label.
func (e *env) removeLabelled(ctx context.Context) {
	f := client.Filters{}.Add("label", runLabel+"="+e.runID)
	if cl, err := e.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cl.Items {
			_, _ = e.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	if vl, err := e.docker.VolumeList(ctx, client.VolumeListOptions{Filters: f}); err == nil {
		for _, v := range vl.Items {
			_, _ = e.docker.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
		}
	}
}

// machine describes this host.
func (e *env) machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvg: e.loadAvg}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0], 10, 64); err == nil {
		m.MemoryMiB = kb / 1024
	}
	if e.docker != nil {
		m.EngineVersion, m.EngineAPI = e.engine.Version, e.engine.APIVersion
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
