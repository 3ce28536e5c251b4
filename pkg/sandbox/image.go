package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
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

// Ownership on a shared engine: several workers (of different versions,
// during a rolling update, or node-local workers sharing a host's engine)
// may use one Docker Engine. The images a worker makes for itself are
// tagged <repository>:<content key>-<worker>, one tag per worker even when
// two workers share the content (the second one tags the first one's
// image), and a worker's collector only ever removes its own tags. The
// engine deletes an image with its last tag, so an image another worker
// still uses keeps that worker's tag and stays. Tags without a worker
// suffix (made before this scheme) are left alone: an operator removes
// them (docs/sandboxd.md).

// ownTag is the tag of content key made or adopted by worker owner.
func ownTag(repo, key, owner string) string { return repo + ":" + key + "-" + owner }

// ownedKey returns the content key of ref when ref is repo's tag of
// worker owner (see ownTag).
func ownedKey(ref, repo, owner string) (string, bool) {
	tag, ok := strings.CutPrefix(ref, repo+":")
	if !ok {
		return "", false
	}
	key, who, ok := strings.Cut(tag, "-")
	return key, ok && who == owner && key != ""
}

// tagShared tags with ref an image of repo whose content key is key,
// made (and tagged) by another worker, so that this worker shares it
// instead of building it again. It returns the image ID, or "" when no
// such image exists.
func tagShared(ctx context.Context, api DockerAPI, repo, key, ref string) (string, error) {
	list, err := api.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", repo+":"+key+"*")})
	if err != nil {
		return "", fmt.Errorf("list images %s:%s: %w", repo, key, err)
	}
	for _, img := range list.Items {
		for _, t := range img.RepoTags {
			if t != repo+":"+key && !strings.HasPrefix(t, repo+":"+key+"-") {
				continue
			}
			if _, err := api.ImageTag(ctx, client.ImageTagOptions{Source: img.ID, Target: ref}); err != nil {
				if cerrdefs.IsNotFound(err) {
					break // removed meanwhile: try the next one
				}
				return "", fmt.Errorf("tag image %s as %s: %w", img.ID, ref, err)
			}
			return img.ID, nil
		}
	}
	return "", nil
}

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
	owner    string // the worker: its tags are the only ones it collects

	mu       sync.Mutex
	inflight map[string]*sync.Mutex
	// ids is each derived reference's image ID, as this worker last found
	// or built it: a reference names content (the base's ID, the agent's
	// digest), so a create need not inspect it again. An image removed
	// behind the worker's back is forgotten when a create finds it gone
	// (forget); collect forgets what it removes.
	ids map[string]string
}

func newImages(api DockerAPI, agent []byte, owner string) *images {
	sum := sha256.Sum256(agent)
	return &images{api: api, agent: agent, agentSum: hex.EncodeToString(sum[:]), owner: owner, inflight: map[string]*sync.Mutex{}, ids: map[string]string{}}
}

// derive returns the ID of the derived image for base, building it if
// needed, and base's environment (the derived image has the same).
// Callers create containers from that ID, not the tag: the image is
// pinned by digest once resolved, so a tag moved in between cannot change
// what a sandbox runs.
func (im *images) derive(ctx context.Context, base, user, workingDir string) (id string, env []string, err error) {
	info, err := im.api.ImageInspect(ctx, base)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", nil, errorf(CodeImageNotFound, "image %q is not present on this worker (sandboxd never pulls; load or build it first)", base)
		}
		return "", nil, fmt.Errorf("inspect image %s: %w", base, err)
	}
	if info.Config != nil {
		env = info.Config.Env
	}
	id, err = im.deriveFrom(ctx, base, info, user, workingDir)
	return id, env, err
}

// deriveFrom is derive once base is inspected (info).
func (im *images) deriveFrom(ctx context.Context, base string, info client.ImageInspectResult, user, workingDir string) (id string, err error) {
	if vols := imageVolumes(info); len(vols) > 0 {
		// A VOLUME would become an anonymous engine volume: writable,
		// unbounded and outside the sandbox's workspace accounting.
		return "", errorf(CodeInvalid, "image %q declares VOLUME %s; sandboxd refuses images with volumes (a volume would be an unbounded writable disk): rebuild the image without VOLUME", base, strings.Join(vols, ", "))
	}
	h := sha256.Sum256([]byte(strings.Join([]string{info.ID, im.agentSum, user, workingDir}, "\n")))
	key := hex.EncodeToString(h[:8])
	ref := ownTag(DerivedRepository, key, im.owner)

	im.mu.Lock()
	if known, ok := im.ids[ref]; ok {
		im.mu.Unlock()
		return known, nil
	}
	l, ok := im.inflight[ref]
	if !ok {
		l = &sync.Mutex{}
		im.inflight[ref] = l
	}
	im.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	defer func() {
		if err == nil {
			im.mu.Lock()
			im.ids[ref] = id
			im.mu.Unlock()
		}
	}()

	if di, err := im.api.ImageInspect(ctx, ref); err == nil {
		return di.ID, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect image %s: %w", ref, err)
	}
	if id, err := tagShared(ctx, im.api, DerivedRepository, key, ref); err != nil || id != "" {
		return id, err
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

// forget drops every reference known to name the image id, and reports
// whether there was one: a create that found id gone derives again.
func (im *images) forget(id string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	n := len(im.ids)
	maps.DeleteFunc(im.ids, func(_, v string) bool { return v == id })
	return len(im.ids) < n
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

// collect removes this worker's tags of derived images that are
// superseded: built for another agent binary, or from a base reference
// that now names another image. Other workers' tags are never touched
// (the image stays while any tag does); images a container still uses
// are kept (the engine refuses to remove them), and so are images
// younger than grace, which a create may be about to use. It returns the
// references it removed.
func (im *images) collect(ctx context.Context, now time.Time, grace time.Duration) ([]string, error) {
	list, err := im.api.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("label", LabelDerivedFrom)})
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, img := range list.Items {
		var mine []string
		for _, t := range img.RepoTags {
			if _, ok := ownedKey(t, DerivedRepository, im.owner); ok {
				mine = append(mine, t)
			}
		}
		if len(mine) == 0 || now.Sub(time.Unix(img.Created, 0)) < grace || !im.superseded(ctx, img.Labels) {
			continue
		}
		for _, t := range mine {
			_, err := im.api.ImageRemove(ctx, t, client.ImageRemoveOptions{})
			switch {
			case err == nil:
				removed = append(removed, t)
				im.mu.Lock()
				delete(im.ids, t)
				im.mu.Unlock()
			case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
				// Gone already, or a container uses it.
			default:
				return removed, fmt.Errorf("remove derived image %s: %w", t, err)
			}
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
