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

# shellcheck source=../scripts/maven_jars.sh
. "$(dirname "$here")/../scripts/maven_jars.sh"
ensure_jdk_and_maven

version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
[ -n "$version" ] || { echo "setup_kafka: no <kafka.version> in $here/pom.xml" >&2; exit 1; }
LIB="$CACHE/kafka-$version/libs"
fetch_jars setup_kafka "$here/pom.xml" "$LIB" "$M2" \
  "kafka_2.13-$version.jar" "kafka-tools-$version.jar"
echo "$LIB"
