#!/usr/bin/env bash
# A kindest/base equivalent without a registry: a Debian bookworm rootfs from debootstrap with
# the packages kind's base Dockerfile installs (containerd, runc and the CNI plugins from Debian
# instead of its own builds), kind's own node files from the kind module, and the same service
# set-up, imported into the Docker engine of DOCKER_HOST.
#
#   base.sh ROOTFS_DIR IMAGE STAMP
set -euo pipefail
source "$(dirname "$0")/common.sh"
rootfs=$1 image=$2 stamp=$3
files="$GOMODCACHE/sigs.k8s.io/kind@$KIND_VERSION/images/base/files"
[ -d "$files" ] || (cd /tmp && go mod download "sigs.k8s.io/kind@$KIND_VERSION")

mirror=$(sed -n 's/^URIs: *\(http[^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources \
  2>/dev/null | head -1)
packages=$(paste -sd, "$REPO/scripts/kind/node/base-packages")
run_quiet "$KCACHE/logs/debootstrap.log" debootstrap --variant=minbase --include="$packages" \
  bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}"

# kind's node files (entrypoint, units, containerd config, kubelet drop-ins, mount hacks).
install -m 0755 "$files"/usr/local/bin/* "$rootfs/usr/local/bin/"
mkdir -p "$rootfs/kind/bin" "$rootfs/LICENSES"
install -m 0644 "$files"/kind/README.txt "$rootfs/kind/"
install -m 0755 "$files"/kind/bin/* "$rootfs/kind/bin/"
install -m 0644 "$files"/etc/crictl.yaml "$rootfs/etc/"
install -D -m 0644 -t "$rootfs/etc/containerd" "$files"/etc/containerd/*
install -D -m 0644 -t "$rootfs/etc/default" "$files"/etc/default/*
install -D -m 0644 -t "$rootfs/etc/sysctl.d" "$files"/etc/sysctl.d/*
install -D -m 0644 -t "$rootfs/etc/systemd/system" "$files"/etc/systemd/system/*.service \
  "$files"/etc/systemd/system/*.slice
install -D -m 0644 -t "$rootfs/etc/systemd/system/kubelet.service.d" \
  "$files"/etc/systemd/system/kubelet.service.d/*

# Debian puts containerd in /usr/bin and the CNI plugins in /usr/lib/cni; kind expects
# /usr/local/bin and /opt/cni/bin.
ln -sf /usr/bin/containerd "$rootfs/usr/local/bin/containerd"
mkdir -p "$rootfs/opt/cni" && ln -sfn /usr/lib/cni "$rootfs/opt/cni/bin"
# No CAP_SYS_RESOURCE here: without restrict_oom_score_adj every pod sandbox dies. The sandbox
# image is the pause tag kubeadm asks for, built by build.sh.
python3 - "$rootfs/etc/containerd/config.toml" "$PAUSE_TAG" <<'PY'
import re, sys
path, pause = sys.argv[1], sys.argv[2]
text = open(path).read()
text = re.sub(r'sandbox_image = ".*"', f'sandbox_image = "registry.k8s.io/pause:{pause}"', text)
text = text.replace("restrict_oom_score_adj = false", "restrict_oom_score_adj = true")
assert "restrict_oom_score_adj = true" in text and pause in text
open(path, "w").write(text)
PY
# The runtime spec containerd starts from: the default one, plus kind's product_uuid hook, minus
# rlimits (raising them needs the capability this machine lacks).
chroot "$rootfs" ctr oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append(
    {"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' > "$rootfs/etc/containerd/cri-base.json"

# The service set-up of kind's base Dockerfile.
rm -f "$rootfs"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service \
  "$rootfs"/lib/systemd/system/multi-user.target.wants/* \
  "$rootfs"/etc/systemd/system/*.wants/* \
  "$rootfs"/lib/systemd/system/local-fs.target.wants/* \
  "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
  "$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* \
  "$rootfs"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> "$rootfs/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$rootfs/sbin/init"
chroot "$rootfs" systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
  >/dev/null 2>&1
chroot "$rootfs" systemctl mask systemd-binfmt.service >/dev/null 2>&1
mkdir -p "$rootfs/etc/kubernetes/manifests"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

# docker import takes no STOPSIGNAL or LABEL: a metadata-only build on top adds them.
tar -C "$rootfs" -c . | docker import --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$image-rootfs" >/dev/null
printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL stamp=%s\n' "$image-rootfs" "$stamp" \
  | DOCKER_BUILDKIT=0 run_quiet "$KCACHE/logs/base-image.log" docker build -t "$image" -
docker rmi "$image-rootfs" >/dev/null
