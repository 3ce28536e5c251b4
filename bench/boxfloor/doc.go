// Command boxfloor is the floor of B1's and B2's calls (bench/floor.go):
// the least a server in a sandbox can do to answer one request over the
// engine's stdio channel. The bench runs it as PID 1 of a box of the same
// image, runtime and hardening as the sandbox it measures, with that
// sandbox's workspace volume mounted, so its numbers are the box's own:
// its runtime (runc or gVisor), its workspace volume's file system, its
// CPU quota. Nothing else is around the calls: no framing, no path
// checks, no goroutine but its own.
//
// Usage:
//
//	boxfloor DIR
//
// It makes DIR (in DIR/f a 4 KiB file to read and one to edit, and in
// DIR/src 10 .go and 10 .txt files), then reads requests on stdin: each
// is a 64-byte line naming an operation, padded with spaces. It makes the
// operation's system calls once and writes the same line to stdout (a line
// starting "ERR " when they failed). The operations and their calls:
//
//   - echo: none;
//   - read: openat of DIR/f (O_PATH, no symlink followed: a request's
//     path is resolved anew each time), fstatat (plumb refuses a special
//     file without opening it), openat, fstat, read of 4 KiB, close, close
//     of the directory;
//   - write: the directory's openat, fstatat of the target (plumb refuses
//     a directory and keeps an existing file's mode), openat of a new temp
//     file, write of 4 KiB, fchmod, close, renameat over the target (a
//     plain atomic write), the directory's close;
//   - edit: the directory's openat, the read's calls, then the write's
//     without its fstatat (the read has it), the directory's close;
//   - ls: openat of DIR/src, getdents64 until empty, fstatat of each of
//     its 20 entries, close;
//   - glob: the same, with fstatat of the 10 .go matches only.
//
// Every call is raw and the program runs on one processor without
// preemption signals, as a server written in C would: the floor charges
// nothing of Go's scheduler.
//
// Each is the least a file operation with plumb's results needs: ls and
// glob report each entry's kind, size, mode and time.
package main
