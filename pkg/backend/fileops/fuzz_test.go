package fileops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// FuzzResolve feeds random paths to resolution and to read, write, edit,
// ls and glob over a root full of traps (links inside, links out absolute and
// relative, loops, a file used as a directory). A path never resolves to a
// name that climbs out of the root, never panics, every failure is a
// *backend.Error, and nothing outside the root is created or changed.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"/a/f.txt", "in/f.txt", "/esc/secret", "/abs/secret", "/l1", "/l1/x", "/a/f.txt/x",
		"/in/../a", "/up/f.txt", "/deep/x", "/new/dir/file", "/", "/a\\..\\b", "/a/./b//c",
		"/chain", "/dang", "/dang/x", "/self/self/self/a",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	base := f.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "a"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "a/f.txt"), []byte("inside\n"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("OUTSIDE\n"), 0o644))
	for link, target := range map[string]string{
		"in": "a", "esc": "../outside", "abs": outside, "l1": "l2", "l2": "l1",
		"up": "a/../a", "deep": "a/../../outside", "chain": "in/../esc", "dang": "nowhere", "self": ".",
	} {
		must(os.Symlink(target, filepath.Join(root, link)))
	}
	e, err := New(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, raw string, followFinal bool) {
		ctx := context.Background()
		isBackendErr := func(what string, err error) {
			var be *backend.Error
			if err != nil && !errors.As(err, &be) {
				t.Fatalf("%s %q: error %v (%T) is not a *backend.Error", what, raw, err, err)
			}
		}
		if p, err := vpath.Normalize(raw); err == nil {
			name, err := e.resolve(p, followFinal)
			if err == nil {
				checkName(t, realRoot, root, name, followFinal)
			}
		}
		_, err := e.Read(ctx, backend.ReadRequest{Path: raw, Limit: 5})
		isBackendErr("read", err)
		_, err = e.Write(ctx, raw, []byte("fuzz\n"))
		isBackendErr("write", err)
		_, err = e.Edit(ctx, backend.EditRequest{Path: raw, Old: "fuzz\n", New: "edited\n"})
		isBackendErr("edit", err)
		_, err = e.Ls(ctx, raw)
		isBackendErr("ls", err)
		_, err = e.Glob(ctx, backend.GlobRequest{Pattern: "*", Path: raw})
		isBackendErr("glob", err)

		entries, err := os.ReadDir(outside)
		if err != nil || len(entries) != 1 {
			t.Fatalf("after %q the outside dir holds %d entries (%v)", raw, len(entries), err)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "OUTSIDE\n" {
			t.Fatalf("after %q the outside file holds %q", raw, b)
		}
	})
}

// checkName verifies a resolved name: clean and relative, and its deepest
// existing prefix really lies inside the root (without the final
// component when it was not followed: that one may be any symlink).
func checkName(t *testing.T, realRoot, root, name string, followFinal bool) {
	t.Helper()
	if name == "." {
		return
	}
	comps := strings.Split(name, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			t.Fatalf("resolved name %q has component %q", name, c)
		}
	}
	n := len(comps)
	if !followFinal {
		n--
	}
	for i := n; i > 0; i-- {
		host := filepath.Join(root, filepath.Join(comps[:i]...))
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			continue
		}
		if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
			t.Fatalf("resolved name %q is %s, outside the root %s", name, real, realRoot)
		}
		return
	}
}
