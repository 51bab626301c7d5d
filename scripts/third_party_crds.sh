#!/usr/bin/env bash
# CRDs of other projects that our manifests use, taken from their Go modules through the
# module proxy and cached; prints the directory holding them. The tests install them into the
# test API server, so our objects of those kinds are validated against the real schemas:
#   - the Prometheus Operator's ServiceMonitor and PodMonitor (charts/kafkube-operator);
#   - the Kubeflow Spark Operator's SparkApplication (spark/k8s).
set -euo pipefail
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# The Spark Operator of the version the e2e cluster runs (scripts/go-tools/spark-operator).
SPARK_OPERATOR_VERSION=$(bash "$(dirname "$0")/go_tool.sh" spark-operator --version)
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
export GOMODCACHE="$CACHE/go/mod" GOTOOLCHAIN=local GOFLAGS=-mod=mod
OUT="$CACHE/third-party-crds/prometheus-$PROMETHEUS_OPERATOR_VERSION-spark-$SPARK_OPERATOR_VERSION"

module_dir() {
  (cd /tmp && go mod download -json "$1") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

if [ ! -f "$OUT/.done" ]; then
  mkdir -p "$OUT"
  dir=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  for kind in servicemonitors podmonitors; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$OUT/"
  done
  dir=$(module_dir "github.com/kubeflow/spark-operator/v2@$SPARK_OPERATOR_VERSION")
  cp "$dir/charts/spark-operator-chart/crds/sparkoperator.k8s.io_sparkapplications.yaml" "$OUT/"
  touch "$OUT/.done"
fi
echo "$OUT"
