package grpccreds

import (
	"os"
	"time"
)

// FileStamp is the version of a file as its modification time and size
// show it: material is re-read when its stamp changes.
type FileStamp struct {
	mod  time.Time
	size int64
}

// StampOf returns the stamp of the file at path.
func StampOf(path string) (FileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileStamp{}, err
	}
	return FileStamp{fi.ModTime(), fi.Size()}, nil
}
