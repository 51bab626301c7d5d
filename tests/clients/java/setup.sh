#!/usr/bin/env bash
# Fetches the Apache Kafka Java client (and its runtime dependencies) from Maven Central and
# compiles KafkaCheck.java against it, for tests/test_java_client.py.
#
#   jars:    $CACHE/java-lib/*.jar        (re-fetched when pom.xml changes)
#   classes: $CACHE/java-classes/         (recompiled when KafkaCheck.java or the jars change)
#   Maven's local repository: $CACHE/m2
#
# CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube. Idempotent: a second run with nothing changed
# does no network access and no compilation.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
LIB="$CACHE/java-lib"
CLASSES="$CACHE/java-classes"
M2="$CACHE/m2"
mkdir -p "$CACHE"

# shellcheck source=../../../scripts/maven_jars.sh
. "$here/../../../scripts/maven_jars.sh"
ensure_jdk_and_maven

# 1. The jars. The stamp records which pom.xml they were fetched for.
fetch_jars "java client" "$here/pom.xml" "$LIB" "$M2" 'kafka-clients-*.jar'
lib_stamp="$(cat "$LIB/.stamp")"

# 2. The program. The stamp covers the source, this script, the jars and the compiler.
classes_stamp="$(
  {
    sha1sum "$here/KafkaCheck.java" "$here/setup.sh" | cut -c1-40
    cat "$LIB/.stamp"
    javac -version 2>&1
  } | sha1sum | cut -c1-40
)"
if [ "$(cat "$CLASSES/.stamp" 2>/dev/null || true)" != "$classes_stamp" ]; then
  echo "java client: compiling KafkaCheck.java into $CLASSES" >&2
  tmp="$(mktemp -d "$CACHE/java-classes.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  javac --release 17 -Xlint:all -Werror -encoding UTF-8 \
    -cp "$LIB/*" -d "$tmp" "$here/KafkaCheck.java"
  echo "$classes_stamp" >"$tmp/.stamp"
  # What the tests compare against the checkout to detect a stale build.
  printf '%s %s\n' "$(sha1sum "$here/KafkaCheck.java" | cut -c1-40)" "$lib_stamp" >"$tmp/.inputs"
  rm -rf "$CLASSES"
  mv "$tmp" "$CLASSES"
  trap - EXIT
fi
