#!/usr/bin/env bash
# up / down / exec of one e2e kind cluster, everything inside a network namespace of its own
# (see scripts/kind.sh). kindnetd cannot be had offline, so `up` does its job once: each node
# gets a bridge CNI config with its podCIDR and a route to every other node's podCIDR.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cmd=$1 name=${2:?cluster name}
shift 2
[[ "$name" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "bad cluster name: $name"
ns=$(netns_of "$name"); state=$(state_of "$name")
KUBECTL_BIN="$CACHE/kubernetes/$K8S_VERSION/bin"
export DOCKER_HOST="unix://$state/docker.sock" KUBECONFIG="$state/kubeconfig"
# The project's images (scripts/image.sh), loaded into every node; space-separated paths.
IMAGE_ARCHIVES=${KAFKUBE_KIND_IMAGES:-$CACHE/images/kafkube.oci.tar $CACHE/images/kafkube-previous.oci.tar $CACHE/images/kafkube-operator.oci.tar $CACHE/images/kafkube-workload.oci.tar $CACHE/images/kafkube-spark.oci.tar $CACHE/images/kafkube-s3.oci.tar}

# KAFKUBE_DRY_RUN=1 (or `--dry-run` after the name): `up` and `down` print the commands they
# would run, with this machine's names and paths, and run none of them.
DRY_RUN=${KAFKUBE_DRY_RUN:-}
[ "${1:-}" = "--dry-run" ] && { DRY_RUN=1; shift; }
# x CMD...: runs CMD, or prints it in a dry run.
x() { if [ -n "$DRY_RUN" ]; then printf '%q ' "$@"; echo; else "$@"; fi; }

kubectl() { in_netns "$ns" "$KUBECTL_BIN/kubectl" --request-timeout=30s "$@"; }
pod_cidr() { kubectl get node "$1" -o 'jsonpath={.spec.podCIDR}'; }
has_pod_cidr() { [ -n "$(pod_cidr "$1")" ]; }

down() {
  if [ -n "$DRY_RUN" ]; then
    x nsenter --net="/var/run/netns/$ns" -- kind delete cluster --name "$name"
    echo "# then: stop the Docker engine (pid in $state/docker.pid), unmount what it left" \
      "under $state, ip netns delete $ns, rm -rf $state"
    return 0
  fi
  if [ -S "$state/docker.sock" ] && docker version >/dev/null 2>&1; then
    timeout 180 nsenter --net="/var/run/netns/$ns" -- kind delete cluster --name "$name" \
      >/dev/null 2>&1 || true
    local left
    left=$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=$name")
    [ -z "$left" ] || docker rm -f -v $left >/dev/null
  fi
  dockerd_stop "$name"
}

# pod_network: what kindnetd would do, once — each node's CNI config carries its podCIDR and
# every node routes the other nodes' podCIDRs to them.
pod_network() {
  local nodes=() cidrs=() ips=() i j
  if [ -n "$DRY_RUN" ]; then
    echo "# each node: ip route replace <each other node's podCIDR> via <that node's address>;"
    echo "#   /etc/cni/net.d/10-kafkube.conflist: bridge cni0, host-local IPAM over its podCIDR"
    return 0
  fi
  mapfile -t nodes < <(in_netns "$ns" kind get nodes --name "$name")
  for i in "${!nodes[@]}"; do
    wait_for 120 "a podCIDR for ${nodes[i]}" has_pod_cidr "${nodes[i]}"
    cidrs[i]=$(pod_cidr "${nodes[i]}")
    ips[i]=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${nodes[i]}")
  done
  for i in "${!nodes[@]}"; do
    for j in "${!nodes[@]}"; do
      ((i == j)) || docker exec "${nodes[i]}" ip route replace "${cidrs[j]}" via "${ips[j]}"
    done
    docker exec -i "${nodes[i]}" sh -c 'cat > /etc/cni/net.d/10-kafkube.conflist' <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kafkube",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "${cidrs[i]}"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  done
}

# load_images: the project's OCI archives (scripts/image.sh) into every worker's containerd.
# The control plane keeps its NoSchedule taint (no pod of ours runs there): importing ~1 GB
# into it too made the import, 16 at once on 2 cores, a quarter longer.
load_images() {
  local archive node pids=()
  for archive in $IMAGE_ARCHIVES; do
    [ -f "$archive" ] || continue
    for node in $(nodes | grep -v -- '-control-plane$'); do
      if [ -n "$DRY_RUN" ]; then
        x docker exec -i "$node" ctr --namespace=k8s.io images import --all-platforms \
          --digests - ; echo "#   (stdin: $archive)"; continue
      fi
      timeout 300 docker exec -i "$node" ctr --namespace=k8s.io images import --all-platforms \
        --digests - <"$archive" >"$state/load-$node-$(basename "$archive").log" 2>&1 &
      pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "image import failed (logs in $state)"; done
}

# failed_up: keeps the run's logs for a look afterwards, then removes everything.
failed_up() {
  local keep="$KCACHE/logs/failed-up-$name"
  rm -rf "$keep"; mkdir -p "$keep"
  cp "$state"/*.log "$keep/" 2>/dev/null || true
  echo "kind.sh: up $name failed; tearing it down (logs in $keep)" >&2
  down
}

# sweep_stale: the run state of clusters whose engine is gone (a run killed outright) —
# their network namespaces and mounts go too.
sweep_stale() {
  local dir other pid
  for dir in "$RUNROOT"/*/; do
    [ -d "$dir" ] || continue
    other=$(basename "$dir")
    pid=$(cat "$dir/docker.pid" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      # A build or up that is still starting its engine has no pid file yet: spare young ones.
      [ -n "$(find "$dir" -maxdepth 0 -mmin +10)" ] && dockerd_stop "$other"
    fi
  done
  return 0
}

# nodes: the cluster's node containers (in a dry run, the names kind will give them).
nodes() {
  if [ -n "$DRY_RUN" ]; then echo "$name-control-plane $name-worker $name-worker2 $name-worker3"
  else in_netns "$ns" kind get nodes --name "$name"; fi
}

dry_up() {
  local node_tar="$KIMAGES/node-<hash>.tar" node_image=$NODE_IMAGE
  [ -f "$KIMAGES/node.current" ] && read -r node_tar node_image < "$KIMAGES/node.current"
  x bash "$REPO/scripts/kind/build.sh"
  x ip netns add "$ns"
  x nsenter --net="/var/run/netns/$ns" -- dockerd --config-file "$state/daemon.json"
  echo "#   (data root $KCACHE/docker, socket $state/docker.sock, runtime scripts/kind/runc-wrapper)"
  x docker load -i "$node_tar"
  echo "# $state/kind.yaml:"; bash "$REPO/scripts/kind/config.sh" --offline | sed 's/^/#   /'
  x nsenter --net="/var/run/netns/$ns" -- kind create cluster --name "$name" \
    --image "$node_image" --config "$state/kind.yaml" --kubeconfig "$KUBECONFIG"
  pod_network
  load_images
  x kubectl wait --for=condition=Ready nodes --all --timeout=180s
  x kubectl -n kube-system rollout status deployment/coredns --timeout=180s
  x kubectl -n local-path-storage rollout status deployment/local-path-provisioner \
    --timeout=180s
}

up() {
  if [ -n "$DRY_RUN" ]; then dry_up; return 0; fi
  sweep_stale
  bash "$REPO/scripts/kind/build.sh"
  local node_tar node_image
  read -r node_tar node_image < "$KIMAGES/node.current"
  ok=0
  trap '[ "$ok" = 1 ] || failed_up' EXIT
  trap 'exit 130' INT TERM
  dockerd_start "$name"
  docker image inspect "$node_image" >/dev/null 2>&1 \
    || run_quiet "$state/load-node.log" timeout 600 docker load -i "$node_tar"
  in_netns "$ns" kind delete cluster --name "$name" >/dev/null 2>&1 || true
  bash "$REPO/scripts/kind/config.sh" --offline > "$state/kind.yaml"
  run_quiet "$state/kind-create.log" timeout 900 nsenter --net="/var/run/netns/$ns" -- \
    kind create cluster --name "$name" \
      --image "$node_image" --config "$state/kind.yaml" --kubeconfig "$KUBECONFIG"
  pod_network
  load_images
  kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
  kubectl -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
  kubectl -n local-path-storage rollout status deployment/local-path-provisioner \
    --timeout=180s >/dev/null
  ok=1
  echo "NETNS=$ns"
  echo "KUBECONFIG=$KUBECONFIG"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  exec)
    [ "${1:-}" = "--" ] && shift
    [ -f "$KUBECONFIG" ] || die "no cluster $name (run: scripts/kind.sh up $name)"
    PATH="$KUBECTL_BIN:$PATH" in_netns "$ns" "$@"
    ;;
esac
