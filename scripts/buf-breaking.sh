#!/usr/bin/env bash
# Checks the protos for breaking changes against the previous commit, when
# that commit has protos (the first commit that adds them has nothing to
# break).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse -q --verify HEAD~1 >/dev/null; then
	echo "buf breaking: no previous commit, skipped"
	exit 0
fi
if [ -z "$(git ls-tree -r --name-only HEAD~1 -- proto | grep '\.proto$' || true)" ]; then
	echo "buf breaking: previous commit has no protos, skipped"
	exit 0
fi
buf breaking --against '.git#ref=HEAD~1'
