#!/usr/bin/env bash
# The Kubeflow Spark Operator's binary (one command: `controller start`, `webhook start`),
# built from the Go module proxy through the wrapper module in scripts/spark-operator/ (the
# operator's own replace block pins k8s.io/* lower than it requires, so it cannot be
# `go install`ed directly), and cached; prints its path. Its chart is in the same module
# (printed by `scripts/spark_operator.sh chart`). About 3 min cold, nothing warm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=mod
module=github.com/kubeflow/spark-operator/v2
version=$(sed -n "s#^require $module \(v[^ ]*\)\$#\1#p" "$here/spark-operator/go.mod")
[ -n "$version" ] || { echo "spark_operator.sh: no version of $module in go.mod" >&2; exit 1; }

if [ "${1:-}" = chart ]; then
  dir=$(cd /tmp && go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  echo "$dir/charts/spark-operator-chart"
  exit 0
fi

stamp=$(cat "$here/spark-operator/"* | sha1sum | cut -c1-12)
BIN="$CACHE/tools/spark-operator-$version"
SRC="$CACHE/src/spark-operator"
if [ ! -x "$BIN/spark-operator" ] || [ "$(cat "$BIN/.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$BIN" "$CACHE/logs"
  rm -rf "$SRC" && mkdir -p "$SRC" && cp "$here/spark-operator/"* "$SRC/"
  (cd "$SRC" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' \
    -o "$BIN/spark-operator.tmp" "$module/cmd/operator") >"$CACHE/logs/spark-operator.log" 2>&1 \
    || { tail -n 30 "$CACHE/logs/spark-operator.log" >&2; exit 1; }
  mv "$BIN/spark-operator.tmp" "$BIN/spark-operator"
  echo "$stamp" > "$BIN/.stamp"
fi
echo "$BIN/spark-operator"
