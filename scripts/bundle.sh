#!/usr/bin/env bash
# The `kubectl apply -f` install bundle (deploy/kafkube-operator.yaml): the Helm chart rendered
# with its defaults into namespace kafkube-system, the CRDs included. The chart is the one
# source; tests/integration/test_chart.py fails when the bundle was not rendered again after a change.
#   bash scripts/bundle.sh > deploy/kafkube-operator.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=$(bash scripts/helm.sh)
cat <<'HEAD'
# The kafkube operator, for `kubectl apply --server-side -f deploy/kafkube-operator.yaml`:
# rendered from charts/kafkube-operator by scripts/bundle.sh (do not edit by hand).
apiVersion: v1
kind: Namespace
metadata:
  name: kafkube-system
HEAD
"$HELM" template kafkube-operator charts/kafkube-operator --namespace kafkube-system \
  --include-crds --kube-version 1.35.0 2>/dev/null
