#!/usr/bin/env bash
# Fetches Apache Kafka (broker + perf tools, bench/kafka/pom.xml) and its runtime dependencies
# from Maven Central, for `python -m bench compare`.
#
#   jars:                  $CACHE/kafka-<version>/libs/*.jar  (re-fetched when pom.xml changes)
#   Maven's local repository: $CACHE/m2
#
# CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube. Idempotent: with nothing changed, a second run
# does no network access. Prints the libs directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)/kafka"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
M2="$CACHE/m2"
mkdir -p "$CACHE"

need_apt=()
command -v java >/dev/null || need_apt+=(default-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
[ -n "$version" ] || { echo "setup_kafka: no <kafka.version> in $here/pom.xml" >&2; exit 1; }
LIB="$CACHE/kafka-$version/libs"
stamp="$(sha1sum "$here/pom.xml" | cut -c1-40)"
if [ "$(cat "$LIB/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
  echo "setup_kafka: fetching Apache Kafka $version jars from Maven Central into $LIB" >&2
  mkdir -p "$CACHE/kafka-$version"
  tmp="$(mktemp -d "$CACHE/kafka-$version/libs.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # Maven's output is kept and shown only if it fails (even -q prints terminal escapes).
  if ! mvn -q -B -Dstyle.color=never -f "$here/pom.xml" -Dmaven.repo.local="$M2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
    >"$tmp/.mvn.log" 2>&1; then
    cat "$tmp/.mvn.log" >&2
    echo "setup_kafka: mvn dependency:copy-dependencies failed (see above)" >&2
    exit 1
  fi
  rm -f "$tmp/.mvn.log"
  ls "$tmp/kafka_2.13-$version.jar" "$tmp/kafka-tools-$version.jar" >/dev/null
  echo "$stamp" >"$tmp/.stamp"
  rm -rf "$LIB"
  mv "$tmp" "$LIB"
  trap - EXIT
fi
echo "$LIB"
