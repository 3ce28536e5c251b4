// Package fileops is the shared file engine of docs/file-tools.md §4: every
// file operation (ls, read, write, edit, delete, grep, glob, upload,
// download) on a real directory, confined by Go's os.Root.
//
// Two backends run exactly this code, so their semantics are identical: the
// Filesystem backend (a host directory) and the sandbox agent (the
// container's file system, root "/" by default). The pure text logic (line
// model, read slicing, edit replacement, grep and glob matching) comes from
// textops and the path rules from vpath; this package only adds the file
// system: resolution, walks, atomic writes and error mapping.
//
// Confinement. Every path is normalized by vpath.Normalize, resolved
// component by component inside the root (relative symlinks whose target
// stays inside are followed; absolute targets, escapes, loops and chains of
// more than 8 links are invalid_path naming the link), and then used only
// through os.Root methods, which refuse to leave the root even if the tree
// changes between resolution and use. On Linux, read, write and edit first
// try a direct path (direct_linux.go) for the plain case, every parent a
// real directory and the target missing or a regular file: the parent is
// opened one component at a time with O_PATH|O_NOFOLLOW from an O_PATH
// handle of the root, and the last component is used only through that
// handle (fstatat, faccessat, openat with O_NOFOLLOW, renameat), so no
// symlink is followed at all; anything else falls back to the os.Root path
// before changing anything. Walks (ls, grep, glob, delete) hold
// one directory handle per level and never follow a symlink they meet.
// Non-regular files (FIFOs, sockets, devices) are never opened for
// reading: they are rejected from a stat, and a file swapped in after the
// stat is opened non-blocking and rejected from fstat.
//
// Permissions (a decision where docs/file-tools.md §4.3 is silent). Writes are
// atomic renames, which POSIX allows whenever the directory is writable,
// whatever the mode of the file replaced. The engine does not let that
// bypass a read-only file: write, upload and edit of an existing file are
// permission_denied, and the file is left unchanged, when the file has no
// write permission bit at all (e.g. 0444, refused even for root, so a
// Filesystem backend run by root and the non-root sandbox agent agree), or
// when the kernel refuses to open it for writing (EACCES, EPERM, EROFS: a
// file of another user, a read-only mount). A replaced file keeps its
// permission bits; its owner becomes the engine's user. Delete follows
// POSIX unlink: the directory's permissions decide, not the file's. New
// files and directories get exactly 0644 and 0755. The State and Store
// backends have no modes, so none of this applies to them.
//
// Durability (a decision where docs/file-tools.md is silent). Every write is
// atomic (temp file in the target's directory, renamed over it); whether it
// is also durable is WithSync: fsync of the file and the directory by
// default (host directories), none inside a sandbox, whose files die with
// its container. Streaming uploads (CreateTemp, TempFile.WriteAt at any
// offset, Commit with the expected size) and downloads (OpenDownload,
// DownloadFile.ReadAt) move large files without holding them in memory.
//
// The package must not produce model-facing prose beyond the *backend.Error
// messages, must not shell out, and must not read a file into memory
// unless the operation needs all of it (media, edit, download); reads and
// grep stream, so their memory is O(window).
package fileops
