#!/usr/bin/env bash
# Checks that go.mod and go.sum are complete and minimal for what this module
# builds and tests, using only the modules that build downloads anyway. Unlike
# `go mod tidy -diff`, the verdict does not depend on whether the module proxy
# happens to serve test-only dependencies of our dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

# Complete: every package our code and tests compile resolves from go.mod, with
# its checksum in go.sum (-mod=readonly refuses to add either).
used=$(go list -mod=readonly -deps -test -f '{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}' ./... | sort -u)

# Minimal: every direct requirement provides a package we use.
direct=$(go mod edit -json | go run ./internal/tools/modreqs)
status=0
for m in $direct; do
	if ! grep -qxF "$m" <<<"$used"; then
		echo "go.mod requires $m directly but no package of this module uses it: run go mod tidy" >&2
		status=1
	fi
done
exit $status
