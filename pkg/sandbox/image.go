package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// DerivedRepository names the images the worker derives from base images.
const DerivedRepository = "plumb-sandbox-derived"

// LabelDerivedFrom marks a derived image with its base image reference.
const LabelDerivedFrom = "plumb.derived-from"

// Labels of a derived image: the base image's ID when derived and the
// sha256 of the agent binary it carries. The collector removes derived
// images whose agent is not the worker's or whose base reference has
// moved to another image (see Manager.Collect).
const (
	LabelDerivedBaseID = "plumb.derived-base-id"
	LabelDerivedAgent  = "plumb.derived-agent"
)

// images derives, once per (base image, agent binary, user, working dir),
// an image that holds the sandbox agent under /.plumb and a working dir
// owned by the sandbox user. Baking the agent in (instead of copying it into
// each container) is needed because the engine refuses CopyToContainer into
// a read-only root filesystem; it also makes every later create cheaper.
// The working dir's ownership reaches each sandbox's fresh volume through
// the engine's copy-up of image content into empty volumes.
type images struct {
	api      DockerAPI
	agent    []byte
	agentSum string

	mu       sync.Mutex
	inflight map[string]*sync.Mutex
}

func newImages(api DockerAPI, agent []byte) *images {
	sum := sha256.Sum256(agent)
	return &images{api: api, agent: agent, agentSum: hex.EncodeToString(sum[:]), inflight: map[string]*sync.Mutex{}}
}

// derive returns the ID of the derived image for base, building it if
// needed. Callers create containers from that ID, not the tag: the image
// is pinned by digest once resolved, so a tag moved in between cannot
// change what a sandbox runs.
func (im *images) derive(ctx context.Context, base, user, workingDir string) (string, error) {
	info, err := im.api.ImageInspect(ctx, base)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", errorf(CodeImageNotFound, "image %q is not present on this worker (sandboxd never pulls; load or build it first)", base)
		}
		return "", fmt.Errorf("inspect image %s: %w", base, err)
	}
	if vols := imageVolumes(info); len(vols) > 0 {
		// A VOLUME would become an anonymous engine volume: writable,
		// unbounded and outside the sandbox's workspace accounting.
		return "", errorf(CodeInvalid, "image %q declares VOLUME %s; sandboxd refuses images with volumes (a volume would be an unbounded writable disk): rebuild the image without VOLUME", base, strings.Join(vols, ", "))
	}
	h := sha256.Sum256([]byte(strings.Join([]string{info.ID, im.agentSum, user, workingDir}, "\n")))
	ref := DerivedRepository + ":" + hex.EncodeToString(h[:8])

	im.mu.Lock()
	l, ok := im.inflight[ref]
	if !ok {
		l = &sync.Mutex{}
		im.inflight[ref] = l
	}
	im.mu.Unlock()
	l.Lock()
	defer l.Unlock()

	if di, err := im.api.ImageInspect(ctx, ref); err == nil {
		return di.ID, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect image %s: %w", ref, err)
	}

	layer, err := im.layer(user, workingDir)
	if err != nil {
		return "", err
	}
	// The build container is never started: it only receives the files and
	// is committed.
	c, err := im.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: base, Entrypoint: []string{AgentPath}, Cmd: []string{"init"}, Labels: map[string]string{LabelDerivedFrom: base}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return "", fmt.Errorf("derive image from %s: create: %w", base, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = im.api.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}()
	if _, err := im.api.CopyToContainer(ctx, c.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(layer)}); err != nil {
		return "", fmt.Errorf("derive image from %s: copy agent: %w", base, err)
	}
	res, err := im.api.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "plumb sandbox image derived from " + base,
		Changes: []string{"LABEL " + LabelDerivedFrom + "=" + strconv.Quote(base) +
			" " + LabelDerivedBaseID + "=" + strconv.Quote(info.ID) +
			" " + LabelDerivedAgent + "=" + strconv.Quote(im.agentSum)},
	})
	if err != nil {
		return "", fmt.Errorf("derive image from %s: commit: %w", base, err)
	}
	return res.ID, nil
}

// imageVolumes lists the VOLUME paths an image declares, sorted.
func imageVolumes(info client.ImageInspectResult) []string {
	if info.Config == nil {
		return nil
	}
	vols := make([]string, 0, len(info.Config.Volumes))
	for v := range info.Config.Volumes {
		vols = append(vols, v)
	}
	sort.Strings(vols)
	return vols
}

// layer is the tar copied over the base image's root.
func (im *images) layer(user, workingDir string) ([]byte, error) {
	uid, gid, err := parseUser(user)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	hdrs := []*tar.Header{{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(AgentDir, "/") + "/", Mode: 0o755, ModTime: now}}
	// Parents of the working dir are created root-owned; the dir itself
	// belongs to the sandbox user.
	parts := strings.Split(strings.Trim(workingDir, "/"), "/")
	for i := range parts {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, ModTime: now}
		if i == len(parts)-1 {
			h.Uid, h.Gid = uid, gid
		}
		hdrs = append(hdrs, h)
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(AgentPath, "/"), Mode: 0o555, Size: int64(len(im.agent)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(im.agent); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseUser accepts a numeric "uid:gid" that is not root.
func parseUser(user string) (int, int, error) {
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 || uid > 1<<31-1 || gid > 1<<31-1 {
		return 0, 0, errorf(CodeInvalid, "sandbox user %q: want a numeric uid:gid such as 1000:1000", user)
	}
	if uid == 0 || gid == 0 {
		// Root's uid or gid would give box code the agent's identity (or
		// group access to root-owned files): the agent could no longer be
		// kept out of its reach.
		return 0, 0, errorf(CodeInvalid, "sandbox user %q: uid and gid must not be 0 (root); use an unprivileged uid:gid such as 1000:1000", user)
	}
	return uid, gid, nil
}

// collect removes derived images that are superseded: built for another
// agent binary, or from a base reference that now names another image.
// Images a container still uses are kept (the engine refuses to remove
// them), and so are images younger than grace, which a create may be
// about to use. It returns the references it removed.
func (im *images) collect(ctx context.Context, now time.Time, grace time.Duration) ([]string, error) {
	list, err := im.api.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("label", LabelDerivedFrom)})
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, img := range list.Items {
		if now.Sub(time.Unix(img.Created, 0)) < grace || !im.superseded(ctx, img.Labels) {
			continue
		}
		_, err := im.api.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{})
		switch {
		case err == nil:
			removed = append(removed, img.RepoTags...)
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			// Gone already, or a container uses it.
		default:
			return removed, fmt.Errorf("remove derived image %s: %w", img.ID, err)
		}
	}
	return removed, nil
}

// superseded reports whether a derived image with these labels is no
// longer what derive would build.
func (im *images) superseded(ctx context.Context, labels map[string]string) bool {
	if labels[LabelDerivedAgent] != im.agentSum {
		return true
	}
	base, err := im.api.ImageInspect(ctx, labels[LabelDerivedFrom])
	switch {
	case cerrdefs.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return base.ID != labels[LabelDerivedBaseID]
}
