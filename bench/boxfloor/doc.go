// Command boxfloor times, inside a sandbox, the system calls that B1's
// file operations cannot avoid, with nothing else around them: no channel,
// no framing, no path checks. The bench (B1's floor, bench/floor.go)
// uploads it into the box it measures and runs it through Execute, so the
// numbers are the box's own: its runtime (runc or gVisor), its workspace
// volume's file system, its CPU quota.
//
// Usage:
//
//	boxfloor DIR LOOPS
//
// It makes DIR (a 4 KiB file to read, one to edit, and a directory of 10
// .go and 10 .txt files), runs each operation LOOPS times after one
// warm-up, and prints one line per operation: its name and the median
// nanoseconds of one. The operations and their calls:
//
//   - read: fstatat (plumb refuses a special file without opening it),
//     openat, fstat, read of 4 KiB, close;
//   - write: fstatat of the target (plumb refuses a directory and keeps
//     an existing file's mode), openat of a new temp file, write of 4 KiB,
//     fchmod, close, renameat over the target (a plain atomic write);
//   - edit: read, then write without its fstatat (the read has it);
//   - ls: openat of the directory, getdents64 until empty, fstatat of
//     each of its 20 entries, close;
//   - glob: the same, with fstatat of the 10 .go matches only.
//
// Each is the least a file operation with plumb's results needs: ls and
// glob report each entry's kind, size, mode and time.
package main
