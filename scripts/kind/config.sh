#!/usr/bin/env bash
# The e2e suite's kind cluster: 1 control plane + 3 workers, one zone per worker
# (topology.kubernetes.io/zone), so 3 brokers spread over 3 zones as in production.
# Portable as is, e.g. on a laptop with kind and a registry:
#   kind create cluster --name kafkube --config <(scripts/kind.sh config)
# `--offline` (what scripts/kind.sh up uses) also leaves out kind's CNI, kindnetd, which no
# registry here can serve; up wires the pod network itself.
set -euo pipefail
offline=0
[ "${1:-}" = "--offline" ] && offline=1
cat <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: 127.0.0.1
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/16
YAML
((offline)) && echo "  disableDefaultCNI: true"
cat <<'YAML'
kubeadmConfigPatches:
  # Kubernetes >= 1.35 refuses cgroup v1 hosts unless told otherwise; harmless on v2.
  # A crashed container restarts within a second, not after a back-off growing to 5 min:
  # the failover bench kills the same brokers twenty times.
  # A container's log rotates at 100 MiB, not 10: `kubectl logs` serves only the newest
  # file, and a test's client pod prints one line per record (~72 B with the runtime's
  # prefix; the listener change's 420,000 records fill 30 MB).
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
    crashLoopBackOff: {maxContainerRestartPeriod: 1s}
    containerLogMaxSize: 100Mi
nodes:
  - role: control-plane
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-a}
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-b}
  - role: worker
    labels: {topology.kubernetes.io/zone: zone-c}
YAML
