package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// runCount prints, one line per argument DIR[:MAX], how many files,
// directories and links DIR holds (itself included), stopping once the
// count passes MAX; -1 when DIR cannot be opened. The worker's disk
// watchdog runs it in a helper container over read-only mounts of
// workspaces (docs/security.md, "Workspace inodes"): each tree is walked
// through an os.Root, so no symlink leads out of it, and only directory
// entries are read, never a file. MAX bounds the walk's time whatever
// box code created.
func runCount(args []string, stdout, stderr io.Writer) int {
	for _, arg := range args {
		dir, limit := arg, int64(-1)
		if d, m, ok := strings.Cut(arg, ":"); ok {
			n, err := strconv.ParseInt(m, 10, 64)
			if err != nil || n < 0 {
				fmt.Fprintf(stderr, "sandbox-agent: count: bad limit in %q\n", arg)
				return 2
			}
			dir, limit = d, n
		}
		fmt.Fprintln(stdout, count(dir, limit))
	}
	return 0
}

// errEnough stops a walk that has counted past its limit.
var errEnough = errors.New("count past the limit")

// count counts the entries under dir, up to one past limit (no bound when
// limit is negative); an unreadable subtree counts as far as it could be
// read.
func count(dir string, limit int64) int64 {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return -1
	}
	defer root.Close()
	var n int64
	_ = fs.WalkDir(root.FS(), ".", func(_ string, _ fs.DirEntry, err error) error {
		n++
		switch {
		case limit >= 0 && n > limit:
			return errEnough
		case err != nil:
			return fs.SkipDir
		}
		return nil
	})
	return n
}
