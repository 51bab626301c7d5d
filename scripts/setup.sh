#!/usr/bin/env bash
# Installs what kafkube needs on a fresh Debian machine, in two parts:
#   scripts/setup.sh demo   what `make demo` runs: Debian's JDK, Maven and Python build tools,
#                           the virtualenv with the project, Spark's Kafka connector jars
#   scripts/setup.sh        everything (`make test`): the above, and the test clients (Apache
#                           Kafka's tools, the Java and franz-go programs), Kubernetes binaries,
#                           Helm and the e2e suite's kind node image, built from the Go module
#                           proxy since there is no release download or image registry here
# Idempotent; downloads and builds are cached under ~/.cache/kafkube ($KAFKUBE_CACHE), each
# step's output under its logs/setup/.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
mkdir -p "$CACHE"
part=${1:-all}
case "$part" in
  demo|all) ;;
  *) echo "usage: scripts/setup.sh [demo|all]" >&2; exit 2 ;;
esac

need_apt=()
# Spark runs on the JDK; Maven fetches its Kafka connector (and the tests' Java clients).
command -v javac >/dev/null || need_apt+=(default-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# The C modules (broker/*/*.c) are compiled by pip install.
command -v gcc >/dev/null || need_apt+=(gcc)
# The demo leaves its cluster running for kcat (it prints the command); the tests use it too.
command -v kcat >/dev/null || need_apt+=(kcat)
if [ "$part" = all ]; then
  # The integration tier's Kubernetes API server: Debian's etcd, and openssl for its certificates.
  command -v etcd >/dev/null || need_apt+=(etcd-server)
  command -v openssl >/dev/null || need_apt+=(openssl)
  # ss reads the broker's socket buffer sizes from the kernel (tests/integration/test_socket_buffers.py).
  command -v ss >/dev/null || need_apt+=(iproute2)
fi
python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_apt+=(python3-dev)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

LOGS="$CACHE/logs/setup"
mkdir -p "$LOGS"
# step NAME CMD...: CMD with its output in $LOGS/NAME.log (shown if it fails), its time printed:
# a cold set-up says where its minutes go.
step() {
  local name=$1 start=$SECONDS
  shift
  if "$@" >"$LOGS/$name.log" 2>&1; then
    echo "setup: $name $((SECONDS - start)) s" >&2
  else
    tail -n 40 "$LOGS/$name.log" >&2
    echo "setup: $name FAILED after $((SECONDS - start)) s (log: $LOGS/$name.log)" >&2
    return 1
  fi
}

python_env() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  local stamp
  stamp=".venv/.installed-$(cat pyproject.toml broker/*/*.c | sha1sum | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip install -q --upgrade pip
  PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip install -q -e '.[test,spark]'
  touch "$stamp"
}

# Three lanes at once, each a chain of steps that share a cache (Maven's local repository is not
# safe for two Mavens at once; the Go builds share $CACHE/go and would only fight for the two
# cores): the downloads of the first two lanes hide behind the compiles of the third.
lane_python() {
  step python-env python_env
}
lane_maven() {
  # Spark's Kafka source and sink (pyspark does not ship them); for the tests, Apache Kafka's
  # own jars (the command-line tools the tests run, the broker `bench compare` runs) and the
  # Java test clients.
  step spark-jars bash spark/setup.sh
  [ "$part" = all ] || return 0
  # s3a for the Spark image (the e2e suite's streaming job checkpoints to S3).
  step spark-s3-jars bash spark/setup.sh s3
  step kafka-jars bash bench/setup_kafka.sh
  step java-client bash tests/clients/java/setup.sh
  step java-txn-client bash tests/clients/java-txn/setup.sh
}
lane_go() {
  # kube-apiserver for the integration tier (~5 min cold); Helm and the Prometheus Operator's
  # and Spark Operator's CRDs (the chart's tests); franz-go (tests/integration/test_franz_go.py); then the
  # e2e suite's kind cluster: Docker engine, kind, node image with every image it needs, all
  # built offline (scripts/kind.sh; ~15 min cold).
  step kube-apiserver bash scripts/kubernetes.sh kube-apiserver
  step helm bash scripts/helm.sh
  step third-party-crds bash scripts/third_party_crds.sh
  step franz-go bash tests/clients/franz-go/setup.sh
  [ "${KAFKUBE_KIND_BUILD:-}" = background ] || step kind bash scripts/kind.sh build
}
# `make test`: the e2e tier's kind node image (~10 min cold, most of it compiling) and the
# images of this tree (scripts/image.sh, ~2 min; with the Spark image, the Spark Operator's
# and SeaweedFS's binaries, ~2 and ~7 min cold) are built at the lowest CPU priority while
# the unit and integration tiers run; the job holds a lock the e2e tier waits for before it
# checks the build and the images (kafkube/harness/kind/platform.py: kind_built). The lock is
# taken here, before the job is forked, so no later reader can miss it. It starts once the
# lanes are done (the images need the virtualenv; the Go lane, the longest cold, is done by
# then anyway): started beside the kube-apiserver build instead, it made the set-up 105 s
# longer (692 s against 587 s cold), and the e2e tier, last, gains nothing from it.
kind_in_background() {
  mkdir -p "$CACHE/kind"
  exec 9>>"$CACHE/kind/build.lock"
  flock 9
  (
    start=$SECONDS
    # The lock is this subshell's (fd 9), not the builds': a daemon they leave running
    # must not keep holding it.
    if nice -n 19 bash scripts/kind.sh build 9>&- && nice -n 19 bash scripts/image.sh 9>&- \
        && nice -n 19 bash scripts/image.sh spark 9>&- \
        && nice -n 19 bash scripts/image.sh previous 9>&-; then
      echo "setup: kind and images $((SECONDS - start)) s (background)"
    else
      echo "setup: kind or images FAILED after $((SECONDS - start)) s (background)"
    fi
  ) >"$LOGS/kind.log" 2>&1 </dev/null &
  exec 9>&-
  echo "setup: kind and images building in the background (log: $LOGS/kind.log)" >&2
}

started=$SECONDS
lanes=()
lane_python & lanes+=($!)
lane_maven & lanes+=($!)
if [ "$part" = all ]; then lane_go & lanes+=($!); fi
failed=0
for lane in "${lanes[@]}"; do
  wait "$lane" || failed=1
done
((failed == 0)) || { echo "setup: failed (logs under $LOGS)" >&2; exit 1; }
echo "setup ($part): ready in $((SECONDS - started)) s" >&2
if [ "$part" = all ] && [ "${KAFKUBE_KIND_BUILD:-}" = background ]; then kind_in_background; fi
