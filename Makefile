# buildsmith: the two commands a fresh machine needs are `make demo` and
# `make test`; each builds what it needs into bin/ first (cached).

SHELL := /usr/bin/env bash
GO    ?= go
GO_FILES = $(shell find . -name '*.go' -not -path './bin/*' -not -path './.git/*')

.PHONY: all
all: build

.PHONY: tools
tools: ## build etcd, kube-apiserver, kubectl, controller-gen, the CNB lifecycle (and its linux/arm64 build), the registry, helm, ko, cosign, promtool and krew into bin/ (cached)
	hack/tools.sh

.PHONY: build
build:
	$(GO) build ./...
	$(GO) build -o bin/kubectl-buildsmith ./cmd/kubectl-buildsmith

# The controller image, built with ko (no Docker) for linux/amd64 and
# linux/arm64 and pushed; the last line printed is the image by digest.
# IMAGE_REPO=REGISTRY/PATH (required), VERSION (default dev), BASE_IMAGE
# (default: a base hack/baseimage builds and pushes beside it), INSECURE=1
# for a plain-HTTP registry.
.PHONY: image
image: ## build and push the controller image: make image IMAGE_REPO=registry/path [INSECURE=1]
	hack/image.sh

.PHONY: release
release: ## the image; the chart pinned to it, pushed to oci://IMAGE_REPO-charts (CHART_REPO=…, none: not pushed); both signed with COSIGN_KEY; install.yaml; the kubectl plugin (linux, darwin × amd64, arm64), signed checksums and a krew manifest in dist/: make release VERSION=vX.Y.Z IMAGE_REPO=… COSIGN_KEY=…
	hack/release.sh

.PHONY: codegen
codegen: ## regenerate pkg/client, deepcopy and config/crd from the API types
	hack/update-codegen.sh

.PHONY: verify-codegen
verify-codegen:
	hack/verify-codegen.sh

.PHONY: verify-tracked-sizes
verify-tracked-sizes:
	hack/verify-tracked-sizes.sh

.PHONY: vet
vet:
	$(GO) vet ./...

.PHONY: fmt-check
fmt-check:
	@out="$$(gofmt -l $(GO_FILES))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Packages with goroutines of their own run under the race detector; the
# generated client and the envtest suites do not need it and build faster
# without.
RACE_PKGS = ./pkg/registry/... ./pkg/reconciler/... ./pkg/turns/... ./pkg/replicas/...

.PHONY: test
test: tools verify-codegen verify-tracked-sizes vet fmt-check ## everything CI runs
	$(GO) test -count=1 -race $(RACE_PKGS)
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v -e /pkg/registry -e /pkg/reconciler -e /pkg/turns -e /pkg/replicas)

# What the demo runs: the control plane, kubectl, the registry and the
# lifecycle (both platforms); not controller-gen, helm, ko, cosign, promtool or krew,
# which only the tests need (about 11 of a cold build's 20 minutes, see docs/development.md).
DEMO_TOOLS = etcd kube-apiserver kubectl lifecycle lifecycle-linux-arm64 registry

.PHONY: demo-tools
demo-tools:
	hack/tools.sh $(DEMO_TOOLS)

# The scenarios of test/bench (scale, steady state, outage, rate limit, big
# layers) against the controller binary, a real API server and a counted
# registry; they write bench/results.md. Without BENCH=1 (as in `make test`)
# only small smoke versions of the scale and push-requests scenarios run. Knobs: BENCH_N
# (default 50,200; add 1000), BENCH_RUNS, BENCH_OUTAGE, BENCH_OUTAGE_RUNS.
.PHONY: bench
bench: tools ## Go benchmarks, then the scenarios of test/bench; writes bench/results.md
	@mkdir -p bench
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchmem ./pkg/... | tee bench/.micro.txt
	BENCH=1 BENCH_MICRO=$(CURDIR)/bench/.micro.txt $(GO) test -count=1 -timeout 120m -run . ./test/bench
	@rm -f bench/.micro.txt
	@cat bench/results.md

.PHONY: demo
demo: demo-tools ## everything on this machine: control plane, registry, lifecycle, controller, samples
	$(GO) run ./hack/demo

.PHONY: dev
dev: demo-tools ## like demo, but keeps running and prints a KUBECONFIG
	$(GO) run ./hack/demo --keep

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
