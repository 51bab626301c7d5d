#!/usr/bin/env bash
# The e2e suite's Kubernetes: a 4-node kind cluster (1 control plane + 3 workers in zones
# zone-a/b/c) built offline by the repository itself and run inside a network namespace
# this script creates, with a Docker engine of its own there (docs/platform.md, "kind for
# the end-to-end tier").
#
#   scripts/kind.sh build              # everything kind would pull, built and cached (idempotent)
#   scripts/kind.sh up NAME            # netns + dockerd + cluster; prints netns and kubeconfig
#   scripts/kind.sh down NAME          # cluster, dockerd and netns removed
#   scripts/kind.sh up|down NAME --dry-run  # prints the commands, runs none
#   scripts/kind.sh exec NAME -- CMD…  # CMD in the cluster's netns with KUBECONFIG set
#   scripts/kind.sh config             # the cluster's kind config, for kind anywhere else
#
# Caches under ${KAFKUBE_CACHE:-~/.cache/kafkube}/kind; run state under /run/kafkube-kind/NAME.
set -euo pipefail
here="$(dirname "$0")/kind"
cmd=${1:-}
shift || true
case "$cmd" in
  build) exec bash "$here/build.sh" "$@" ;;
  config) exec bash "$here/config.sh" "$@" ;;
  up|down|exec) exec bash "$here/cluster.sh" "$cmd" "$@" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
