// Package version holds the build version of plumb's binaries, set at link
// time with -ldflags "-X github.com/plumbhq/plumb/internal/version.Version=v1.2.3".
package version

import (
	"fmt"
	"runtime"
)

// Version is the release version; "dev" for local builds.
var Version = "dev"

// String returns the one-line version banner of a binary.
func String(binary string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", binary, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
