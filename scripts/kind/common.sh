# Shared by scripts/kind/*.sh (sourced, not run): where the kind platform keeps its cache and
# run state, and how it reaches the Docker engine that lives inside a network namespace of its
# own (docs/platform.md).
KIND_VERSION=v0.33.0
K8S_VERSION="${K8S_VERSION:-v1.35.4}"
ETCD_VERSION=v3.6.6
COREDNS_VERSION=v1.13.1
LPP_VERSION=v0.0.30
PAUSE_TAG=3.10.1
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
KCACHE="$CACHE/kind"
KBIN="$KCACHE/bin"
KIMAGES="$KCACHE/images"
BASE_IMAGE=localhost/kafkube-kind-base:bookworm
NODE_IMAGE="localhost/kafkube-kind-node:$K8S_VERSION"
LPP_IMAGE="localhost/local-path-provisioner:$LPP_VERSION"
# Short: unix socket paths are limited to 108 bytes.
RUNROOT=/run/kafkube-kind
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=mod
export PATH="$KBIN:/usr/local/go/bin:$PATH"

die() { echo "kind.sh: $*" >&2; exit 1; }

# run_quiet LOG CMD...: runs CMD with its output in LOG, shown only if it fails.
run_quiet() {
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "kind.sh: failed: $*" >&2; tail -n 40 "$log" >&2; return 1
  fi
}

# wait_for SECONDS WHAT CMD...: polls CMD until it succeeds, failing after SECONDS.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "kind.sh: timed out after ${limit}s waiting for $what" >&2; return 1; }
    sleep 1
  done
}

# in_netns NAME CMD...: CMD in the namespace's network only. Not `ip netns exec`, which
# remounts /sys and hides the cgroup mounts dockerd and kind need.
in_netns() {
  local ns=$1; shift
  nsenter --net="/var/run/netns/$ns" -- "$@"
}

netns_of() { echo "kind-$1"; }
state_of() { echo "$RUNROOT/$1"; }

# dockerd_start NAME: a network namespace and a Docker engine in it, for cluster NAME. The
# engine's data root is the shared cache (so built images stay loaded) unless another engine
# holds it, then a throwaway one. Sets DOCKER_HOST.
dockerd_start() {
  local name=$1 ns state root
  ns=$(netns_of "$name"); state=$(state_of "$name")
  ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
  in_netns "$ns" ip link set lo up
  mkdir -p "$state" /lib/modules "$KCACHE"
  export DOCKER_HOST="unix://$state/docker.sock"
  if docker version >/dev/null 2>&1; then return 0; fi
  root="$KCACHE/docker"
  exec {lockfd}>"$KCACHE/docker.lock"
  if ! flock -n "$lockfd"; then
    root="$KCACHE/docker-$name"; echo "$root" > "$state/throwaway-root"
  fi
  cat > "$state/daemon.json" <<JSON
{
  "data-root": "$root",
  "exec-root": "$state/exec",
  "pidfile": "$state/docker.pid",
  "hosts": ["$DOCKER_HOST"],
  "storage-driver": "overlay2",
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "runtimes": {"kafkube-runc": {"path": "$REPO/scripts/kind/runc-wrapper"}},
  "default-runtime": "kafkube-runc",
  "log-level": "warn"
}
JSON
  local dockerd
  dockerd=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v dockerd) || die "dockerd missing (apt docker.io)"
  # The lock stays held by dockerd (inherited descriptor) until it exits.
  in_netns "$ns" setsid "$dockerd" --config-file "$state/daemon.json" \
    >"$state/dockerd.log" 2>&1 </dev/null &
  exec {lockfd}>&-
  wait_for 60 "dockerd in $ns" docker version \
    || { tail -n 20 "$state/dockerd.log" >&2; return 1; }
  # Holding the shared root means no other engine uses it: any container or volume there is
  # left over from a run that died (and would restart with its restart policy). Remove them.
  if [ ! -f "$state/throwaway-root" ]; then
    local stale
    stale=$(docker ps -aq)
    [ -z "$stale" ] || docker rm -f -v $stale >/dev/null
    docker volume prune -f >/dev/null
  fi
}

# dockerd_stop NAME: stops the engine and deletes the namespace and the run state.
dockerd_stop() {
  local name=$1 ns state pid
  ns=$(netns_of "$name"); state=$(state_of "$name")
  if [ -f "$state/docker.pid" ]; then
    pid=$(cat "$state/docker.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      local deadline=$((SECONDS + 60))
      while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
  fi
  # Whatever dockerd left mounted under its exec root (netns files, shm) would pin the netns.
  if [ -d "$state" ]; then
    { grep -o " $state/[^ ]*" /proc/self/mounts || true; } | sort -r \
      | while read -r m; do umount -l "$m" || true; done
  fi
  if ip netns list | grep -qx "$ns\( .*\)\?"; then ip netns delete "$ns"; fi
  if [ -f "$state/throwaway-root" ]; then rm -rf "$(cat "$state/throwaway-root")"; fi
  rm -rf "$state"
}
