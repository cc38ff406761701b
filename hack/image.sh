#!/usr/bin/env bash
# Builds the controller image for linux/amd64 and linux/arm64 with ko (no
# Docker), with an SBOM, running as the non-root user 65532, and pushes it.
# The last line printed is the image by digest.
#
#   IMAGE_REPO=registry.example/buildsmith/controller hack/image.sh
#
# IMAGE_REPO  where to push (required)
# VERSION     stamped into the binary and used as the tag (default: dev)
# BASE_IMAGE  the base; by default one hack/baseimage builds from go.mod alone
#             (non-root user, root certificates) and pushes to IMAGE_REPO-base
# INSECURE=1  the registry speaks plain HTTP
# Credentials come from the Docker config (DOCKER_CONFIG, ~/.docker/config.json).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
: "${IMAGE_REPO:?IMAGE_REPO=REGISTRY/PATH names where the image goes}"
VERSION="${VERSION:-dev}"

"${ROOT}/hack/tools.sh" ko

insecure=()
if [[ "${INSECURE:-}" == 1 ]]; then insecure=(--insecure); fi
base="${BASE_IMAGE:-}"
if [[ -z "${base}" ]]; then
  base="$(go run ./hack/baseimage --repo "${IMAGE_REPO}-base" "${insecure[@]}")"
  printf 'image: base %s\n' "${base}" >&2
fi

insecure=()
if [[ "${INSECURE:-}" == 1 ]]; then insecure=(--insecure-registry); fi
# ko's reference by digest is its only line on stdout; its progress goes to
# stderr.
KO_DOCKER_REPO="${IMAGE_REPO}" KO_DEFAULTBASEIMAGE="${base}" VERSION="${VERSION}" \
  "${ROOT}/bin/ko" build ./cmd/controller --bare --platform=linux/amd64,linux/arm64 --sbom=spdx \
  --image-user=65532:65532 --tags="${VERSION}" \
  --image-label=org.opencontainers.image.source=https://github.com/buildsmith/buildsmith \
  --image-label="org.opencontainers.image.version=${VERSION}" \
  --image-label="org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "${insecure[@]}"
