package state

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// FuzzTree drives a State backend with random writes and deletes and
// checks it against a model of the docs/file-tools.md §4 tree rules: a write succeeds iff
// nothing lies under the path and no parent is a file; a delete removes
// the path and everything under it; no key ever lies under another; and
// ls agrees with the keys.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 1, 2, 0, 3, 1, 0})
	f.Add([]byte{0, 2, 1, 1, 0, 0, 0, 4, 0, 5, 1, 4})
	paths := []string{"/a", "/a/b", "/a/b/c", "/a-b", "/b", "/b/a", "/a/c", "/a0"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		b := New()
		model := map[string]bool{}
		under := func(p string) bool {
			for k := range model {
				if strings.HasPrefix(k, p+"/") {
					return true
				}
			}
			return false
		}
		fileParent := func(p string) bool {
			for d := p; d != "/"; {
				d = d[:strings.LastIndexByte(d, '/')]
				if d == "" {
					break
				}
				if model[d] {
					return true
				}
			}
			return false
		}
		for i := 0; i+1 < len(ops); i += 2 {
			p := paths[int(ops[i+1])%len(paths)]
			if ops[i]%2 == 0 {
				_, err := b.Write(ctx, p, []byte(p))
				var want backend.Code
				switch {
				case under(p):
					want = backend.CodeIsDirectory
				case fileParent(p):
					want = backend.CodeNotADirectory
				default:
					model[p] = true
				}
				if got := backend.CodeOf(err); got != want {
					t.Fatalf("write %s: %v, want %q", p, err, want)
				}
			} else {
				r, err := b.Delete(ctx, p)
				n := 0
				for k := range model {
					if k == p || strings.HasPrefix(k, p+"/") {
						delete(model, k)
						n++
					}
				}
				if n == 0 && err == nil || n > 0 && (err != nil || r.Removed != n) {
					t.Fatalf("delete %s: %+v %v, want %d removed", p, r, err, n)
				}
			}
			keys := slices.Sorted(maps.Keys(b.Files()))
			if want := slices.Sorted(maps.Keys(model)); !slices.Equal(keys, want) {
				t.Fatalf("keys %q, model %q", keys, want)
			}
			var wantLs []string
			for _, k := range keys {
				if i := strings.IndexByte(k[1:], '/'); i >= 0 {
					k = k[:i+1] + "/"
				}
				if len(wantLs) == 0 || wantLs[len(wantLs)-1] != k {
					wantLs = append(wantLs, k)
				}
			}
			slices.Sort(wantLs)
			res, err := b.Ls(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range res.Entries {
				got = append(got, e.Path)
			}
			if !slices.Equal(got, wantLs) {
				t.Fatalf("ls / = %q, want %q", got, wantLs)
			}
		}
	})
}
