#!/usr/bin/env bash
# Builds franzcheck (main.go etl.go produce.go share.go) against franz-go from the Go module proxy, for
# tests/test_franz_go.py (which locates the build and fails if it is missing or stale).
#
#   binary:  $CACHE/franz-go/franzcheck
#   stamp:   $CACHE/franz-go/.stamp   (the sources, go.mod, go.sum, this script, `go version`)
#   inputs:  $CACHE/franz-go/.inputs  (what the test compares against the checkout)
#   modules and build cache: $CACHE/go/mod, $CACHE/go/build (shared with scripts/helm.sh)
#
# CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube. Idempotent: a second run with nothing changed
# does no network access and no compilation. Go must be on PATH (or at /usr/local/go/bin).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
OUT="$CACHE/franz-go"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "franz-go: no Go toolchain on PATH" >&2; exit 1; }
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=mod

# The files the binary is built from, in a fixed order; tests/test_franz_go.py hashes the
# same list (every *.go, go.mod, go.sum, sorted by name) to tell a stale build.
inputs="$(cd "$here" && sha1sum -- $(ls -- *.go go.mod go.sum | LC_ALL=C sort))"
stamp="$(
  {
    echo "$inputs"
    sha1sum "$here/setup.sh" | cut -c1-40
    go version
  } | sha1sum | cut -c1-40
)"
if [ "$(cat "$OUT/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
  echo "franz-go: building franzcheck into $OUT" >&2
  mkdir -p "$CACHE/logs"
  tmp="$(mktemp -d "$CACHE/franz-go.tmp.XXXXXX")"
  chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  # -mod=readonly: the committed go.sum must already hold every module (no silent re-resolve).
  (cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$tmp/franzcheck" .) \
    >"$CACHE/logs/franz-go.log" 2>&1 || { tail -n 30 "$CACHE/logs/franz-go.log" >&2; exit 1; }
  echo "$inputs" >"$tmp/.inputs"
  echo "$stamp" >"$tmp/.stamp"
  rm -rf "$OUT"
  mv "$tmp" "$OUT"
  trap - EXIT
fi
