#!/usr/bin/env bash
# Builds the kafkube image from the root Dockerfile without a Docker engine or a registry
# (docs/platform.md): a Debian bookworm base made with debootstrap, the wheels
# built on the host, buildah for the build. Writes OCI archives that nodes import: the broker
# image, the operator's (kafkube-operator.oci.tar) and the e2e suite's client image
# (kafkube-workload.oci.tar) beside it.
#
#   bash scripts/image.sh            # prints the broker image archive's path
#   bash scripts/image.sh spark      # the Spark image (spark/Dockerfile), and the object store's
#                                    # (kafkube-s3.oci.tar) beside it; prints the Spark archive
#   bash scripts/image.sh previous   # the broker image of the previous release (the commit in
#                                    # scripts/previous-release), localhost/kafkube:previous, for
#                                    # the upgrade scenario (tests/e2e/test_upgrade.py)
#
# Elsewhere `docker build -t kafkube:dev .` (after `pip wheel -w build/wheels .`) builds the
# same image from python:3.11-slim. The base and the archives are cached under ~/.cache/kafkube,
# the archives with a stamp of their inputs: built again only when one changed.
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

# ensure_base IMAGE ARCHIVE PACKAGES: a Debian bookworm base made with debootstrap (minbase
# plus PACKAGES, comma-separated), imported into podman and cached as ARCHIVE.
ensure_base() {
  local image=$1 archive=$2 packages=$3 mirror rootfs
  "${PODMAN[@]}" image exists "$image" && return 0
  if [ -f "$archive" ]; then
    "${PODMAN[@]}" load -i "$archive" >/dev/null
    return 0
  fi
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources \
    2>/dev/null | head -1)
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" \
    "${mirror:-http://deb.debian.org/debian}" >/dev/null
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | "${PODMAN[@]}" import - "$image" >/dev/null
  rm -rf "$rootfs"
  "${PODMAN[@]}" save -o "$archive" "$image" >/dev/null
}

# stamp_of NAMES PATH…: a hash of the images' NAMES and of what they are built from (this
# script, the Dockerfiles, the sources of their wheels). An archive is written with the stamp
# it was built from and not built again while that holds: `make test` builds them in the
# background before the e2e tier asks for them.
stamp_of() {
  local names=$1
  shift
  { echo "$names"; find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.so' \
    ! -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha1sum; } | sha1sum | cut -c1-16
}
# is_current STAMP_FILE STAMP ARCHIVE…
is_current() {
  local file=$1 stamp=$2 archive
  shift 2
  [ -f "$file" ] && [ "$(cat "$file")" = "$stamp" ] || return 1
  for archive in "$@"; do [ -f "$archive" ] || return 1; done
}

if [ "${1:-}" = spark ]; then
  # The Spark image (spark/Dockerfile): its base has a JRE too; pyspark, pyarrow, the Kafka
  # connector's and s3a's jars and the Spark Operator's binary come from the host's caches.
  SPARK_BASE=localhost/kafkube-spark-base:bookworm
  SPARK_IMAGE="${KAFKUBE_SPARK_IMAGE:-localhost/kafkube-spark:dev}"
  archive="$IMAGES/kafkube-spark.oci.tar"
  stamp=$(stamp_of "$SPARK_IMAGE" scripts/image.sh spark/Dockerfile spark/entrypoint.sh \
    spark/kafkube_spark spark/pom.xml spark/s3.pom.xml spark/setup.sh spark/trim_aws_bundle.py \
    pyproject.toml scripts/go_tool.sh scripts/go-tools/spark-operator)
  if ! is_current "$archive.stamp" "$stamp" "$archive"; then
    rm -f "$archive.stamp"
    ensure_base "$SPARK_BASE" "$IMAGES/kafkube-spark-base-bookworm.tar" \
      python3,python3-venv,openjdk-17-jre-headless,procps
    rm -rf build/spark-wheels build/spark-jars build/spark-bin
    pins=$(python3 -c 'import re, sys; text = open("pyproject.toml").read()
spark = re.search(r"^spark = \[(.*?)\]", text, re.S | re.M).group(1)
print(" ".join(re.findall(r"\"((?:pyspark|pyarrow)[^\"]*)\"", spark)))')
    # shellcheck disable=SC2086  # the pins are words
    PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q -w build/spark-wheels $pins >/dev/null
    mkdir -p build/spark-jars build/spark-bin
    cp "$(bash spark/setup.sh)"/*.jar "$(bash spark/setup.sh s3)"/*.jar build/spark-jars/
    cp "$(bash scripts/go_tool.sh spark-operator)" build/spark-bin/
    buildah bud -q --isolation chroot --network host --runtime runc \
      --build-arg BASE="$SPARK_BASE" -f spark/Dockerfile -t "$SPARK_IMAGE" . >/dev/null
    rm -f "$archive"
    buildah push -q "$SPARK_IMAGE" "oci-archive:$archive:$SPARK_IMAGE" >/dev/null
    echo "$stamp" > "$archive.stamp"
  fi

  # The object store the e2e suite runs the streaming job against (spark/object-store.Dockerfile):
  # SeaweedFS's binary on the broker image's Debian base.
  S3_IMAGE="${KAFKUBE_S3_IMAGE:-localhost/kafkube-s3:dev}"
  s3_archive="$IMAGES/kafkube-s3.oci.tar"
  stamp=$(stamp_of "$S3_IMAGE" scripts/image.sh spark/object-store.Dockerfile \
    scripts/go_tool.sh scripts/go-tools/weed)
  if ! is_current "$s3_archive.stamp" "$stamp" "$s3_archive"; then
    rm -f "$s3_archive.stamp"
    ensure_base "$BASE" "$IMAGES/kafkube-base-bookworm.tar" python3,python3-venv
    rm -rf build/s3-bin && mkdir -p build/s3-bin
    cp "$(bash scripts/go_tool.sh weed)" build/s3-bin/
    buildah bud -q --isolation chroot --network host --runtime runc --build-arg BASE="$BASE" \
      -f spark/object-store.Dockerfile -t "$S3_IMAGE" . >/dev/null
    rm -f "$s3_archive"
    buildah push -q "$S3_IMAGE" "oci-archive:$s3_archive:$S3_IMAGE" >/dev/null
    echo "$stamp" > "$s3_archive.stamp"
  fi
  echo "$archive"
  exit 0
fi

if [ "${1:-}" = previous ]; then
  # The previous release's broker image, built from that commit's own sources and Dockerfile
  # (git archive: the clone must hold the commit, as a full `git clone` does), once per commit.
  commit=$(sed -n 's/^\([0-9a-f]\{40\}\).*/\1/p' scripts/previous-release | head -1)
  PREVIOUS="${KAFKUBE_PREVIOUS_IMAGE:-localhost/kafkube:previous}"
  archive="$IMAGES/kafkube-previous.oci.tar"
  if is_current "$archive.stamp" "$commit $PREVIOUS" "$archive"; then
    echo "$archive"
    exit 0
  fi
  if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "image.sh: the previous release $commit (scripts/previous-release) is not in this" \
      "clone; a shallow clone lacks it: git fetch --unshallow" >&2
    exit 1
  fi
  rm -f "$archive.stamp"
  ensure_base "$BASE" "$IMAGES/kafkube-base-bookworm.tar" python3,python3-venv
  src=build/previous-release
  rm -rf "$src" && mkdir -p "$src"
  git archive "$commit" | tar -x -C "$src"
  PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q -w "$src/build/wheels" "./$src" >/dev/null
  buildah bud -q --isolation chroot --network host --runtime runc \
    --build-arg BASE="$BASE" -t "$PREVIOUS" "$src" >/dev/null
  rm -f "$archive"
  buildah push -q "$PREVIOUS" "oci-archive:$archive:$PREVIOUS" >/dev/null
  rm -rf "$src"
  echo "$commit $PREVIOUS" > "$archive.stamp"
  echo "$archive"
  exit 0
fi

archive="$IMAGES/kafkube.oci.tar"
OPERATOR="${KAFKUBE_OPERATOR_IMAGE:-localhost/kafkube-operator:dev}"
WORKLOAD="${KAFKUBE_WORKLOAD_IMAGE:-localhost/kafkube-workload:dev}"
stamp=$(stamp_of "$IMAGE $OPERATOR $WORKLOAD" scripts/image.sh Dockerfile operator/Dockerfile \
  pyproject.toml broker operator contract kafkube \
  spark/kafkube_spark tests/e2e/workload.Dockerfile tests/e2e/workload.py)
if is_current "$archive.stamp" "$stamp" "$archive" "$IMAGES/kafkube-operator.oci.tar" \
    "$IMAGES/kafkube-workload.oci.tar"; then
  echo "$archive"
  exit 0
fi
rm -f "$archive.stamp"
ensure_base "$BASE" "$IMAGES/kafkube-base-bookworm.tar" python3,python3-venv

rm -rf build/wheels
PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q -w build/wheels '.[operator]' >/dev/null
buildah bud -q --isolation chroot --network host --runtime runc \
  --build-arg BASE="$BASE" -t "$IMAGE" . >/dev/null
rm -f "$archive"
buildah push -q "$IMAGE" "oci-archive:$archive:$IMAGE" >/dev/null

# The operator's image: the broker image plus the operator's extra (operator/Dockerfile).
buildah bud -q --isolation chroot --network host --runtime runc --build-arg BASE="$IMAGE" \
  -f operator/Dockerfile -t "$OPERATOR" . >/dev/null
rm -f "$IMAGES/kafkube-operator.oci.tar"
buildah push -q "$OPERATOR" "oci-archive:$IMAGES/kafkube-operator.oci.tar:$OPERATOR" >/dev/null

# The e2e suite's client pods (tests/e2e/workload.py): the same image plus confluent-kafka.
rm -rf build/e2e-wheels
client=$(sed -n 's/.*"\(confluent-kafka==[^"]*\)".*/\1/p' pyproject.toml)
PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip wheel -q --no-deps -w build/e2e-wheels "$client" >/dev/null
buildah bud -q --isolation chroot --network host --runtime runc --build-arg BASE="$IMAGE" \
  -f tests/e2e/workload.Dockerfile -t "$WORKLOAD" . >/dev/null
rm -f "$IMAGES/kafkube-workload.oci.tar"
buildah push -q "$WORKLOAD" "oci-archive:$IMAGES/kafkube-workload.oci.tar:$WORKLOAD" >/dev/null
echo "$stamp" > "$archive.stamp"
echo "$archive"
