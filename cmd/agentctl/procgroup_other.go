//go:build !unix

package main

import "os/exec"

// ownProcessGroup is a no-op where process groups do not exist: the
// command alone is killed on cancellation.
func ownProcessGroup(*exec.Cmd) {}
