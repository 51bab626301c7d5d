#!/usr/bin/env bash
# CRDs of other projects that our manifests use (the Prometheus Operator's ServiceMonitor and
# PodMonitor), taken from their Go modules through the module proxy and cached; prints the
# directory holding them. The tests install them into the test API server, so our objects
# of those kinds are validated against the real schemas.
set -euo pipefail
PROMETHEUS_OPERATOR_VERSION=v0.85.0
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
export GOMODCACHE="$CACHE/go/mod" GOTOOLCHAIN=local GOFLAGS=-mod=mod
OUT="$CACHE/third-party-crds/$PROMETHEUS_OPERATOR_VERSION"
if [ ! -f "$OUT/.done" ]; then
  mkdir -p "$OUT"
  dir=$(cd /tmp && go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
    | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  for kind in servicemonitors podmonitors; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$OUT/"
  done
  touch "$OUT/.done"
fi
echo "$OUT"
