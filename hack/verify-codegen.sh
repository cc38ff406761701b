#!/usr/bin/env bash
# Fails when the generated code or CRDs differ from what hack/update-codegen.sh
# makes of the current API types. Runs the generators in a scratch copy of the
# repository, so the work tree is never touched.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GENERATED=(pkg/apis pkg/client config/crd charts/buildsmith/files/crds config/install docs/api.md)

"${ROOT}/hack/tools.sh" controller-gen helm

SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT
tar -C "${ROOT}" --exclude=./bin --exclude=./.git -cf - . | tar -C "${SCRATCH}" -xf -

CONTROLLER_GEN="${ROOT}/bin/controller-gen" HELM="${ROOT}/bin/helm" "${SCRATCH}/hack/update-codegen.sh" >/dev/null

status=0
for path in "${GENERATED[@]}"; do
  if ! diff -ruN "${ROOT}/${path}" "${SCRATCH}/${path}"; then
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "verify-codegen: generated files are stale; run hack/update-codegen.sh" >&2
  exit 1
fi
echo "verify-codegen: generated files are up to date"
