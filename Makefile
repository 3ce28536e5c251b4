# plumb — deep agents as a service. `make help` lists the targets.

GO ?= go
BIN := bin
TOOLS := $(CURDIR)/.cache/bin
export PATH := $(TOOLS):$(PATH)

# Pinned tool versions, installed with `go install` from the Go module proxy.
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION := v0.8.2
GRPCURL_VERSION := v1.9.4
# The HTTP/JSON gateway and its OpenAPI document (protoc-gen-grpc-gateway,
# protoc-gen-openapiv2); the same version as the runtime in go.mod.
GRPC_GATEWAY_VERSION := v2.30.0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/plumbhq/plumb/internal/version.Version=$(VERSION)
GOTEST_FLAGS ?=
# A hang guard for each test binary, far above what a loaded 2-core machine needs.
TEST_TIMEOUT ?= 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(TOOLS)/buf:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS)/protoc-gen-grpc-gateway:
	GOBIN=$(TOOLS) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(TOOLS)/protoc-gen-openapiv2:
	GOBIN=$(TOOLS) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLS)/grpcurl:
	GOBIN=$(TOOLS) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: tools
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-grpc-gateway $(TOOLS)/protoc-gen-openapiv2 $(TOOLS)/staticcheck $(TOOLS)/grpcurl ## Install the pinned dev tools into .cache/bin

.PHONY: build
build: ## Build the static binaries bin/agentd, bin/sandboxd, bin/agentctl, bin/sandbox-agent and bin/plumb-egress
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentd ./cmd/agentd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandboxd ./cmd/sandboxd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentctl ./cmd/agentctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandbox-agent ./cmd/sandbox-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/plumb-egress ./cmd/plumb-egress

.PHONY: generate
generate: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-grpc-gateway $(TOOLS)/protoc-gen-openapiv2 ## Regenerate gen/ (Go, the HTTP gateway, OpenAPI) from proto/
	buf generate

.PHONY: verify-generated
verify-generated: generate ## Fail if gen/go differs from what the protos generate
	@git diff --exit-code --stat -- gen/ || (echo "gen/ is stale: run make generate and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- gen/)" || (git status --porcelain -- gen/; echo "gen/ has untracked or stale files: run make generate and commit" >&2; exit 1)

.PHONY: buf-lint
buf-lint: $(TOOLS)/buf ## buf lint (STANDARD) and buf breaking against the previous commit
	buf lint
	@scripts/buf-breaking.sh

.PHONY: verify-mod
verify-mod: ## Fail if go.mod/go.sum miss what the build and tests need, or require a module nothing uses
	@scripts/verify-mod.sh

.PHONY: lint
lint: $(TOOLS)/staticcheck ## go vet, staticcheck and gofmt
	$(GO) vet ./...
	staticcheck ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || (gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); echo "gofmt needed" >&2; exit 1)

.PHONY: test
test: test-deps verify-generated buf-lint verify-mod lint ## Everything CI runs: generated-code drift, buf, lint, and all tests with -race
	@# Everything the tests create carries this run's id; what is left at
	@# the end is removed and fails the run, even when a test failed.
	@run=$$(date +%s%N); status=0; \
	PLUMB_TEST_RUN=$$run $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(GOTEST_FLAGS) ./... || status=$$?; \
	PLUMB_TEST_RUN=$$run $(GO) run ./internal/tools/leftovers || status=1; \
	exit $$status

.PHONY: test-deps
test-deps: ## Install what the tests need from Debian (busybox-static, postgresql, kubernetes-client, the Python example's grpcio and protoc), or name them and stop
	@scripts/test-deps.sh

# A real kube-apiserver (built once, cached) that strictly validates the
# rendered overlays server-side. The script lives beside the checkout.
KUBE_APISERVER_SH ?= ../shared/tools/kube-apiserver.sh

.PHONY: k8s-check
k8s-check: ## Apply every deploy/k8s overlay to a real kube-apiserver with strict server-side validation (KUBE_APISERVER_SH)
	@test -f "$(KUBE_APISERVER_SH)" || { echo "k8s-check: $(KUBE_APISERVER_SH) not found (set KUBE_APISERVER_SH to the kube-apiserver.sh from shared/tools)" >&2; exit 1; }
	@command -v kubectl >/dev/null || { echo "k8s-check: installing Debian's kubernetes-client (kubectl kustomize)" >&2; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null; }
	@run=$$(mktemp -d /tmp/plumb-k8s-check.XXXXXX); export KUBE_RUN=$$run; rc=0; bash "$(KUBE_APISERVER_SH)" check deploy/k8s/overlays/* || rc=$$?; bash "$(KUBE_APISERVER_SH)" stop; rm -rf "$$run"; exit $$rc  # no server, etcd data or log left behind

.PHONY: test-short
test-short: test-deps ## Only the Go tests, with -race
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(GOTEST_FLAGS) ./...

.PHONY: fuzz
fuzz: ## Run every fuzz target briefly (FUZZTIME=10s each)
	@scripts/fuzz.sh $(or $(FUZZTIME),10s)

.PHONY: bench
bench: ## Run the benchmark harness against the local Docker Engine (about 6 min with runsc, < 5 min with -runtimes runc; BENCH_FLAGS=-quick or -only B1,B2; see docs/benchmarks.md)
	$(GO) run ./bench $(BENCH_FLAGS)

.PHONY: bench-micro
bench-micro: ## Run the Go micro-benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: k8s-e2e
k8s-e2e: ## Run overlays/example (host-docker) and overlays/dind on a real single-node Kubernetes v1.31 built from the Go module proxy (scripts/k8s; K8S_OVERLAYS picks; root, Docker; first run builds for tens of CPU-minutes, cached under ~/.cache/plumb)
	scripts/k8s/e2e.sh

.PHONY: sandbox-image
sandbox-image: ## Build the Python sandbox image (Debian bookworm via debootstrap + docker import, no registry; tagged by its recipe's hash, built once) and print its name
	@scripts/sandbox-image.sh

.PHONY: sandbox-image-busybox
sandbox-image-busybox: ## Import the small offline busybox sandbox image the tests use and print its name
	@$(GO) run ./internal/tools/sandboximage

.PHONY: images
images: build ## Build the agentd and sandboxd container images (FROM scratch)
	docker build -f deploy/images/Dockerfile.agentd -t plumb-agentd:$(VERSION) .
	docker build -f deploy/images/Dockerfile.sandboxd -t plumb-sandboxd:$(VERSION) .

.PHONY: dind-image
dind-image: ## Build the Docker-in-Docker image of deploy/k8s/overlays/dind from Debian packages (root; cached by recipe under ~/.cache/plumb; prints its reference)
	@scripts/dind-image.sh

.PHONY: run
run: build ## Start sandboxd and agentd locally with the Python sandbox image (built the first time; SANDBOX_IMAGE=busybox for the small one; Ctrl-C stops both)
	@scripts/run.sh

.PHONY: clean
clean: ## Remove build output
	rm -rf $(BIN)
