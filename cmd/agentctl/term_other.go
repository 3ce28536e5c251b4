//go:build !linux

package main

import "os"

// isTerminal reports whether f looks like a terminal: a character device
// other than /dev/null. (Linux asks the terminal driver instead.)
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
