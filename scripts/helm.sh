#!/usr/bin/env bash
# Helm, built from the Go module proxy (no release download here) and cached; prints its path.
# Used by the chart's tests (helm lint, helm template), the e2e suite (helm install) and
# scripts/bundle.sh. About 2 min cold, nothing warm.
set -euo pipefail
HELM_VERSION=v3.22.0
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
BIN="$CACHE/tools/$HELM_VERSION"
if [ ! -x "$BIN/helm" ]; then
  mkdir -p "$BIN" "$CACHE/logs"
  export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=mod
  (cd /tmp && CGO_ENABLED=0 GOBIN="$BIN/.gobin" go install -trimpath -ldflags '-s -w' \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >"$CACHE/logs/helm.log" 2>&1 \
    || { tail -n 30 "$CACHE/logs/helm.log" >&2; exit 1; }
  mv "$BIN/.gobin/helm" "$BIN/helm"
  rmdir "$BIN/.gobin"
fi
echo "$BIN/helm"
