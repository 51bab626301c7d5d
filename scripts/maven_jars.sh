# Sourced by the scripts that need jars from Maven Central (tests/clients/java/setup.sh,
# bench/setup_kafka.sh): install a JDK and Maven if missing, and fetch a pom's runtime
# dependencies into a cache directory stamped with the pom's hash, so that a second run with
# nothing changed does no network access.

# Installs default-jdk-headless and maven through apt-get when java/javac or mvn is missing.
ensure_jdk_and_maven() {
  local need_apt=()
  { command -v java >/dev/null && command -v javac >/dev/null; } \
    || need_apt+=(default-jdk-headless)
  command -v mvn >/dev/null || need_apt+=(maven)
  if ((${#need_apt[@]})); then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
}

# fetch_jars LABEL POM DEST M2 [REQUIRED...]: the runtime dependencies of POM into DEST (whose
# .stamp is the pom's sha1), using M2 as Maven's local repository. Nothing happens when the
# stamp matches. The jars land in a temporary directory that replaces DEST only once Maven has
# succeeded and every REQUIRED path (relative to DEST) is there.
fetch_jars() {
  local label="$1" pom="$2" dest="$3" m2="$4"
  shift 4
  local stamp tmp required
  stamp="$(sha1sum "$pom" | cut -c1-40)"
  [ "$(cat "$dest/.stamp" 2>/dev/null || true)" != "$stamp" ] || return 0
  echo "$label: fetching jars from Maven Central into $dest" >&2
  mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp -d "$dest.tmp.XXXXXX")"
  # shellcheck disable=SC2064  # expanded now: $tmp is local
  trap "rm -rf '$tmp'" EXIT
  # -f: run against the pom wherever the caller is; nothing is written next to the pom.
  # Maven's output is kept and shown only if it fails (even -q prints terminal escapes).
  if ! mvn -q -B -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
    >"$tmp/.mvn.log" 2>&1; then
    cat "$tmp/.mvn.log" >&2
    rm -rf "$tmp"
    echo "$label: mvn dependency:copy-dependencies failed (see above)" >&2
    return 1
  fi
  rm -f "$tmp/.mvn.log"
  for required in "$@"; do
    # shellcheck disable=SC2086  # REQUIRED may be a glob
    if ! ls "$tmp"/$required >/dev/null 2>&1; then
      rm -rf "$tmp"
      echo "$label: $required missing after the fetch" >&2
      return 1
    fi
  done
  echo "$stamp" >"$tmp/.stamp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
}
