package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// runCount prints, one line per directory in dirs, how many files,
// directories and links it holds (itself included), or -1 when it cannot
// be opened. The worker's disk watchdog runs it in a helper container over
// read-only mounts of workspaces (docs/security.md, "Workspace inodes"):
// each tree is walked through an os.Root, so no symlink leads out of it,
// and only directory entries are read, never a file.
func runCount(dirs []string, stdout io.Writer) int {
	for _, dir := range dirs {
		fmt.Fprintln(stdout, count(dir))
	}
	return 0
}

// count counts the entries under dir; an unreadable subtree counts as far
// as it could be read.
func count(dir string) int64 {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return -1
	}
	defer root.Close()
	var n int64
	_ = fs.WalkDir(root.FS(), ".", func(_ string, _ fs.DirEntry, err error) error {
		n++
		if err != nil {
			return fs.SkipDir
		}
		return nil
	})
	return n
}
