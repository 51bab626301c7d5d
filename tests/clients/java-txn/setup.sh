#!/usr/bin/env bash
# Fetches the Apache Kafka Java client and Kafka Streams (with their runtime dependencies, among
# them rocksdbjni) from Maven Central and compiles TxnCheck.java and WordCount.java against
# them, for the transaction tests (tests/txn_programs.py locates the build).
#
#   jars:    $CACHE/java-txn-lib/*.jar      (re-fetched when pom.xml changes)
#   classes: $CACHE/java-txn-classes/       (recompiled when a source or the jars change)
#   Maven's local repository: $CACHE/m2
#
# CACHE is $KAFKUBE_CACHE or ~/.cache/kafkube. Idempotent: a second run with nothing changed
# does no network access and no compilation.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${KAFKUBE_CACHE:-$HOME/.cache/kafkube}"
LIB="$CACHE/java-txn-lib"
CLASSES="$CACHE/java-txn-classes"
M2="$CACHE/m2"
SOURCES=("$here/TxnCheck.java" "$here/WordCount.java")
mkdir -p "$CACHE"

# shellcheck source=../../../scripts/maven_jars.sh
. "$here/../../../scripts/maven_jars.sh"
ensure_jdk_and_maven

# 1. The jars. The stamp records which pom.xml they were fetched for.
fetch_jars "java txn" "$here/pom.xml" "$LIB" "$M2" \
  'kafka-clients-*.jar' 'kafka-streams-*.jar' 'rocksdbjni-*.jar'
lib_stamp="$(cat "$LIB/.stamp")"

# 2. The programs. The stamp covers the sources, this script, the jars and the compiler.
classes_stamp="$(
  {
    sha1sum "${SOURCES[@]}" "$here/setup.sh" | cut -c1-40
    cat "$LIB/.stamp"
    javac -version 2>&1
  } | sha1sum | cut -c1-40
)"
if [ "$(cat "$CLASSES/.stamp" 2>/dev/null || true)" != "$classes_stamp" ]; then
  echo "java txn: compiling TxnCheck.java and WordCount.java into $CLASSES" >&2
  tmp="$(mktemp -d "$CACHE/java-txn-classes.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  javac --release 17 -Xlint:all -Werror -encoding UTF-8 \
    -cp "$LIB/*" -d "$tmp" "${SOURCES[@]}"
  echo "$classes_stamp" >"$tmp/.stamp"
  # What tests/txn_programs.py compares against the checkout to detect a stale build:
  # the sha1 of each source (in SOURCES order), then the pom's.
  printf '%s %s %s\n' "$(sha1sum "$here/TxnCheck.java" | cut -c1-40)" \
    "$(sha1sum "$here/WordCount.java" | cut -c1-40)" "$lib_stamp" >"$tmp/.inputs"
  rm -rf "$CLASSES"
  mv "$tmp" "$CLASSES"
  trap - EXIT
fi
