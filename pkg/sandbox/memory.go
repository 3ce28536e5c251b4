package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Memory checkpoints across hibernation (issue 19 item 4; the threat
// analysis is docs/security.md, "Memory checkpoints across hibernation").
// Under gVisor a hibernation also keeps the box's processes: the engine's
// checkpoint (`runsc checkpoint`) writes the paused box's memory image,
// which is stored as a snapshot of kind memory beside the workspace's, and
// the wake starts the new container from it (`runsc restore`). It needs an
// engine run with experimental features (Docker's checkpoint API), a
// gVisor runtime, the engine's data root on this host, and the agent as
// PID 1 serving the box's channel (ChannelStdio): gVisor's restore ends
// every process descended from an exec. Without any of them a hibernation
// is workspace-only and says so (SuspendResult.ProcessesKept).

// memoryCheckpoint is the name of a box's checkpoint in the engine: one
// per container, in the container's own directory.
const memoryCheckpoint = "plumb-hibernation"

// memImage is a hibernated box's memory image: its snapshot (of kind
// memory) and the sum of the manifest this worker wrote. A wake restores
// only a manifest with that sum, so an image rewritten in the store is
// never restored; the sum lives in this worker's memory only, so a
// restarted worker, another worker, a create or a fork never restore
// memory.
type memImage struct{ id, sum string }

// memoryDir returns the engine's directory of container ct's checkpoint,
// or "" when a box of runtime rt cannot keep its memory on this worker.
func (m *Manager) memoryDir(ctx context.Context, rt, ct string) string {
	if m.cfg.Channel != ChannelStdio || m.cfg.NoMemoryCheckpoints {
		return ""
	}
	res, err := m.api.Info(ctx, client.InfoOptions{})
	if err != nil || !res.Info.ExperimentalBuild {
		return ""
	}
	if rt == "" {
		rt = res.Info.DefaultRuntime
	}
	r, ok := res.Info.Runtimes[rt]
	if !ok || !strings.Contains(filepath.Base(r.Path), "runsc") {
		return ""
	}
	dir := filepath.Join(res.Info.DockerRootDir, "containers")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "" // the engine's data root is not on this host (or not ours to read)
	}
	return filepath.Join(dir, ct, "checkpoints", memoryCheckpoint)
}

// checkpointMemory saves the memory of sb's paused box, whose workspace
// is snapshot ws, into a memory image; it returns nil without an error
// when the box cannot keep its memory here. After the engine's checkpoint
// the container has exited, whatever else fails: the hibernation goes on
// workspace-only.
func (m *Manager) checkpointMemory(ctx context.Context, repo *snapshot.Repo, sb *sandbox, ws string) (*memImage, error) {
	sb.mu.Lock()
	info, ch := sb.info, sb.ch
	sb.mu.Unlock()
	if ch == nil || !ch.pid1 {
		// A channel that is an exec (after a reset or a worker restart):
		// the processes it started would not survive the restore.
		return nil, nil
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	dir := m.memoryDir(ectx, info.Settings.Runtime, info.ContainerID)
	if dir == "" {
		return nil, nil
	}
	// The container exits with its checkpoint: that end of its channel is
	// this hibernation's, not a lost agent's.
	ch.armed.Store(false)
	if _, err := m.api.CheckpointCreate(ectx, info.ContainerID, client.CheckpointCreateOptions{CheckpointID: memoryCheckpoint, Exit: true}); err != nil {
		return nil, fmt.Errorf("checkpoint the box's memory: %w", err)
	}
	// The container has exited: a caller that goes away now would only
	// cost the box its processes.
	ctx = context.WithoutCancel(ctx)
	man, err := pipe(func(w io.Writer) error { return tarDir(w, dir, "image") }, func(r io.Reader) (*snapshot.Manifest, error) {
		return repo.Capture(ctx, snapshot.Meta{Tenant: info.Tenant, Sandbox: info.ID, Template: info.Template, Parent: ws, Kind: snapshot.KindMemory}, r, "image", 0)
	})
	if err != nil {
		return nil, fmt.Errorf("store the box's memory image: %w", snapErr(err))
	}
	img := &memImage{id: man.ID}
	if img.sum, err = man.Sum(); err == nil {
		err = repo.Verify(ctx, info.Tenant, man.ID)
	}
	if err != nil {
		m.dropMemory(ctx, info.Tenant, img.id)
		return nil, fmt.Errorf("verify the box's memory image: %w", snapErr(err))
	}
	return img, nil
}

// placeMemory writes memory image img of tenant into the engine's
// checkpoint directory of container cid (created, not started), for its
// start from the checkpoint, and returns that directory ("" when nothing
// was written: the caller removes it after the start). Every chunk
// verifies before its bytes are written, and the manifest must be the one
// this worker wrote.
func (m *Manager) placeMemory(ctx context.Context, repo *snapshot.Repo, tenant string, t Template, img *memImage, cid string) (string, error) {
	dir := m.memoryDir(ctx, t.Runtime, cid)
	if dir == "" {
		return "", errors.New("this worker cannot restore a box's memory (engine, runtime or channel)")
	}
	man, err := repo.GetMemory(ctx, tenant, img.id)
	if err != nil {
		return "", snapErr(err)
	}
	if sum, err := man.Sum(); err != nil || sum != img.sum {
		return "", fmt.Errorf("memory image %s is not the one this worker stored", img.id)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return dir, err
	}
	return dir, extractSnapshot(ctx, repo, man, dir, 0, 0, false)
}

// pipe runs produce into consume through a pipe and returns consume's
// result, or the first error of either; produce has ended when it returns.
func pipe[T any](produce func(io.Writer) error, consume func(io.Reader) (T, error)) (T, error) {
	pr, pw := io.Pipe()
	produced := make(chan error, 1)
	go func() {
		err := produce(pw)
		pw.CloseWithError(err)
		produced <- err
	}()
	v, err := consume(pr)
	pr.CloseWithError(errors.New("the consumer ended"))
	if perr := <-produced; err == nil && perr != nil {
		err = perr
	}
	return v, err
}

// dropMemory deletes a memory image: it is restored at most once.
func (m *Manager) dropMemory(ctx context.Context, tenant, id string) {
	if id == "" || m.cfg.Snapshots == nil {
		return
	}
	if err := m.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, id); err != nil && snapshot.CodeOf(err) != snapshot.CodeNotFound {
		m.lg.Warn("remove a memory image", zap.String("snapshot", id), zap.Error(err))
	}
}

// tarDir writes the regular files and directories under dir to w as a
// tar whose names start with root (the shape of the engine's archive of a
// directory, which Repo.Capture reads).
func tarDir(w io.Writer, dir, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join(root, rel))
		st, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: st.ModTime()})
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: st.Size(), ModTime: st.ModTime()}); err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			return err
		default:
			return fmt.Errorf("checkpoint image: %s is neither a file nor a directory", rel)
		}
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
