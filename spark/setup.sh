#!/usr/bin/env bash
# Fetches the jars of Spark's Kafka source and sink (spark/pom.xml) from Maven Central into
# $CACHE/spark-jars-<spark.version> and prints that folder. Idempotent: with the pom unchanged,
# a second run does no network access. CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
mkdir -p "$CACHE"

# shellcheck source=../scripts/maven_jars.sh
. "$here/../scripts/maven_jars.sh"
ensure_jdk_and_maven

version="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$here/pom.xml")"
[ -n "$version" ] || { echo "spark/setup.sh: no <spark.version> in $here/pom.xml" >&2; exit 1; }
JARS="$CACHE/spark-jars-$version"
fetch_jars "spark jars" "$here/pom.xml" "$JARS" "$CACHE/m2" \
  "spark-sql-kafka-0-10_2.13-$version.jar" "spark-token-provider-kafka-0-10_2.13-$version.jar" \
  'kafka-clients-*.jar' 'commons-pool2-*.jar'
echo "$JARS"
