#!/usr/bin/env bash
# Installs everything kafkube needs on a fresh Debian machine: Debian packages, a Python
# virtualenv with the project and its test extras, the Java client jars from Maven Central,
# and Kubernetes binaries built from the Go module proxy. Idempotent; downloads and builds are cached under ~/.cache/kafkube.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
mkdir -p "$CACHE"

need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)
command -v javac >/dev/null || need_apt+=(default-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# The C module (broker/protocol/_recordscan.c) is compiled by pip install.
command -v gcc >/dev/null || need_apt+=(gcc)
# The integration tier's Kubernetes API server: Debian's etcd, and openssl for its certificates.
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v openssl >/dev/null || need_apt+=(openssl)
# ss reads the broker's socket buffer sizes from the kernel (tests/test_socket_buffers.py).
command -v ss >/dev/null || need_apt+=(iproute2)
python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_apt+=(python3-dev)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$(cat pyproject.toml broker/protocol/*.c | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip install -q --upgrade pip
  PIP_CACHE_DIR="$CACHE/pip" .venv/bin/pip install -q -e '.[test,spark]'
  touch "$stamp"
fi

# kube-apiserver of the pinned release, built from the Go module proxy (cached; ~5 min cold).
bash scripts/kubernetes.sh kube-apiserver >/dev/null

# Helm (the chart's tests, the e2e suite's install) and the Prometheus Operator's CRDs (our
# ServiceMonitor and PodMonitor validated against them), from the Go module proxy (cached).
bash scripts/helm.sh >/dev/null
bash scripts/third_party_crds.sh >/dev/null

# Apache Kafka's own jars: the command-line tools the tests run, and the broker `bench compare` runs.
bash bench/setup_kafka.sh >/dev/null

# Spark's Kafka source and sink for the jobs in spark/ (pyspark does not ship them).
bash spark/setup.sh >/dev/null

if [ -f tests/clients/java/setup.sh ]; then
  bash tests/clients/java/setup.sh
fi
if [ -f tests/clients/java-txn/setup.sh ]; then
  bash tests/clients/java-txn/setup.sh
fi
# franz-go, the Go client, for tests/test_franz_go.py: built from the Go module proxy (cached).
bash tests/clients/franz-go/setup.sh

# The e2e suite's kind cluster: Docker engine, kind, node image with every image it needs, all
# built offline and cached (scripts/kind.sh; ~15 min cold, nothing warm).
bash scripts/kind.sh build
