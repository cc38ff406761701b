#!/usr/bin/env bash
# Builds the programs that tests, codegen and the demo run, into bin/, from the
# Go module proxy. Nothing else is needed on the machine but Go.
#
#   hack/tools.sh                 build every tool
#   hack/tools.sh etcd kubectl    build only these
#
# Builds are slow (kube-apiserver takes minutes on 2 cores), so every binary is
# cached outside the clone, keyed by everything that determines it (the pinned
# version or hack/tools/go.{mod,sum}, the build flags and the Go version). A fresh
# clone on a machine that built a tool before copies it; a second run in the
# same clone does nothing. Override the cache with BUILDSMITH_TOOLS_CACHE.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/bin"
CACHE="${BUILDSMITH_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/buildsmith/tools}"
GO_VERSION="$(go env GOVERSION)"

KUBE_VERSION=v1.35.4
CONTROLLER_TOOLS_VERSION=v0.23.0
LIFECYCLE_VERSION=v0.21.0

ALL_TOOLS=(etcd kube-apiserver kubectl controller-gen lifecycle lifecycle-linux-arm64 registry helm ko cosign promtool krew)

log() { printf 'tools: %s\n' "$*" >&2; }

hash_of() { sha256sum | cut -c1-16; }

# tools_module_key identifies a build from the hack/tools module.
tools_module_key() {
  cat "${ROOT}/hack/tools/go.mod" "${ROOT}/hack/tools/go.sum" "${ROOT}/hack/tools/etcd/main.go" |
    { cat; printf '%s %s' "${GO_VERSION}" "$(kube_ldflags)"; } | hash_of
}

# kube_ldflags stamps the version into the Kubernetes binaries, as the
# Kubernetes release build does; without it kube-apiserver reports v0.0.0, which
# clients that check the server version (knative's sharedmain) reject.
kube_ldflags() {
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "${flags}"
}

# install_tool NAME KEY BUILD_FUNCTION: copies bin/NAME from the cache entry
# KEY, building that entry first with BUILD_FUNCTION OUTDIR when it is missing.
install_tool() {
  local name="$1" key="$2" build="$3"
  local stamp="${BIN}/.${name}.key" entry="${CACHE}/${name}/${key}"
  if [[ -x "${BIN}/${name}" && -f "${stamp}" && "$(cat "${stamp}")" == "${key}" ]]; then
    return 0
  fi
  if [[ ! -x "${entry}/${name}" ]]; then
    log "building ${name} (cached afterwards in ${entry})"
    local tmp
    mkdir -p "${CACHE}/${name}"
    tmp="$(mktemp -d "${CACHE}/${name}/.build.XXXXXX")"
    local start=${SECONDS}
    if ! "${build}" "${tmp}"; then
      rm -rf "${tmp}"
      log "building ${name} failed"
      return 1
    fi
    # rename is atomic: a concurrent run sees either no entry or a whole one.
    if ! mv -T "${tmp}" "${entry}" 2>/dev/null; then rm -rf "${tmp}"; fi
    log "built ${name} in $((SECONDS - start))s"
  fi
  mkdir -p "${BIN}"
  cp -f "${entry}/${name}" "${BIN}/${name}.tmp" && mv -f "${BIN}/${name}.tmp" "${BIN}/${name}"
  printf '%s' "${key}" >"${stamp}"
}

build_etcd() {
  (cd "${ROOT}/hack/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/etcd" ./etcd)
}

build_kube_apiserver() {
  (cd "${ROOT}/hack/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" \
    -o "$1/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
}

build_kubectl() {
  (cd "${ROOT}/hack/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" \
    -o "$1/kubectl" k8s.io/kubernetes/cmd/kubectl)
}

# controller-gen brings k8s.io v0.37: build it from its own module, not ours.
build_controller_gen() {
  GOBIN="$1" go install -trimpath \
    "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}"
}

# Tools pinned by a module of their own under hack/tools/NAME (a tools.go
# importing the command): their dependencies stay apart from ours and from
# each other. `go install …@version` is not used: it asks the proxy for the
# module's version list, which the proxy here refuses for some modules.
module_tool_key() {
  cat "${ROOT}/hack/tools/$1/go.mod" "${ROOT}/hack/tools/$1/go.sum" |
    { cat; printf '%s %s' "$2" "${GO_VERSION}"; } | hash_of
}

# The CNB lifecycle, one multi-call binary (detector, builder… are argv[0]
# names), static so that it runs inside any builder image.
LIFECYCLE_LDFLAGS="-s -w -X github.com/buildpacks/lifecycle/cmd.Version=${LIFECYCLE_VERSION#v}"
build_lifecycle() {
  (cd "${ROOT}/hack/tools/lifecycle" && CGO_ENABLED=0 go build -trimpath -ldflags "${LIFECYCLE_LDFLAGS}" \
    -o "$1/lifecycle" github.com/buildpacks/lifecycle/cmd/lifecycle)
}

# The same lifecycle cross-compiled for linux/arm64 (bin/lifecycle-linux-arm64),
# for multi-platform lifecycle images; bin/lifecycle stays the host's.
build_lifecycle_linux_arm64() {
  (cd "${ROOT}/hack/tools/lifecycle" && CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -trimpath \
    -ldflags "${LIFECYCLE_LDFLAGS}" -o "$1/lifecycle-linux-arm64" github.com/buildpacks/lifecycle/cmd/lifecycle)
}

# The reference registry (distribution), for the demo and the e2e tests.
build_registry() {
  (cd "${ROOT}/hack/tools/registry" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$1/registry" github.com/distribution/distribution/v3/cmd/registry)
}

# Helm v4, to lint and install the chart. (v3.22 is refused by the proxy.)
build_helm() {
  (cd "${ROOT}/hack/tools/helm" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$1/helm" helm.sh/helm/v4/cmd/helm)
}

# ko, which builds and pushes the controller image without Docker (make image).
build_ko() {
  (cd "${ROOT}/hack/tools/ko" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/ko" github.com/google/ko)
}

# cosign, which the e2e tests run to verify the builders' signatures.
build_cosign() {
  (cd "${ROOT}/hack/tools/cosign" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$1/cosign" github.com/sigstore/cosign/v3/cmd/cosign)
}

# promtool, which the tests run to check and unit-test the chart's alerting
# rules (test/monitoring).
build_promtool() {
  (cd "${ROOT}/hack/tools/promtool" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$1/promtool" github.com/prometheus/prometheus/cmd/promtool)
}

# krew, the kubectl plugin manager: the e2e test installs the release's plugin
# with it from the release's krew manifest, as a user would.
build_krew() {
  (cd "${ROOT}/hack/tools/krew" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/krew" sigs.k8s.io/krew/cmd/krew)
}

main() {
  local tools=("$@")
  [[ ${#tools[@]} -gt 0 ]] || tools=("${ALL_TOOLS[@]}")
  local tool
  for tool in "${tools[@]}"; do
    case "${tool}" in
      etcd) install_tool etcd "$(tools_module_key)" build_etcd ;;
      kube-apiserver) install_tool kube-apiserver "$(tools_module_key)" build_kube_apiserver ;;
      kubectl) install_tool kubectl "$(tools_module_key)" build_kubectl ;;
      controller-gen)
        install_tool controller-gen "$(printf '%s %s' "${CONTROLLER_TOOLS_VERSION}" "${GO_VERSION}" | hash_of)" \
          build_controller_gen ;;
      lifecycle) install_tool lifecycle "$(module_tool_key lifecycle "${LIFECYCLE_LDFLAGS}")" build_lifecycle ;;
      lifecycle-linux-arm64)
        install_tool lifecycle-linux-arm64 "$(module_tool_key lifecycle "${LIFECYCLE_LDFLAGS} linux/arm64")" \
          build_lifecycle_linux_arm64 ;;
      registry) install_tool registry "$(module_tool_key registry "")" build_registry ;;
      helm) install_tool helm "$(module_tool_key helm "")" build_helm ;;
      ko) install_tool ko "$(module_tool_key ko "")" build_ko ;;
      cosign) install_tool cosign "$(module_tool_key cosign "")" build_cosign ;;
      promtool) install_tool promtool "$(module_tool_key promtool "")" build_promtool ;;
      krew) install_tool krew "$(module_tool_key krew "")" build_krew ;;
      *) log "unknown tool ${tool} (known: ${ALL_TOOLS[*]})"; return 2 ;;
    esac
  done
}

main "$@"
