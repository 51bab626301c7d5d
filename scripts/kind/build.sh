#!/usr/bin/env bash
# Builds, offline and cached, everything `kind create cluster` would otherwise pull from
# registries (docs/architecture.md, "The image and the test platform"): Debian's Docker engine, kind, a
# kindest/base equivalent from debootstrap, the Kubernetes/etcd/CoreDNS/pause/local-path
# images, and the node image holding them, saved with `docker save` under
# ${KAFKUBE_CACHE:-~/.cache/kafkube}/kind. A warm run checks the stamps and does nothing.
set -euo pipefail
source "$(dirname "$0")/common.sh"
mkdir -p "$KBIN" "$KIMAGES" "$KCACHE/logs"
LOGS="$KCACHE/logs"

need_apt=()
PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v nsenter >/dev/null || need_apt+=(util-linux)
command -v ip >/dev/null || need_apt+=(iproute2)
dpkg -s busybox-static >/dev/null 2>&1 || need_apt+=(busybox-static)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  run_quiet "$LOGS/apt.log" $SUDO apt-get update -qq
  run_quiet "$LOGS/apt.log" env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    "${need_apt[@]}"
fi

# go_module DIR REQUIRE...: a module of our own in DIR requiring REQUIRE (path@version), with
# the sources from scripts/kind/go/<name> if any; made again when those or REQUIRE change.
go_module() {
  local dir=$1; shift
  local src="$REPO/scripts/kind/go/$(basename "$dir")" stamp
  stamp=$( { echo "$@"; if [ -d "$src" ]; then cat "$src"/*.go; fi; } | sha1sum | cut -c1-12)
  [ -f "$dir/go.sum" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  rm -rf "$dir"
  mkdir -p "$dir"
  printf 'module kafkube.local/%s\n\ngo 1.24\n' "$(basename "$dir")" > "$dir/go.mod"
  [ -d "$src" ] && cp "$src"/*.go "$dir/"
  (cd "$dir" && for req in "$@"; do go get "$req"; done && go mod tidy) \
    >"$LOGS/$(basename "$dir")-mod.log" 2>&1 || { tail -n 30 "$LOGS/$(basename "$dir")-mod.log" >&2; return 1; }
  echo "$stamp" > "$dir/.stamp"
}

# go_binary NAME PACKAGE [MODULE_DIR]: a static binary in $KBIN, built once (again when its
# module was made again).
go_binary() {
  local name=$1 pkg=$2 dir=${3:-} want=""
  [ -n "$dir" ] && want=$(cat "$dir/.stamp")
  [ -x "$KBIN/$name" ] && [ "$(cat "$KBIN/$name.stamp" 2>/dev/null)" = "$want" ] && return 0
  local start=$SECONDS
  if [ -n "$dir" ]; then
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$KBIN/$name.tmp" "$pkg") \
      >"$LOGS/$name.log" 2>&1 || { tail -n 30 "$LOGS/$name.log" >&2; return 1; }
  else
    (cd /tmp && CGO_ENABLED=0 GOBIN="$KBIN/.gobin" go install -trimpath -ldflags '-s -w' "$pkg") \
      >"$LOGS/$name.log" 2>&1 || { tail -n 30 "$LOGS/$name.log" >&2; return 1; }
    mv "$KBIN/.gobin/$(basename "${pkg%@*}")" "$KBIN/$name.tmp"
  fi
  mv "$KBIN/$name.tmp" "$KBIN/$name"
  echo "$want" > "$KBIN/$name.stamp"
  echo "kind.sh: built $name in $((SECONDS - start))s" >&2
}

go_binary kind "sigs.k8s.io/kind@$KIND_VERSION"
go_module "$KCACHE/src/pause"
go_binary pause kafkube.local/pause "$KCACHE/src/pause"
go_module "$KCACHE/src/etcd" "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go_binary etcd kafkube.local/etcd "$KCACHE/src/etcd"
go_module "$KCACHE/src/coredns" "github.com/coredns/coredns@$COREDNS_VERSION"
go_binary coredns kafkube.local/coredns "$KCACHE/src/coredns"
go_module "$KCACHE/src/local-path-provisioner" "github.com/rancher/local-path-provisioner@$LPP_VERSION"
go_binary local-path-provisioner github.com/rancher/local-path-provisioner \
  "$KCACHE/src/local-path-provisioner"
K8S_BIN=$(bash "$REPO/scripts/kubernetes.sh" kubeadm kubelet kubectl kube-apiserver \
  kube-controller-manager kube-scheduler kube-proxy)

# The node image's identity: every input that goes into it.
stamp=$( { echo "$KIND_VERSION $K8S_VERSION $ETCD_VERSION $COREDNS_VERSION $LPP_VERSION $PAUSE_TAG"
  cat "$REPO/scripts/kind/build.sh" "$REPO/scripts/kind/node/"*
  ls -l "$KBIN" "$K8S_BIN"; } | sha1sum | cut -c1-12)
NODE_TAR="$KIMAGES/node-$K8S_VERSION-$stamp.tar"
NODE_IMAGE="$NODE_IMAGE-$stamp"
if [ -f "$NODE_TAR" ]; then echo "$NODE_TAR $NODE_IMAGE" > "$KIMAGES/node.current"; exit 0; fi

# The images need an engine: one of our own, in a network namespace of its own, for the build.
BUILD=build-$$
cleanup() {
  if [ -n "${node:-}" ]; then docker rm -f -v "$node" >/dev/null 2>&1 || true; fi
  dockerd_stop "$BUILD"; rm -rf "${WORK:-}"
}
trap cleanup EXIT
WORK=$(mktemp -d /var/tmp/kafkube-kind.XXXXXX)
dockerd_start "$BUILD"

base_stamp=$( { echo "$KIND_VERSION $PAUSE_TAG"
  cat "$REPO/scripts/kind/node/base-packages" "$REPO/scripts/kind/base.sh"; } | sha1sum | cut -c1-12)
BASE_TAR="$KIMAGES/base-$base_stamp.tar"
if ! docker image inspect "$BASE_IMAGE" --format '{{index .Config.Labels "stamp"}}' 2>/dev/null \
    | grep -qx "$base_stamp"; then
  if [ -f "$BASE_TAR" ]; then
    docker load -q -i "$BASE_TAR" >/dev/null
  else
    bash "$REPO/scripts/kind/base.sh" "$WORK/rootfs" "$BASE_IMAGE" "$base_stamp"
    rm -f "$KIMAGES"/base-*.tar
    docker save -o "$BASE_TAR.tmp" "$BASE_IMAGE" && mv "$BASE_TAR.tmp" "$BASE_TAR"
  fi
fi

# scratch_image TAG ENTRYPOINT_JSON FILE=DEST...: an image holding just the given files.
scratch_image() {
  local tag=$1 entrypoint=$2 dir; shift 2
  dir=$(mktemp -d "$WORK/img.XXXXXX")
  for spec in "$@"; do
    install -D -m 0755 "${spec%%=*}" "$dir/${spec#*=}"
  done
  tar -C "$dir" -c . | docker import --change "ENTRYPOINT $entrypoint" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$tag" >/dev/null
}

images=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  scratch_image "registry.k8s.io/$c:$K8S_VERSION" "[\"/usr/local/bin/$c\"]" \
    "$K8S_BIN/$c=usr/local/bin/$c"
  images+=("registry.k8s.io/$c:$K8S_VERSION")
done
# kube-proxy programs iptables/nftables: it needs those tools, which the base image has.
mkdir -p "$WORK/proxy" && cp "$K8S_BIN/kube-proxy" "$WORK/proxy/"
printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT ["/usr/local/bin/kube-proxy"]\n' \
  "$BASE_IMAGE" > "$WORK/proxy/Dockerfile"
DOCKER_BUILDKIT=0 run_quiet "$LOGS/kube-proxy-image.log" \
  docker build -t "registry.k8s.io/kube-proxy:$K8S_VERSION" "$WORK/proxy"
images+=("registry.k8s.io/kube-proxy:$K8S_VERSION")
etcd_tag=$(grep -m1 '^registry.k8s.io/etcd:' < <("$K8S_BIN/kubeadm" config images list \
  --kubernetes-version "$K8S_VERSION" 2>/dev/null))
dns_tag=$(grep -m1 'coredns' < <("$K8S_BIN/kubeadm" config images list \
  --kubernetes-version "$K8S_VERSION" 2>/dev/null))
pause_tag=$(grep -m1 'pause' < <("$K8S_BIN/kubeadm" config images list \
  --kubernetes-version "$K8S_VERSION" 2>/dev/null))
[ "$pause_tag" = "registry.k8s.io/pause:$PAUSE_TAG" ] || die "kubeadm wants $pause_tag, not pause:$PAUSE_TAG"
scratch_image "$etcd_tag" '["/usr/local/bin/etcd"]' "$KBIN/etcd=usr/local/bin/etcd"
scratch_image "$dns_tag" '["/coredns"]' "$KBIN/coredns=coredns"
scratch_image "$pause_tag" '["/pause"]' "$KBIN/pause=pause"
# The provisioner and its helper pods (mkdir/rm of volume directories under a shell): one image.
lpp_dir=$(mktemp -d "$WORK/img.XXXXXX")
install -D -m 0755 "$KBIN/local-path-provisioner" "$lpp_dir/usr/bin/local-path-provisioner"
install -D -m 0755 /bin/busybox "$lpp_dir/bin/busybox"
for tool in sh mkdir rm rmdir chmod ls cat; do ln -s busybox "$lpp_dir/bin/$tool"; done
tar -C "$lpp_dir" -c . | docker import --change 'ENTRYPOINT ["/usr/bin/local-path-provisioner"]' \
  --change 'ENV PATH=/usr/bin:/bin' - "$LPP_IMAGE" >/dev/null
images+=("$etcd_tag" "$dns_tag" "$pause_tag" "$LPP_IMAGE")

# The node image, assembled as kind's own builder does: binaries, version, manifests, and the
# images imported into the node's containerd ahead of time.
node=$(docker run -d --privileged --entrypoint=sleep "$BASE_IMAGE" infinity)
for b in kubeadm kubelet kubectl; do docker cp "$K8S_BIN/$b" "$node:/usr/bin/$b"; done
docker exec "$node" sh -c "echo $K8S_VERSION > /kind/version && mkdir -p /kind/manifests"
sed "s#@LPP_IMAGE@#$LPP_IMAGE#g" "$REPO/scripts/kind/node/default-storage.yaml" \
  | docker exec -i "$node" sh -c 'cat > /kind/manifests/default-storage.yaml'
docker exec -d "$node" sh -c 'echo $$ > /run/containerd-build.pid; exec containerd >/run/containerd-build.log 2>&1'
wait_for 60 "containerd in the node image" docker exec "$node" ctr version
docker save "${images[@]}" | docker exec -i "$node" ctr --namespace=k8s.io images import \
  --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
docker exec "$node" sh -c 'kill "$(cat /run/containerd-build.pid)"'
wait_for 30 "containerd in the node image to stop" \
  docker exec "$node" sh -c '! kill -0 "$(cat /run/containerd-build.pid)"'
docker exec "$node" rm -f /run/containerd-build.pid /run/containerd-build.log
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  "$node" "$NODE_IMAGE" >/dev/null
docker rm -f -v "$node" >/dev/null
node=""
# Only the node image (and the base, for the next rebuild) stay in the engine's data root.
docker rmi "${images[@]}" >/dev/null
docker images --format '{{.Repository}}:{{.Tag}}' "${NODE_IMAGE%:*}" \
  | { grep -vxF "$NODE_IMAGE" || true; } | xargs -r docker rmi >/dev/null
docker image prune -f >/dev/null
rm -f "$KIMAGES"/node-*.tar
docker save -o "$NODE_TAR.tmp" "$NODE_IMAGE" && mv "$NODE_TAR.tmp" "$NODE_TAR"
echo "$NODE_TAR $NODE_IMAGE" > "$KIMAGES/node.current"
