// Package testimage builds the small sandbox image that plumb's tests and
// local runs use on machines that reach no container registry: a FROM
// scratch root holding busybox (from Debian's busybox-static package), an
// /etc/passwd with the unprivileged sandbox user, and an empty /workspace
// owned by that user. It is imported into the engine with ImageImport, so
// nothing is pulled, and tagged by a hash of its contents so it is rebuilt
// only when busybox or the layout changes.
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Repository is the image name; the tag is a content hash.
const Repository = "plumb-sandbox-busybox"

// DefaultBusybox is where Debian's busybox-static installs the binary.
const DefaultBusybox = "/bin/busybox"

// SandboxUID and SandboxGID are the unprivileged user the image declares
// and that owns /workspace.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// layoutVersion changes whenever the image layout below changes.
const layoutVersion = "1"

// API is the part of the Docker client Ensure needs.
type API interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImageImport(ctx context.Context, src client.ImageImportSource, ref string, opts client.ImageImportOptions) (client.ImageImportResult, error)
}

// Ensure returns the reference of the busybox test image, importing it
// first when the engine does not have this exact build. busybox is the path
// of a static busybox binary (DefaultBusybox when empty).
func Ensure(ctx context.Context, api API, busybox string) (string, error) {
	if busybox == "" {
		busybox = DefaultBusybox
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return "", fmt.Errorf("test image needs a static busybox (apt-get install busybox-static): %w", err)
	}
	applets, err := listApplets(ctx, busybox)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte(layoutVersion+"\n"), bin...), strings.Join(applets, "\n")...))
	ref := Repository + ":" + hex.EncodeToString(sum[:6])

	if _, err := api.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !isNotFound(err) {
		return "", fmt.Errorf("inspect %s: %w", ref, err)
	}
	rootfs, err := buildRootfs(bin, applets)
	if err != nil {
		return "", err
	}
	res, err := api.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, ref,
		client.ImageImportOptions{
			Message: "plumb busybox sandbox test image",
			Changes: []string{
				fmt.Sprintf("USER %d:%d", SandboxUID, SandboxGID),
				"WORKDIR /workspace",
				"ENV PATH=/usr/local/bin:/usr/bin:/bin",
				`CMD ["/bin/sh"]`,
			},
		})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", ref, err)
	}
	defer res.Close()
	if _, err := io.Copy(io.Discard, res); err != nil {
		return "", fmt.Errorf("import %s: %w", ref, err)
	}
	if _, err := api.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("import %s: image missing after import: %w", ref, err)
	}
	return ref, nil
}

func isNotFound(err error) bool {
	return cerrdefs.IsNotFound(err)
}

// listApplets asks busybox which commands it provides.
func listApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	return applets, nil
}

// buildRootfs returns the image's root filesystem as a tar archive.
func buildRootfs(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	dir := func(name string, mode int64, uid, gid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid, ModTime: mtime})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	steps := []func() error{
		func() error { return dir("bin", 0o755, 0, 0) },
		func() error { return dir("etc", 0o755, 0, 0) },
		func() error { return dir("tmp", 0o1777, 0, 0) },
		func() error { return dir("proc", 0o555, 0, 0) },
		func() error { return dir("sys", 0o555, 0, 0) },
		func() error { return dir("dev", 0o755, 0, 0) },
		func() error { return dir("usr", 0o755, 0, 0) },
		func() error { return dir("usr/bin", 0o755, 0, 0) },
		func() error { return dir("workspace", 0o755, SandboxUID, SandboxGID) },
		func() error { return file("bin/busybox", 0o755, busybox) },
		func() error {
			return file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", SandboxUID, SandboxGID))
		},
		func() error {
			return file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", SandboxGID))
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
