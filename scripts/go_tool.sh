#!/usr/bin/env bash
# Builds a Go command of another project from the Go module proxy and caches it; prints the
# binary's path. Each command has a wrapper module in scripts/go-tools/NAME/ whose go.mod
# requires the project (repeating its replace block: `go install module@version` refuses a
# module that has one) and whose tools.go imports the command's package. The binary is NAME.
#
#   bash scripts/go_tool.sh spark-operator    # the Kubeflow Spark Operator (~2 min cold)
#   bash scripts/go_tool.sh weed              # SeaweedFS, the e2e suite's object store
#   bash scripts/go_tool.sh NAME --source     # the required module's source (e.g. its chart)
#   bash scripts/go_tool.sh NAME --version    # the required module's version
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name=${1:?usage: scripts/go_tool.sh NAME [--source]}
wrapper="$here/go-tools/$name"
[ -f "$wrapper/go.mod" ] || { echo "go_tool.sh: no wrapper module $wrapper" >&2; exit 2; }
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=mod
# The wrapper's one single-line `require MODULE VERSION`, and the package tools.go imports.
module="" version=""
read -r module version < <(sed -n 's#^require \([^ ]*\) \(v[^ ]*\)$#\1 \2#p' "$wrapper/go.mod") || true
package=$(sed -n 's#^import _ "\(.*\)"$#\1#p' "$wrapper/tools.go")
[ -n "$module" ] && [ -n "$version" ] && [ -n "$package" ] || {
  echo "go_tool.sh: $wrapper needs a line 'require MODULE VERSION' in go.mod and" \
    "'import _ \"PACKAGE\"' in tools.go" >&2
  exit 1
}
command -v go >/dev/null || { echo "go_tool.sh: Go is needed to build $name" >&2; exit 1; }

if [ "${2:-}" = --version ]; then
  echo "$version"
  exit 0
fi
if [ "${2:-}" = --source ]; then
  (cd /tmp && go mod download -json "$module@$version") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
  exit 0
fi

# Built again when the wrapper, this script (its build flags) or the Go toolchain changes.
stamp=$({ cat "$wrapper"/* "$0"; go version; } | sha1sum | cut -c1-12)
BIN="$CACHE/tools/$name-$version"
SRC="$CACHE/src/$name"
if [ ! -x "$BIN/$name" ] || [ "$(cat "$BIN/.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$BIN" "$CACHE/logs"
  rm -rf "$SRC" && mkdir -p "$SRC" && cp "$wrapper"/* "$SRC/"
  (cd "$SRC" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' \
    -o "$BIN/$name.tmp" "$package") >"$CACHE/logs/$name.log" 2>&1 \
    || { tail -n 30 "$CACHE/logs/$name.log" >&2; exit 1; }
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "$stamp" > "$BIN/.stamp"
fi
echo "$BIN/$name"
