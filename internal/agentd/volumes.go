package agentd

import (
	"fmt"
	"path"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// VolumeMountConfig is one `sandbox.template.volumes` entry: a named
// volume of the thread's tenant mounted into its box. The volume must
// exist on the worker the box is placed on (create it with agentctl
// sandbox volumes create); in a fleet, name it by its id (vol-<worker>-…)
// so the box is placed on that worker (docs/workspaces.md, "In a fleet").
type VolumeMountConfig struct {
	// Name is the volume's name or id.
	Name string `yaml:"name"`
	// MountPath is where it appears in the box; sandboxd checks the rest
	// of the rules (not over the workspace or system directories).
	MountPath string `yaml:"mount_path"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `yaml:"read_only"`
}

// maxVolumeMounts is sandboxd's limit of mounts per box.
const maxVolumeMounts = 8

// validateVolumes checks sandbox.template.volumes as far as agentd can
// without a worker: each names a volume and an absolute, clean path, once.
func validateVolumes(t SandboxTemplate) error {
	if len(t.Volumes) > maxVolumeMounts {
		return fmt.Errorf("sandbox.template.volumes: %d mounts, over the %d a box may have", len(t.Volumes), maxVolumeMounts)
	}
	seen := map[string]bool{}
	for i, v := range t.Volumes {
		at := fmt.Sprintf("sandbox.template.volumes[%d]", i)
		switch {
		case v.Name == "":
			return fmt.Errorf("%s.name: name a volume", at)
		case seen[v.Name]:
			return fmt.Errorf("%s.name: volume %q is mounted twice", at, v.Name)
		case !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) != v.MountPath || v.MountPath == "/":
			return fmt.Errorf("%s.mount_path: %q must be a clean absolute path other than /", at, v.MountPath)
		}
		seen[v.Name] = true
	}
	return nil
}

// volumeMounts are the mounts of a thread's CreateSandboxRequest.
func (t SandboxTemplate) volumeMounts() []*plumbv1.VolumeMount {
	var out []*plumbv1.VolumeMount
	for _, v := range t.Volumes {
		out = append(out, &plumbv1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	return out
}
