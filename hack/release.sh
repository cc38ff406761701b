#!/usr/bin/env bash
# Builds a release into dist/ (or DIST): the controller image (hack/image.sh, pushed),
# the chart packaged as VERSION with that image pinned by digest (pushed as an OCI
# artifact), both signed with cosign, the kubectl manifest rendered from the chart, and
# the kubectl plugin for linux and darwin, amd64 and arm64, with its krew manifest.
#
#   VERSION=v0.1.0 IMAGE_REPO=ghcr.io/buildsmith/buildsmith COSIGN_KEY=cosign.key hack/release.sh
#
# dist/buildsmith-X.Y.Z.tgz  the chart (version X.Y.Z, appVersion vX.Y.Z)
# dist/install.yaml          the chart rendered for kubectl apply: the namespace, the CRDs,
#                            the controller
# dist/image.txt             the image by digest
# dist/chart.txt             the pushed chart by digest: oci://CHART_REPO/buildsmith:X.Y.Z@sha256:…
#                            (not written with CHART_REPO=none)
# dist/kubectl-buildsmith_OS_ARCH.tar.gz
#                            the plugin and the LICENSE
# dist/checksums.txt         sha256sum of the plugin archives, the chart and install.yaml
# dist/checksums.txt.sigstore.json
#                            its cosign signature (a Sigstore bundle: cosign verify-blob)
# dist/cosign.pub            the public key that verifies the signatures
# dist/plugins/buildsmith.yaml
#                            the krew manifest: plugins/buildsmith.yaml filled in
#
# CHART_REPO    where the chart goes (default IMAGE_REPO-charts; the chart is then
#               oci://IMAGE_REPO-charts/buildsmith:X.Y.Z); none skips the push
# DOWNLOAD_URL  where the release's files are served, for the krew manifest's URIs
#               (default https://github.com/buildsmith/buildsmith/releases/download/VERSION)
# COSIGN_KEY    the key that signs the image (its index and each platform's image), the
#               pushed chart and checksums.txt: a cosign key file (COSIGN_PASSWORD its
#               password), env://VAR, or a KMS URI; none releases them unsigned
# SIGNING_CONFIG a Sigstore signing config for cosign (default: the public-good one from
#               cosign's TUF root, so that Rekor records each signature); one naming no
#               transparency log signs offline
# INSECURE and BASE_IMAGE are passed to hack/image.sh; INSECURE=1 also pushes
# the chart, and signatures, over plain HTTP. Credentials come from the Docker config,
# for helm and cosign too (helm's own config here is an empty one under DIST/.helm;
# Helm 4 falls back to the Docker config's credentials). The image and the chart are
# named by digest (image.txt, chart.txt), and the chart is pulled back by its digest
# and compared with dist's. The last line on stdout is the image by digest; the helm
# install line goes to stderr after it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
: "${IMAGE_REPO:?IMAGE_REPO=REGISTRY/PATH names where the image goes}"
: "${VERSION:?VERSION=vX.Y.Z names the release}"
: "${COSIGN_KEY:?COSIGN_KEY names the cosign key that signs the image and the chart (a file, env://VAR or a KMS URI); COSIGN_KEY=none releases them unsigned}"
if [[ ! "${VERSION}" =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]]; then
  echo "release: VERSION must be vMAJOR.MINOR.PATCH[-PRERELEASE], not ${VERSION}" >&2
  exit 2
fi
chart_version="${BASH_REMATCH[1]}"
CHART_REPO="${CHART_REPO:-${IMAGE_REPO}-charts}"
CHART_REPO="${CHART_REPO#oci://}"
DOWNLOAD_URL="${DOWNLOAD_URL:-https://github.com/buildsmith/buildsmith/releases/download/${VERSION}}"
DOWNLOAD_URL="${DOWNLOAD_URL%/}"
PLATFORMS=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
DIST="$(mkdir -p "${DIST:-dist}" && cd "${DIST:-dist}" && pwd)"

"${ROOT}/hack/tools.sh" helm cosign
helm() {
  HELM_CACHE_HOME="${DIST}/.helm" HELM_CONFIG_HOME="${DIST}/.helm" HELM_DATA_HOME="${DIST}/.helm" \
    "${ROOT}/bin/helm" "$@"
}
# cosign sign or sign-blob (the first argument) with COSIGN_KEY and SIGNING_CONFIG.
sign() {
  local args=("$1" --key "${COSIGN_KEY}" --yes)
  shift
  if [[ -n "${SIGNING_CONFIG:-}" ]]; then args+=(--signing-config "${SIGNING_CONFIG}"); fi
  if [[ "${INSECURE:-}" == 1 && "${args[0]}" == sign ]]; then args+=(--allow-http-registry); fi
  "${ROOT}/bin/cosign" "${args[@]}" "$@" >&2
}

# Only what a release writes: DIST may be a directory with other files.
rm -rf "${DIST}/install.yaml" "${DIST}/.chart" "${DIST}/.helm" "${DIST}/.plugin" "${DIST}/image.txt" "${DIST}"/buildsmith-*.tgz \
  "${DIST}/chart.txt" "${DIST}"/kubectl-buildsmith_*.tar.gz "${DIST}"/checksums.txt* "${DIST}/cosign.pub" "${DIST}/plugins"
mkdir -p "${DIST}/.chart" "${DIST}/plugins"
image="$(VERSION="${VERSION}" "${ROOT}/hack/image.sh" | tail -n 1)"
digest="${image##*@}"
if [[ ! "${digest}" =~ ^sha256:[a-f0-9]{64}$ ]]; then
  echo "release: hack/image.sh printed ${image}, not an image by digest" >&2
  exit 1
fi
printf '%s\n' "${image}" >"${DIST}/image.txt"
if [[ "${COSIGN_KEY}" != none ]]; then
  "${ROOT}/bin/cosign" public-key --key "${COSIGN_KEY}" >"${DIST}/cosign.pub"
  sign sign --recursive "${IMAGE_REPO}@${digest}"
fi

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

{
  echo "# buildsmith ${VERSION}, rendered from its chart: the namespace, the CRDs, the controller."
  echo "# Install: kubectl apply --server-side -f install.yaml"
  echo "apiVersion: v1"
  echo "kind: Namespace"
  echo "metadata:"
  echo "  name: buildsmith"
  printf '%s\n' "${rendered}"
} >"${DIST}/install.yaml"

# The kubectl plugin, cross-built (static, trimmed paths, the version stamped)
# and archived the same way each time: sorted, owned by 0:0, dated at the
# commit, gzip without a name or a time.
mtime="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
for platform in "${PLATFORMS[@]}"; do
  os="${platform%/*}" arch="${platform#*/}"
  dir="${DIST}/.plugin/${os}_${arch}"
  mkdir -p "${dir}"
  CGO_ENABLED=0 GOOS="${os}" GOARCH="${arch}" go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o "${dir}/kubectl-buildsmith" ./cmd/kubectl-buildsmith
  chmod 0755 "${dir}/kubectl-buildsmith"
  # krew's index asks for the license in each archive.
  install -m 0644 LICENSE "${dir}/LICENSE"
  tar -C "${dir}" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${mtime}" -cf - LICENSE kubectl-buildsmith |
    gzip -n -9 >"${DIST}/kubectl-buildsmith_${os}_${arch}.tar.gz"
done

# The krew manifest: the template with this release's version, URIs and
# sha256s, none of its placeholders left.
sed_value() { sed -e 's/[\\|&]/\\&/g' <<<"$1"; } # as a sed replacement: \, | and & escaped
# The template's opening comment, about the template, gives way to one line.
manifest="$(echo "# kubectl-buildsmith ${VERSION} for krew, written by hack/release.sh from plugins/buildsmith.yaml"
  sed -e '1,/^apiVersion:/{/^#/d}' -e "s|{{VERSION}}|${VERSION}|g" \
    -e "s|{{DOWNLOAD_URL}}|$(sed_value "${DOWNLOAD_URL}")|g" plugins/buildsmith.yaml)"
for platform in "${PLATFORMS[@]}"; do
  os="${platform%/*}" arch="${platform#*/}"
  sum="$(sha256sum "${DIST}/kubectl-buildsmith_${os}_${arch}.tar.gz" | cut -d' ' -f1)"
  manifest="$(sed -e "s|{{SHA256_${os}_${arch}}}|${sum}|g" <<<"${manifest}")"
done
if grep -n '{{' <<<"${manifest}" >&2; then
  echo "release: plugins/buildsmith.yaml has placeholders the release does not fill (above)" >&2
  exit 1
fi
printf '%s\n' "${manifest}" >"${DIST}/plugins/buildsmith.yaml"
(cd "${DIST}" && sha256sum kubectl-buildsmith_*.tar.gz "$(basename "${chart}")" install.yaml) >"${DIST}/checksums.txt"
if [[ "${COSIGN_KEY}" != none ]]; then
  sign sign-blob --bundle "${DIST}/checksums.txt.sigstore.json" "${DIST}/checksums.txt"
fi

# The chart as an OCI artifact, then pulled back by the digest the registry
# gave and compared with dist's: what is pushed is what was checked above.
install_line=""
if [[ "${CHART_REPO}" != none ]]; then
  plain_http=()
  if [[ "${INSECURE:-}" == 1 ]]; then plain_http=(--plain-http); fi
  pushed="$(helm push "${chart}" "oci://${CHART_REPO}" "${plain_http[@]}")"
  chart_digest="$(sed -n -E 's/^Digest: (sha256:[a-f0-9]{64})$/\1/p' <<<"${pushed}")"
  if [[ -z "${chart_digest}" ]]; then
    printf 'release: helm push printed no digest:\n%s\n' "${pushed}" >&2
    exit 1
  fi
  chart_ref="oci://${CHART_REPO}/buildsmith"
  mkdir -p "${DIST}/.chart/pulled"
  helm pull "${chart_ref}@${chart_digest}" "${plain_http[@]}" -d "${DIST}/.chart/pulled" >/dev/null
  if ! cmp -s "${chart}" "${DIST}/.chart/pulled/"*.tgz; then
    echo "release: ${chart_ref}@${chart_digest} is not ${chart}" >&2
    exit 1
  fi
  printf '%s:%s@%s\n' "${chart_ref}" "${chart_version}" "${chart_digest}" >"${DIST}/chart.txt"
  if [[ "${COSIGN_KEY}" != none ]]; then
    sign sign "${CHART_REPO}/buildsmith@${chart_digest}"
  fi
  install_line="helm install buildsmith ${chart_ref} --version ${chart_version} --namespace buildsmith --create-namespace"
  if [[ "${INSECURE:-}" == 1 ]]; then install_line+=" --plain-http"; fi
fi
rm -rf "${DIST}/.chart" "${DIST}/.helm" "${DIST}/.plugin"

echo "release ${VERSION}:" >&2
(cd "${DIST}" && find . -type f | sort) >&2
printf '%s\n' "${image}"
if [[ -n "${install_line}" ]]; then
  printf 'install:\n  %s\n' "${install_line}" >&2
fi
