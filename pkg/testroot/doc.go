// Package testroot is the guard of tests that need root: such a test fails
// under CI=true (CI runs the tests as root, so a missing privilege there is
// a broken setup, never a reason to pass) and is skipped elsewhere.
package testroot
