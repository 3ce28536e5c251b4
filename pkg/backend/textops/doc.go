// Package textops holds the pure text logic of the file tools (docs/file-tools.md
// §4): the line model, binary and media sniffing, read slicing, the
// read gutter format, edit replacement, the grep line matcher and the glob
// matcher.
//
// The os.Root engine (fileops) and the State and Store backends all call
// these functions, so every backend numbers lines, slices reads, replaces
// text and matches patterns identically. The package must stay pure: no
// file system, no paths resolution, no goroutines. Functions that scan
// content take an io.Reader and use memory proportional to their output
// window, never to the input, and handle lines of any length.
//
// Errors are *backend.Error values without a Path: the caller knows the
// path and sets Error.Path.
package textops
