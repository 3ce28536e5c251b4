#!/bin/sh
# Generates the plumb.v1 Python stubs into a temporary directory and runs
# run_agent.py with them; arguments go to run_agent.py. PYTHON picks the
# interpreter (default python3; it must see Debian's python3-grpcio).
set -eu
for tool in protoc grpc_python_plugin; do
	command -v "$tool" >/dev/null || {
		echo "run.sh: $tool is missing: sudo apt-get install python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev" >&2
		exit 1
	}
done
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../../proto
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
trap 'exit 130' INT TERM
protoc -I "$proto" --python_out="$stubs" --grpc_python_out="$stubs" \
	--plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
	"$proto/plumb/v1/agent.proto" "$proto/plumb/v1/sandbox.proto" # agent.proto imports sandbox.proto
PYTHONPATH=$stubs "${PYTHON:-python3}" "$here/run_agent.py" "$@"
