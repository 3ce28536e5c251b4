package sandbox

import (
	"path"
	"strings"
	"testing"
)

func TestValidMountPath(t *testing.T) {
	for _, tt := range []struct {
		name, path, wd, want string // want: a fragment of the error, "" = valid
	}{
		{"plain", "/data", "/workspace", ""},
		{"nested", "/mnt/datasets/imagenet", "/workspace", ""},
		{"under home beside a workspace", "/home/cache", "/workspace", ""},
		{"odd but allowed characters", "/opt/a.b_c@d+e-f", "/workspace", ""},
		{"empty", "", "/workspace", "empty"},
		{"relative", "data", "/workspace", "not absolute"},
		{"root", "/", "/workspace", "whole box"},
		{"dot dot", "/data/../etc", "/workspace", "not clean"},
		{"trailing slash", "/data/", "/workspace", "not clean"},
		{"double slash", "//data", "/workspace", "not clean"},
		{"dot", "/data/.", "/workspace", "not clean"},
		{"space", "/my data", "/workspace", "only"},
		{"colon", "/data:rw", "/workspace", "only"},
		{"NUL", "/data\x00", "/workspace", "only"},
		{"too long", "/" + strings.Repeat("a", MaxMountPath), "/workspace", "over"},
		{"etc", "/etc", "/workspace", "system directory /etc"},
		{"under usr", "/usr/local/bin", "/workspace", "system directory /usr"},
		{"proc", "/proc/self", "/workspace", "system directory /proc"},
		{"dev", "/dev/shm", "/workspace", "system directory /dev"},
		{"tmp", "/tmp", "/workspace", "system directory /tmp"},
		{"agent", "/.plumb", "/workspace", "system directory /.plumb"},
		{"lib64", "/lib64", "/workspace", "system directory /lib64"},
		{"var", "/var/lib/x", "/workspace", "system directory /var"},
		{"the workspace", "/workspace", "/workspace", "working directory"},
		{"under the workspace", "/workspace/data", "/workspace", "working directory"},
		{"above a working dir", "/home/u", "/home/u/project", "working directory"},
		{"beside a working dir", "/home/v", "/home/u", ""},
		{"prefix but not under", "/workspace2", "/workspace", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidMountPath(tt.path, tt.wd)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ValidMountPath(%q, %q) = %v, want valid", tt.path, tt.wd, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ValidMountPath(%q, %q) = %v, want an error with %q", tt.path, tt.wd, err, tt.want)
			}
		})
	}
}

// FuzzValidMountPath: whatever it accepts is absolute, clean, bounded and
// neither touches a system directory nor the working directory.
func FuzzValidMountPath(f *testing.F) {
	for _, s := range []string{"/data", "/workspace/x", "/../etc", "/home/u", "/etc/../data", "//", "/.plumb/x", "/data\x00/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		const wd = "/workspace"
		if ValidMountPath(p, wd) != nil {
			return
		}
		if path.Clean(p) != p || !path.IsAbs(p) || p == "/" || len(p) > MaxMountPath || strings.ContainsAny(p, "\x00: \n") {
			t.Fatalf("accepted %q", p)
		}
		for _, d := range append(systemDirs, wd) {
			if p == d || strings.HasPrefix(p, d+"/") || strings.HasPrefix(d, p+"/") {
				t.Fatalf("accepted %q, which touches %s", p, d)
			}
		}
	})
}

func TestValidVolumeName(t *testing.T) {
	for name, want := range map[string]bool{
		"data": true, "a": true, "cache-1.x_y": true, "0abc": true, strings.Repeat("a", 63): true,
		"": false, "Data": false, "-a": false, ".a": false, "a/b": false, "a b": false,
		strings.Repeat("a", 64): false, "vol-x": false, "vol-w-abc": false, "volume": true,
	} {
		if got := ValidVolumeName(name); got != want {
			t.Errorf("ValidVolumeName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestCheckMounts(t *testing.T) {
	tmpl := Template{WorkingDir: "/workspace"}
	many := make([]VolumeMount, MaxVolumeMounts+1)
	for i := range many {
		many[i] = VolumeMount{Name: "v" + string(rune('a'+i)), MountPath: "/m" + string(rune('a'+i))}
	}
	for _, tt := range []struct {
		name   string
		mounts []VolumeMount
		field  string // "" = valid
	}{
		{"none", nil, ""},
		{"two", []VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/b", ReadOnly: true}}, ""},
		{"too many", many, "volumes"},
		{"no name", []VolumeMount{{MountPath: "/a"}}, "volumes[0].name"},
		{"bad path", []VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/etc"}}, "volumes[1].mount_path"},
		{"nested", []VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/a/b"}}, "volumes[1].mount_path"},
		{"same path", []VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/a"}}, "volumes[1].mount_path"},
		{"twice", []VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "a", MountPath: "/b"}}, "volumes[1].name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkMounts(tt.mounts, tmpl)
			var field string
			if err != nil {
				field = err.(*Error).Field
			}
			if field != tt.field || (tt.field != "" && CodeOf(err) != CodeInvalid) {
				t.Errorf("checkMounts = %v (field %q), want field %q", err, field, tt.field)
			}
		})
	}
}
