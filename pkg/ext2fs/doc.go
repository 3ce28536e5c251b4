// Package ext2fs formats a minimal ext2 file system into a sparse image
// file: 4 KiB blocks, 128-byte inodes, a chosen inode count, no journal
// and no lost+found, an empty root directory. sandboxd uses it for a
// box's workspace, which the host kernel then loop-mounts, so that the
// kernel bounds the workspace's bytes and files (docs/security.md,
// "Workspace disk limit"). It is plumb's own because the image the
// formatting runs in (a box's) may have no mke2fs. Only metadata blocks
// are written: the rest of the image stays a hole.
package ext2fs
