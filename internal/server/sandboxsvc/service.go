// Package sandboxsvc is the thin gRPC adapter for plumb.v1.SandboxService: it
// maps requests to the sandbox manager and its per-sandbox file interface,
// and errors to gRPC status through Status (status.go). It holds no sandbox
// logic.
package sandboxsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/internal/version"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Manager is what the service needs from the sandbox manager.
type Manager interface {
	Create(ctx context.Context, spec sandbox.CreateSpec) (sandbox.Info, error)
	Get(ctx context.Context, id string) (sandbox.Info, error)
	List(labels map[string]string) []sandbox.Info
	Delete(ctx context.Context, id string) error
	KeepAlive(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error)
	Files(id string) (*sandbox.Files, error)
	Usage() (int, int64)
	Config() sandbox.Config
	Owner(id string) (string, error)
	NotFound(id string) error
	Pools() []sandbox.PoolState
	WatchEgress(ctx context.Context, id string, timeout time.Duration, ready func(), send func(sandbox.EgressRequest) error) error
	DecideEgress(ctx context.Context, id string, d sandbox.EgressDecision) error
	Snapshot(ctx context.Context, id string) (*snapshot.Manifest, error)
	ListSnapshots(ctx context.Context, tenant string) ([]snapshot.Summary, error)
	DeleteSnapshot(ctx context.Context, tenant, id string) error
	Suspend(ctx context.Context, id string, mode sandbox.SuspendMode) (sandbox.SuspendResult, error)
	Resume(ctx context.Context, id string) (sandbox.Info, error)
	Fork(ctx context.Context, spec sandbox.CreateSpec, count int) ([]sandbox.Info, error)
	CreateVolume(ctx context.Context, tenant, name string, sizeBytes int64) (sandbox.Volume, error)
	ListVolumes(tenant string) []sandbox.Volume
	DeleteVolume(ctx context.Context, tenant, ref string) error
}

// Service implements plumbv1.SandboxServiceServer.
type Service struct {
	plumbv1.UnimplementedSandboxServiceServer
	m        Manager
	runtimes []string
	lg       *zap.Logger
	execs    *sandbox.Executions
}

// Option configures a Service.
type Option func(*Service)

// WithResume sets the grace and buffer of resumable ExecuteStreams and
// Process streams (default: sandbox.DefaultResumeGrace and
// sandbox.DefaultResumeBuffer).
func WithResume(cfg sandbox.ExecutionsConfig) Option {
	return func(s *Service) { s.execs = sandbox.NewExecutions(cfg) }
}

// New returns the service over m; runtimes lists the engine's OCI runtimes
// for DescribeWorker. lg may be nil.
func New(m Manager, runtimes []string, lg *zap.Logger, opts ...Option) *Service {
	if lg == nil {
		lg = zap.NewNop()
	}
	s := &Service{m: m, runtimes: runtimes, lg: lg.Named("sandboxsvc")}
	for _, o := range opts {
		o(s)
	}
	if s.execs == nil {
		s.execs = sandbox.NewExecutions(sandbox.ExecutionsConfig{})
	}
	return s
}

// Close kills the resumable commands and processes still running (attached
// or not) and waits for them to end: the worker's shutdown, after its gRPC
// server stopped.
func (s *Service) Close() { s.execs.Close() }

// fail logs an internal error's detail (which Status hides) and converts it.
func (s *Service) fail(method string, err error) error {
	st := Status(err)
	if status.Code(st) == codes.Internal {
		s.lg.Error("internal error", zap.String("method", method), zap.Error(err))
	}
	return st
}

// own returns a not-found error unless the caller's tenant owns sandbox
// id: another tenant's sandbox does not exist for it.
func (s *Service) own(ctx context.Context, id string) error {
	owner, err := s.m.Owner(id)
	if err != nil {
		return err
	}
	if owner != tenant.From(ctx) {
		return s.m.NotFound(id)
	}
	return nil
}

// files is the file interface of sandbox id, after the tenant check.
func (s *Service) files(ctx context.Context, id string) (*sandbox.Files, error) {
	if err := s.own(ctx, id); err != nil {
		return nil, err
	}
	return s.m.Files(id)
}

// BulkMethods are the methods whose requests carry file contents or stdin
// and may take the server's largest message; every other request is small
// (daemon.Options.BulkMethods).
var BulkMethods = []string{
	plumbv1.SandboxService_Write_FullMethodName,
	plumbv1.SandboxService_Edit_FullMethodName,
	plumbv1.SandboxService_UploadFiles_FullMethodName,
	plumbv1.SandboxService_Process_FullMethodName,
}

var networks = map[plumbv1.NetworkMode]string{
	plumbv1.NetworkMode_NETWORK_MODE_NONE:   sandbox.NetworkNone,
	plumbv1.NetworkMode_NETWORK_MODE_EGRESS: sandbox.NetworkEgress,
}

func sandboxToPB(i sandbox.Info) *plumbv1.Sandbox {
	st := plumbv1.SandboxState_SANDBOX_STATE_RUNNING
	switch i.State {
	case sandbox.StateFailed:
		st = plumbv1.SandboxState_SANDBOX_STATE_FAILED
	case sandbox.StateDeleting:
		st = plumbv1.SandboxState_SANDBOX_STATE_DELETING
	case sandbox.StatePaused:
		st = plumbv1.SandboxState_SANDBOX_STATE_PAUSED
	case sandbox.StateHibernated:
		st = plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED
	}
	nw := plumbv1.NetworkMode_NETWORK_MODE_NONE
	if i.Settings.Network == sandbox.NetworkEgress {
		nw = plumbv1.NetworkMode_NETWORK_MODE_EGRESS
	}
	return &plumbv1.Sandbox{
		Id: i.ID, Worker: i.Worker, State: st, Image: i.Settings.Image, Template: i.Template,
		CreatedAt: timestamppb.New(i.CreatedAt), ExpiresAt: timestamppb.New(i.ExpiresAt), LastUsedAt: timestamppb.New(i.LastUsedAt),
		Labels: i.Labels, Network: nw, Runtime: i.Settings.Runtime, WorkingDir: i.Settings.WorkingDir, FailureReason: i.FailureReason, FilesRoot: i.Settings.FilesRoot,
		SnapshotId: i.Snapshot, Tenant: tenant.Norm(i.Tenant), Volumes: mountsToPB(i.Volumes),
		Resources: &plumbv1.Resources{Cpus: i.Settings.CPUs, MemoryBytes: i.Settings.MemoryBytes, Pids: i.Settings.Pids},
	}
}

// requestFields maps the template fields whose name differs in
// CreateSandboxRequest to the request's field paths, for field violations.
var requestFields = map[string]string{
	"cpus":         "resources.cpus",
	"memory_bytes": "resources.memory_bytes",
	"pids":         "resources.pids",
}

// CreateSandbox starts a sandbox.
func (s *Service) CreateSandbox(ctx context.Context, req *plumbv1.CreateSandboxRequest) (*plumbv1.CreateSandboxResponse, error) {
	spec, err := createSpec(ctx, req)
	if err != nil {
		return nil, s.fail("CreateSandbox", err)
	}
	info, err := s.m.Create(ctx, spec)
	if err != nil {
		return nil, s.fail("CreateSandbox", requestField(err, ""))
	}
	return &plumbv1.CreateSandboxResponse{Sandbox: sandboxToPB(info)}, nil
}

// requestField renames a CodeInvalid error's template field to the
// request's field path (under prefix, for a nested request).
func requestField(err error, prefix string) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.Field != "" {
		if f := requestFields[se.Field]; f != "" {
			se.Field = f
		}
		se.Field = prefix + se.Field
	}
	return err
}

// createSpec converts a create request (the tenant from ctx).
func createSpec(ctx context.Context, req *plumbv1.CreateSandboxRequest) (sandbox.CreateSpec, error) {
	t := sandbox.Template{
		Image: req.GetImage(), WorkingDir: req.GetWorkingDir(), Runtime: req.GetRuntime(), Env: req.GetEnv(),
		CPUs: req.GetResources().GetCpus(), MemoryBytes: req.GetResources().GetMemoryBytes(), Pids: req.GetResources().GetPids(),
		Network: networks[req.GetNetwork()], FilesRoot: req.GetFilesRoot(),
	}
	if req.GetTtl() != nil {
		t.TTL = req.GetTtl().AsDuration()
		if t.TTL <= 0 {
			return sandbox.CreateSpec{}, &sandbox.Error{Code: sandbox.CodeInvalid, Field: "ttl", Message: "ttl must be positive"}
		}
	}
	var inject []egress.InjectRule
	for _, es := range req.GetEgressSecrets() {
		inject = append(inject, egress.InjectRule{Name: es.GetName(), Hosts: es.GetHosts(), Header: es.GetHeader(), Value: es.GetValue(), Secret: es.GetSecret()})
	}
	if id := req.GetSnapshotId(); id != "" && !snapshot.ValidID(id) {
		return sandbox.CreateSpec{}, &sandbox.Error{Code: sandbox.CodeInvalid, Field: "snapshot_id", Message: fmt.Sprintf("snapshot_id %q is not a snapshot id (snap-<24 hex digits>)", id)}
	}
	var mounts []sandbox.VolumeMount
	for _, vm := range req.GetVolumes() {
		mounts = append(mounts, sandbox.VolumeMount{Name: vm.GetName(), MountPath: vm.GetMountPath(), ReadOnly: vm.GetReadOnly()})
	}
	return sandbox.CreateSpec{Template: req.GetTemplate(), Overrides: t, Labels: req.GetLabels(), Tenant: tenant.From(ctx), Inject: inject, Snapshot: req.GetSnapshotId(), Volumes: mounts}, nil
}

// GetSandbox returns a sandbox.
func (s *Service) GetSandbox(ctx context.Context, req *plumbv1.GetSandboxRequest) (*plumbv1.GetSandboxResponse, error) {
	info, err := s.m.Get(ctx, req.GetSandboxId())
	if err == nil && info.Tenant != tenant.From(ctx) {
		err = s.m.NotFound(req.GetSandboxId())
	}
	if err != nil {
		return nil, s.fail("GetSandbox", err)
	}
	return &plumbv1.GetSandboxResponse{Sandbox: sandboxToPB(info)}, nil
}

// ReasonAllTenantsForbidden: ListSandboxes with all_tenants from a caller
// that is not a trusted forwarder.
const ReasonAllTenantsForbidden = "ALL_TENANTS_FORBIDDEN"

// ListSandboxes lists the caller's tenant's sandboxes by label; with
// all_tenants, a trusted forwarder's call (agentd's operator view) lists
// every tenant's.
func (s *Service) ListSandboxes(ctx context.Context, req *plumbv1.ListSandboxesRequest) (*plumbv1.ListSandboxesResponse, error) {
	all := req.GetAllTenants()
	if all && tenant.OwnScope(ctx) {
		return nil, server.WithInfo(codes.PermissionDenied, "all_tenants: only a trusted forwarder may list every tenant's sandboxes", ReasonAllTenantsForbidden, nil)
	}
	out := &plumbv1.ListSandboxesResponse{}
	me := tenant.From(ctx)
	for _, info := range s.m.List(req.GetLabels()) {
		if !all && info.Tenant != me {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, sandboxToPB(info))
	}
	return out, nil
}

// DeleteSandbox removes a sandbox.
func (s *Service) DeleteSandbox(ctx context.Context, req *plumbv1.DeleteSandboxRequest) (*plumbv1.DeleteSandboxResponse, error) {
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("DeleteSandbox", err)
	}
	if err := s.m.Delete(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("DeleteSandbox", err)
	}
	return &plumbv1.DeleteSandboxResponse{}, nil
}

// KeepAlive extends a sandbox's lifetime.
func (s *Service) KeepAlive(ctx context.Context, req *plumbv1.KeepAliveRequest) (*plumbv1.KeepAliveResponse, error) {
	var ttl time.Duration
	if req.GetTtl() != nil {
		ttl = req.GetTtl().AsDuration()
	}
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("KeepAlive", err)
	}
	info, err := s.m.KeepAlive(ctx, req.GetSandboxId(), ttl)
	if err != nil {
		return nil, s.fail("KeepAlive", err)
	}
	return &plumbv1.KeepAliveResponse{Sandbox: sandboxToPB(info)}, nil
}

// DescribeWorker reports identity, load and the warm pools. A trusted
// forwarder (agentd placing sandboxes) sees the worker-wide load; a tenant
// calling with its own credential sees only its own sandboxes' counts and
// the pools' settings, not their use: other tenants' activity is not its
// to see.
func (s *Service) DescribeWorker(ctx context.Context, _ *plumbv1.DescribeWorkerRequest) (*plumbv1.DescribeWorkerResponse, error) {
	cfg := s.m.Config()
	own := tenant.OwnScope(ctx)
	n, mem := s.m.Usage()
	if own {
		n, mem = 0, 0
		me := tenant.From(ctx)
		for _, info := range s.m.List(nil) {
			if info.Tenant == me && info.State != sandbox.StateFailed {
				n++
				mem += info.Settings.MemoryBytes
			}
		}
	}
	out := &plumbv1.DescribeWorkerResponse{
		Name: cfg.Worker, Version: version.Version, Sandboxes: int32(n), MaxSandboxes: int32(cfg.MaxSandboxes),
		MemoryReservedBytes: mem, MaxMemoryBytes: cfg.MaxMemoryBytes, Runtimes: s.runtimes,
	}
	for name := range cfg.Templates {
		out.Templates = append(out.Templates, name)
	}
	for _, p := range s.m.Pools() {
		if own {
			out.Pools = append(out.Pools, &plumbv1.WarmPool{Template: p.Template, Size: int32(p.Size), IdleLifetime: durationpb.New(p.IdleLifetime)})
			continue
		}
		out.Pools = append(out.Pools, &plumbv1.WarmPool{
			Template: p.Template, Size: int32(p.Size), Ready: int32(p.Ready), Starting: int32(p.Starting),
			IdleLifetime: durationpb.New(p.IdleLifetime), Hits: int64(p.Hits), Misses: int64(p.Misses), MemoryReservedBytes: p.MemoryBytes,
		})
	}
	return out, nil
}

// orHome resolves an empty directory argument to the sandbox's home.
func orHome(f *sandbox.Files, p string) string {
	if p == "" {
		return f.Home()
	}
	return p
}

// Execute runs a command.
func (s *Service) Execute(ctx context.Context, req *plumbv1.ExecuteRequest) (*plumbv1.ExecuteResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Execute", err)
	}
	r, err := f.Execute(ctx, pbconv.CommandFromPB(req.GetCommand()))
	if err != nil {
		return nil, s.fail("Execute", err)
	}
	return &plumbv1.ExecuteResponse{Result: pbconv.ExecuteResultToPB(r)}, nil
}

// ExecuteStream runs a command and streams its output; a resumable one
// runs in s.execs, detached from the call, and a request with an
// execution_id re-attaches to it.
func (s *Service) ExecuteStream(req *plumbv1.ExecuteStreamRequest, stream plumbv1.SandboxService_ExecuteStreamServer) error {
	ctx := stream.Context()
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return s.fail("ExecuteStream", err)
	}
	if id := req.GetExecutionId(); id != "" {
		if req.GetCommand() != nil {
			return s.fail("ExecuteStream", invalidField("command", "a request with execution_id re-attaches to a running command: leave command unset"))
		}
		return s.attach(ctx, req.GetSandboxId(), id, req.GetAfterSequence(), stream)
	}
	if req.GetAfterSequence() != 0 {
		return s.fail("ExecuteStream", invalidField("after_sequence", "after_sequence needs the execution_id it counts in"))
	}
	if req.GetResumable() {
		id := s.execs.Start(ctx, tenant.From(ctx), req.GetSandboxId(), f, pbconv.CommandFromPB(req.GetCommand()))
		if err := stream.Send(&plumbv1.ExecuteStreamResponse{Event: &plumbv1.ExecuteStreamResponse_Started{Started: &plumbv1.ExecuteStarted{ExecutionId: id}}}); err != nil {
			return err
		}
		return s.attach(ctx, req.GetSandboxId(), id, 0, stream)
	}
	r, err := f.ExecuteStream(stream.Context(), pbconv.CommandFromPB(req.GetCommand()), func(b []byte) error {
		return stream.Send(&plumbv1.ExecuteStreamResponse{Event: &plumbv1.ExecuteStreamResponse_Output{
			Output: &plumbv1.OutputChunk{Stream: plumbv1.OutputStream_OUTPUT_STREAM_COMBINED, Data: b},
		}})
	})
	if err != nil {
		return s.fail("ExecuteStream", err)
	}
	return stream.Send(&plumbv1.ExecuteStreamResponse{Event: &plumbv1.ExecuteStreamResponse_Result{Result: pbconv.ExecuteResultToPB(r)}})
}

// invalidField is an INVALID_ARGUMENT naming the request's field.
func invalidField(field, msg string) error {
	return &sandbox.Error{Code: sandbox.CodeInvalid, Field: field, Message: msg}
}

// attach streams resumable execution id after sequence after.
func (s *Service) attach(ctx context.Context, sandboxID, id string, after uint64, stream plumbv1.SandboxService_ExecuteStreamServer) error {
	err := s.execs.Attach(ctx, tenant.From(ctx), sandboxID, id, after, func(ev sandbox.ExecEvent) error {
		m := &plumbv1.ExecuteStreamResponse{Sequence: ev.Sequence, LostMessages: ev.Lost}
		if ev.Result != nil {
			m.Event = &plumbv1.ExecuteStreamResponse_Result{Result: pbconv.ExecuteResultToPB(*ev.Result)}
		} else {
			m.Event = &plumbv1.ExecuteStreamResponse_Output{Output: &plumbv1.OutputChunk{Stream: plumbv1.OutputStream_OUTPUT_STREAM_COMBINED, Data: ev.Output}}
		}
		return stream.Send(m)
	})
	if err != nil {
		return s.fail("ExecuteStream", err)
	}
	return nil
}

// Ls lists a directory.
func (s *Service) Ls(ctx context.Context, req *plumbv1.LsRequest) (*plumbv1.LsResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Ls", err)
	}
	r, err := f.Ls(ctx, orHome(f, req.GetPath()))
	if err != nil {
		return nil, s.fail("Ls", err)
	}
	return pbconv.LsToPB(r), nil
}

// Read reads a file window.
func (s *Service) Read(ctx context.Context, req *plumbv1.ReadRequest) (*plumbv1.ReadResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Read", err)
	}
	limit := backend.DefaultReadLimit
	if req.Limit != nil {
		limit = int(req.GetLimit())
	}
	r, err := f.Read(ctx, backend.ReadRequest{Path: req.GetPath(), Offset: int(req.GetOffset()), Limit: limit})
	if err != nil {
		return nil, s.fail("Read", err)
	}
	out, err := pbconv.ReadToPB(r)
	if err != nil {
		return nil, s.fail("Read", err)
	}
	return out, nil
}

// Write writes a file.
func (s *Service) Write(ctx context.Context, req *plumbv1.WriteRequest) (*plumbv1.WriteResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Write", err)
	}
	r, err := f.Write(ctx, req.GetPath(), req.GetContent())
	if err != nil {
		return nil, s.fail("Write", err)
	}
	return &plumbv1.WriteResponse{Path: r.Path, BytesWritten: r.BytesWritten, Created: r.Created}, nil
}

// Edit edits a file.
func (s *Service) Edit(ctx context.Context, req *plumbv1.EditRequest) (*plumbv1.EditResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Edit", err)
	}
	r, err := f.Edit(ctx, backend.EditRequest{Path: req.GetPath(), Old: req.GetOldString(), New: req.GetNewString(), ReplaceAll: req.GetReplaceAll()})
	if err != nil {
		return nil, s.fail("Edit", err)
	}
	return &plumbv1.EditResponse{Path: r.Path, Occurrences: int64(r.Occurrences), LineEndingAdapted: r.LineEndingAdapted}, nil
}

// Delete removes a path.
func (s *Service) Delete(ctx context.Context, req *plumbv1.DeleteRequest) (*plumbv1.DeleteResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Delete", err)
	}
	r, err := f.Delete(ctx, req.GetPath())
	if err != nil {
		return nil, s.fail("Delete", err)
	}
	return &plumbv1.DeleteResponse{Path: r.Path, Removed: int64(r.Removed)}, nil
}

// Grep searches files.
func (s *Service) Grep(ctx context.Context, req *plumbv1.GrepRequest) (*plumbv1.GrepResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Grep", err)
	}
	r, err := f.Grep(ctx, backend.GrepRequest{Pattern: req.GetPattern(), Path: orHome(f, req.GetPath()), Glob: req.GetGlob(), Regex: req.GetRegex(), MaxCount: int(req.GetMaxCount())})
	if err != nil {
		return nil, s.fail("Grep", err)
	}
	return pbconv.GrepToPB(r), nil
}

// Glob finds files.
func (s *Service) Glob(ctx context.Context, req *plumbv1.GlobRequest) (*plumbv1.GlobResponse, error) {
	f, err := s.files(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("Glob", err)
	}
	r, err := f.Glob(ctx, backend.GlobRequest{Pattern: req.GetPattern(), Path: orHome(f, req.GetPath())})
	if err != nil {
		return nil, s.fail("Glob", err)
	}
	return pbconv.GlobToPB(r), nil
}

// UploadFiles writes streamed items in order. Each chunk's bytes are handed
// to the sandbox as received and released once written (see Codec).
func (s *Service) UploadFiles(stream plumbv1.SandboxService_UploadFilesServer) error {
	held := newHeldChunks()
	defer held.freeAll()
	recv := func() (*uploadChunk, error) {
		m := new(uploadChunk)
		if err := stream.RecvMsg(m); err != nil {
			return nil, err
		}
		return m, nil
	}
	first, err := recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "empty upload stream: the first message must carry sandbox_id")
		}
		return err
	}
	f, err := s.files(stream.Context(), first.GetSandboxId())
	if err != nil {
		first.free()
		return s.fail("UploadFiles", err)
	}
	out := &plumbv1.UploadFilesResponse{}
	pending := first
	for pending != nil {
		path := pending.GetPath()
		if path == "" {
			pending.free()
			return status.Error(codes.InvalidArgument, "an upload item's first chunk must set path")
		}
		// Feed the item's chunks to the sandbox as they arrive.
		cur := pending
		pending = nil
		var recvErr error
		next := func() ([]byte, error) {
			if cur == nil {
				return nil, nil
			}
			data, eof := held.hold(cur), cur.GetEof()
			if data == nil {
				data = []byte{}
			}
			if eof {
				cur = nil
				return data, nil
			}
			m, err := recv()
			if err != nil {
				cur, recvErr = nil, err
				return nil, err
			}
			if m.GetPath() != "" {
				m.free()
				cur, recvErr = nil, status.Errorf(codes.InvalidArgument, "item %s ended without eof before item %s started", backend.Quote(path), backend.Quote(m.GetPath()))
				return nil, recvErr
			}
			cur = m
			return data, nil
		}
		n, err := f.UploadFrom(stream.Context(), path, next, held.release)
		if recvErr != nil {
			if errors.Is(recvErr, io.EOF) {
				return status.Errorf(codes.InvalidArgument, "upload stream ended inside item %s (no eof)", backend.Quote(path))
			}
			return recvErr
		}
		res := &plumbv1.UploadResult{Path: path, BytesWritten: n}
		if err != nil {
			var be *backend.Error
			if !errors.As(err, &be) || be.Code == backend.CodeUnavailable || be.Code == backend.CodeCancelled {
				cur.free()
				return s.fail("UploadFiles", err)
			}
			res = &plumbv1.UploadResult{Path: path, Error: pbconv.FileErrorToPB(be)}
			// Skip the rest of a failed item.
			for cur != nil && !cur.GetEof() {
				cur.free()
				if cur, err = recv(); err != nil {
					return status.Errorf(codes.InvalidArgument, "upload stream ended inside item %s", backend.Quote(path))
				}
			}
			cur.free()
		}
		out.Results = append(out.Results, res)
		m, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		pending = m
	}
	return stream.SendAndClose(out)
}

// heldChunks are the upload chunks whose bytes the sandbox has been given
// and not yet released, by the address of their first byte.
type heldChunks struct {
	mu   sync.Mutex
	held map[*byte]*uploadChunk
}

func newHeldChunks() *heldChunks { return &heldChunks{held: map[*byte]*uploadChunk{}} }

// hold returns m's bytes, keeping m until they are released.
func (h *heldChunks) hold(m *uploadChunk) []byte {
	data := m.GetData()
	if len(data) == 0 {
		m.free()
		return data
	}
	h.mu.Lock()
	h.held[&data[0]] = m
	h.mu.Unlock()
	return data
}

// release frees the chunk whose bytes data are (sandbox.Files.UploadFrom
// calls it once it has written them).
func (h *heldChunks) release(data []byte) {
	if len(data) == 0 {
		return
	}
	h.mu.Lock()
	m := h.held[&data[0]]
	delete(h.held, &data[0])
	h.mu.Unlock()
	if m != nil {
		m.free()
	}
}

// freeAll frees what is still held, once the upload is over and nothing
// uses the bytes any more.
func (h *heldChunks) freeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, m := range h.held {
		m.free()
		delete(h.held, k)
	}
}

// DownloadFiles streams files in order.
func (s *Service) DownloadFiles(req *plumbv1.DownloadFilesRequest, stream plumbv1.SandboxService_DownloadFilesServer) error {
	f, err := s.files(stream.Context(), req.GetSandboxId())
	if err != nil {
		return s.fail("DownloadFiles", err)
	}
	for i, p := range req.GetPaths() {
		size, err := f.DownloadTo(stream.Context(), p, func(b []byte) error {
			return stream.Send(&plumbv1.DownloadFilesResponse{Index: int32(i), Path: p, Data: b})
		})
		if err != nil {
			var be *backend.Error
			if !errors.As(err, &be) || be.Code == backend.CodeUnavailable || be.Code == backend.CodeCancelled {
				return s.fail("DownloadFiles", err)
			}
			if err := stream.Send(&plumbv1.DownloadFilesResponse{Index: int32(i), Path: p, Error: pbconv.FileErrorToPB(be)}); err != nil {
				return err
			}
			continue
		}
		if err := stream.Send(&plumbv1.DownloadFilesResponse{Index: int32(i), Path: p, Size: size, Eof: true}); err != nil {
			return err
		}
	}
	return nil
}
