package fileops_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// TestSwapRace swaps a directory for a symlink that escapes the root, as
// fast as it can, while reads, writes, edits, greps, globs and lists go
// through it. Whatever interleaving happens, nothing outside the root may
// be read, created or changed: the engine resolves paths itself, but every
// use goes through os.Root, which re-checks at the time of use.
func TestSwapRace(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	secret := "OUTSIDE needle " + strings.Repeat("s", 100) + "\n" // a size no inside file reaches
	put(t, outside, map[string]string{"/x.txt": secret})
	put(t, root, map[string]string{"/d/x.txt": "inside needle\n"})
	e, err := fileops.New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	d, parked := filepath.Join(root, "d"), filepath.Join(root, "parked")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		targets := []string{outside, "../outside"}
		for i := 0; ctx.Err() == nil; i++ {
			if os.Rename(d, parked) != nil {
				continue
			}
			os.Symlink(targets[i%2], d)
			time.Sleep(time.Duration(i%3) * time.Microsecond)
			os.Remove(d)
			os.Rename(parked, d)
		}
	})
	leak := func(what, s string) {
		if strings.Contains(s, "OUTSIDE") {
			t.Errorf("%s read outside the root: %q", what, s)
		}
	}
	for w := range 4 {
		wg.Go(func() {
			bg := context.Background()
			for i := 0; ctx.Err() == nil; i++ {
				switch (w + i) % 6 {
				case 0:
					r, _ := e.Read(bg, backend.ReadRequest{Path: "/d/x.txt", Limit: 10})
					leak("read", r.Content)
				case 1:
					e.Write(bg, fmt.Sprintf("/d/w%d-%d.txt", w, i%5), []byte("written\n"))
				case 2:
					e.Edit(bg, backend.EditRequest{Path: "/d/x.txt", Old: "needle", New: "needle" + "!"})
					e.Edit(bg, backend.EditRequest{Path: "/d/x.txt", Old: "needle!", New: "needle"})
				case 3:
					g, _ := e.Grep(bg, backend.GrepRequest{Pattern: "needle", Path: "/"})
					for _, m := range g.Matches {
						leak("grep", m.Text)
					}
				case 4:
					g, _ := e.Glob(bg, backend.GlobRequest{Pattern: "**", Path: "/d"})
					for _, fi := range g.Matches {
						if fi.Size == int64(len(secret)) {
							t.Errorf("glob listed a file of the outside size: %+v", fi)
						}
					}
				case 5:
					dl, _ := e.Download(bg, []string{"/d/x.txt"})
					leak("download", string(dl[0].Content))
				}
			}
		})
	}
	wg.Wait()
	entries, err := os.ReadDir(outside)
	if err != nil || len(entries) != 1 {
		t.Fatalf("outside dir now holds %d entries (%v)", len(entries), err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "x.txt")); string(b) != secret {
		t.Errorf("outside file changed: %q", b)
	}
}
