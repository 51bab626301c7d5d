#!/usr/bin/env bash
# Kubernetes binaries of one pinned release, built from the Go module proxy: there is no
# release download or image registry here (docs/platform.md, "A real API server for the
# integration tier").
#
#   bash scripts/kubernetes.sh kube-apiserver [kubectl ...]   # prints the bin directory
#
# k8s.io/kubernetes pins its ~31 staging modules (k8s.io/api, client-go, ...) to local
# directories that the module zip does not carry, so a small module of our own requires it and
# points each staging module at its published v0.x release. The binaries get the version
# ldflags that kubeadm, kind and helm read (they refuse v0.0.0-master). Cached under
# ~/.cache/kafkube: a cold kube-apiserver takes ~5 min on 2 cores, a warm run nothing.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.35.4}"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
ROOT="$CACHE/kubernetes/$K8S_VERSION"
BIN="$ROOT/bin"
MODULE="$ROOT/module"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-mod=mod GOTOOLCHAIN=local
components=("${@:-kube-apiserver}")

missing=()
for c in "${components[@]}"; do [ -x "$BIN/$c" ] || missing+=("$c"); done
if ((${#missing[@]} == 0)); then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { echo "kubernetes.sh: Go is needed to build ${missing[*]}" >&2; exit 1; }
# Two callers at once (the set-up's kube-apiserver step and the kind node image's build beside
# it, scripts/setup.sh) share the module and the binaries' paths: they take turns, and the
# second builds only what the first left missing.
mkdir -p "$ROOT"
exec 8>>"$ROOT/build.lock"
flock 8
missing=()
for c in "${components[@]}"; do [ -x "$BIN/$c" ] || missing+=("$c"); done
if ((${#missing[@]} == 0)); then echo "$BIN"; exit 0; fi

staging="${K8S_VERSION/v1./v0.}"  # v1.35.4 -> v0.35.4, the staging modules' tag
mkdir -p "$MODULE" "$BIN"
if [ ! -f "$MODULE/go.sum" ]; then
  upstream=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module kafkube.local/kubernetes"
    echo
    grep -m1 '^go ' "$upstream"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$upstream"
    echo ")"
  } > "$MODULE/go.mod"
  cat > "$MODULE/tools.go" <<'EOF'
//go:build tools

// The commands this module builds; tidy keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
  # Quiet unless it fails: tidy names every module it downloads.
  (cd "$MODULE" && go mod tidy >"$ROOT/tidy.log" 2>&1) || { cat "$ROOT/tidy.log" >&2; exit 1; }
fi

released=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
  | python3 -c 'import json, sys; print(json.load(open(json.load(sys.stdin)["Info"]))["Time"])')
IFS=. read -r major minor _ <<<"${K8S_VERSION#v}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  # The module proxy does not give the release's commit; zeros say so plainly.
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$released"
done
for c in "${missing[@]}"; do
  start=$SECONDS
  (cd "$MODULE" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" \
    "k8s.io/kubernetes/cmd/$c")
  mv "$BIN/$c.tmp" "$BIN/$c"
  echo "built $c $K8S_VERSION in $((SECONDS - start))s" >&2
done
echo "$BIN"
