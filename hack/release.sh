#!/usr/bin/env bash
# Builds a release into dist/ (or DIST): the controller image (hack/image.sh, pushed),
# the chart packaged as VERSION with that image pinned by digest, and the
# kubectl manifests rendered from it.
#
#   VERSION=v0.1.0 IMAGE_REPO=ghcr.io/buildsmith/buildsmith hack/release.sh
#
# dist/buildsmith-X.Y.Z.tgz  the chart (version X.Y.Z, appVersion vX.Y.Z)
# dist/install/              config/crd + the chart rendered for kubectl apply
# dist/image.txt             the image by digest
# INSECURE and BASE_IMAGE are passed to hack/image.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
: "${IMAGE_REPO:?IMAGE_REPO=REGISTRY/PATH names where the image goes}"
: "${VERSION:?VERSION=vX.Y.Z names the release}"
if [[ ! "${VERSION}" =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]]; then
  echo "release: VERSION must be vMAJOR.MINOR.PATCH[-PRERELEASE], not ${VERSION}" >&2
  exit 2
fi
chart_version="${BASH_REMATCH[1]}"
DIST="$(mkdir -p "${DIST:-dist}" && cd "${DIST:-dist}" && pwd)"

"${ROOT}/hack/tools.sh" helm
helm() {
  HELM_CACHE_HOME="${DIST}/.helm" HELM_CONFIG_HOME="${DIST}/.helm" HELM_DATA_HOME="${DIST}/.helm" \
    "${ROOT}/bin/helm" "$@"
}

# Only what a release writes: DIST may be a directory with other files.
rm -rf "${DIST}/install" "${DIST}/.chart" "${DIST}/.helm" "${DIST}/image.txt" "${DIST}"/buildsmith-*.tgz
mkdir -p "${DIST}/install" "${DIST}/.chart"
image="$(VERSION="${VERSION}" "${ROOT}/hack/image.sh" | tail -n 1)"
digest="${image##*@}"
if [[ ! "${digest}" =~ ^sha256:[a-f0-9]{64}$ ]]; then
  echo "release: hack/image.sh printed ${image}, not an image by digest" >&2
  exit 1
fi
printf '%s\n' "${image}" >"${DIST}/image.txt"

# The chart, with the image of this release as its default.
cp -r charts/buildsmith "${DIST}/.chart/"
values="${DIST}/.chart/buildsmith/values.yaml"
sed -i -E \
  -e "s|^  repository: .*$|  repository: ${IMAGE_REPO}|" \
  -e "s|^  tag: .*$|  tag: \"${VERSION}\"|" \
  -e "s|^  digest: .*$|  digest: \"${digest}\"|" "${values}"
helm package "${DIST}/.chart/buildsmith" --version "${chart_version}" --app-version "${VERSION}" -d "${DIST}" >/dev/null
chart="${DIST}/buildsmith-${chart_version}.tgz"

# What the packaged chart installs must be this image: the sed above edits
# values.yaml by line, so check its result rather than trust it.
rendered="$(helm template buildsmith "${chart}" --namespace buildsmith)"
want="${IMAGE_REPO}:${VERSION}@${digest}"
if ! grep -qF "image: \"${want}\"" <<<"${rendered}"; then
  echo "release: the packaged chart does not install ${want}" >&2
  exit 1
fi

cp config/crd/*.yaml "${DIST}/install/"
{
  echo "# buildsmith ${VERSION}, rendered from its chart."
  echo "# Install: kubectl apply -f dist/install/ (the CRDs and this file)"
  echo "apiVersion: v1"
  echo "kind: Namespace"
  echo "metadata:"
  echo "  name: buildsmith"
  printf '%s\n' "${rendered}"
} >"${DIST}/install/buildsmith.yaml"
rm -rf "${DIST}/.chart" "${DIST}/.helm"

echo "release ${VERSION}:" >&2
(cd "${DIST}" && find . -type f | sort) >&2
printf '%s\n' "${image}"
