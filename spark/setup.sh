#!/usr/bin/env bash
# Fetches the jars of Spark's Kafka source and sink (spark/pom.xml) from Maven Central into
# $CACHE/spark-jars-<spark.version> and prints that folder; with `s3`, the jars of Hadoop's s3a
# file system (spark/s3.pom.xml, the AWS SDK bundle trimmed to S3) into
# $CACHE/spark-s3-jars-<hadoop.version>, for the Spark image. Idempotent: with the pom
# unchanged, a second run does no network access. CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
mkdir -p "$CACHE"

# shellcheck source=../scripts/maven_jars.sh
. "$here/../scripts/maven_jars.sh"
ensure_jdk_and_maven

if [ "${1:-}" = s3 ]; then
  version="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$here/s3.pom.xml")"
  [ -n "$version" ] || { echo "spark/setup.sh: no <hadoop.version> in $here/s3.pom.xml" >&2; exit 1; }
  JARS="$CACHE/spark-s3-jars-$version"
  fetch_jars "spark s3 jars" "$here/s3.pom.xml" "$JARS" "$CACHE/m2" "hadoop-aws-$version.jar" \
    'bundle-*.jar' 'analyticsaccelerator-s3-*.jar'
  python3 "$here/trim_aws_bundle.py" "$JARS"
  echo "$JARS"
  exit 0
fi

version="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$here/pom.xml")"
[ -n "$version" ] || { echo "spark/setup.sh: no <spark.version> in $here/pom.xml" >&2; exit 1; }
JARS="$CACHE/spark-jars-$version"
fetch_jars "spark jars" "$here/pom.xml" "$JARS" "$CACHE/m2" \
  "spark-sql-kafka-0-10_2.13-$version.jar" "spark-token-provider-kafka-0-10_2.13-$version.jar" \
  'kafka-clients-*.jar' 'commons-pool2-*.jar'
echo "$JARS"
