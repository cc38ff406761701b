#!/usr/bin/env bash
# Regenerates everything generated from the API types: deepcopy functions,
# the clientset, listers, informers, knative injection and reconcilers
# (pkg/client), and the CRDs (config/crd). Works offline from the module cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE=github.com/buildsmith/buildsmith
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"
CONTROLLER_GEN="${CONTROLLER_GEN:-${ROOT}/bin/controller-gen}"
cd "${ROOT}"

# kube_codegen.sh `go install`s the generators: keep them out of $GOPATH/bin.
GOBIN="$(mktemp -d)"
export GOBIN
trap 'rm -rf "${GOBIN}"' EXIT

CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

echo "codegen: deepcopy"
kube::codegen::gen_helpers --boilerplate "${BOILERPLATE}" pkg/apis

echo "codegen: clientset, listers, informers"
kube::codegen::gen_client --boilerplate "${BOILERPLATE}" \
  --output-dir pkg/client --output-pkg "${MODULE}/pkg/client" --with-watch pkg/apis

echo "codegen: knative injection and reconcilers"
rm -rf pkg/client/injection
go tool injection-gen \
  --input-dirs "${MODULE}/pkg/apis/build/v1alpha1" \
  --versioned-clientset-package "${MODULE}/pkg/client/clientset/versioned" \
  --external-versions-informers-package "${MODULE}/pkg/client/informers/externalversions" \
  --listers-package "${MODULE}/pkg/client/listers" \
  --output-package "${MODULE}/pkg/client/injection" \
  --output-dir pkg/client/injection \
  --go-header-file "${BOILERPLATE}"

echo "codegen: CRDs"
[[ -x "${CONTROLLER_GEN}" ]] || "${ROOT}/hack/tools.sh" controller-gen
rm -rf config/crd
"${CONTROLLER_GEN}" crd paths=./pkg/apis/... output:crd:dir=config/crd
# One file per kind, named after the kind's plural.
for f in config/crd/buildsmith.dev_*.yaml; do
  mv "${f}" "config/crd/${f#config/crd/buildsmith.dev_}"
done
