#!/usr/bin/env bash
# Builds the kafkube image from the root Dockerfile without a Docker engine or a registry
# (../shared/notes/containers.md): a Debian bookworm base made with debootstrap, the wheels
# built on the host, buildah for the build. Writes OCI archives that nodes import: the broker
# image, and the e2e suite's client image (kafkube-workload.oci.tar beside it).
#
#   bash scripts/image.sh            # prints the broker image archive's path
#
# Elsewhere `docker build -t kafkube:dev .` (after `pip wheel -w build/wheels .`) builds the
# same image from python:3.11-slim. The base and the archive are cached under ~/.cache/kafkube.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
IMAGES="$CACHE/images"
BASE=localhost/kafkube-base:bookworm
IMAGE="${KAFKUBE_IMAGE:-localhost/kafkube:dev}"
mkdir -p "$IMAGES"

need_apt=()
for tool in buildah podman debootstrap runc; do
  command -v "$tool" >/dev/null || need_apt+=("$tool")
done
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# This sandbox refuses setrlimit and the hybrid cgroups crun wants: no default ulimits, runc.
export CONTAINERS_CONF="$CACHE/containers.conf"
printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)

if ! "${PODMAN[@]}" image exists "$BASE"; then
  if [ ! -f "$IMAGES/kafkube-base-bookworm.tar" ]; then
    mirror=$(sed -n 's/^URIs: *\(http[^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources \
      2>/dev/null | head -1)
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" \
      "${mirror:-http://deb.debian.org/debian}" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | "${PODMAN[@]}" import - "$BASE" >/dev/null
    rm -rf "$rootfs"
    "${PODMAN[@]}" save -o "$IMAGES/kafkube-base-bookworm.tar" "$BASE" >/dev/null
  else
    "${PODMAN[@]}" load -i "$IMAGES/kafkube-base-bookworm.tar" >/dev/null
  fi
fi

rm -rf build/wheels
PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q -w build/wheels . >/dev/null
buildah bud -q --isolation chroot --network host --runtime runc \
  --build-arg BASE="$BASE" -t "$IMAGE" . >/dev/null
archive="$IMAGES/kafkube.oci.tar"
rm -f "$archive"
buildah push -q "$IMAGE" "oci-archive:$archive:$IMAGE" >/dev/null

# The e2e suite's client pods (tests/e2e/workload.py): the same image plus confluent-kafka.
WORKLOAD="${KAFKUBE_WORKLOAD_IMAGE:-localhost/kafkube-workload:dev}"
rm -rf build/e2e-wheels
client=$(sed -n 's/.*"\(confluent-kafka==[^"]*\)".*/\1/p' pyproject.toml)
PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q --no-deps -w build/e2e-wheels "$client" >/dev/null
buildah bud -q --isolation chroot --network host --runtime runc --build-arg BASE="$IMAGE" \
  -f tests/e2e/workload.Dockerfile -t "$WORKLOAD" . >/dev/null
rm -f "$IMAGES/kafkube-workload.oci.tar"
buildah push -q "$WORKLOAD" "oci-archive:$IMAGES/kafkube-workload.oci.tar:$WORKLOAD" >/dev/null
echo "$archive"
