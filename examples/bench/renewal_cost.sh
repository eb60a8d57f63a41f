#!/usr/bin/env bash
# Instructions per lease renewal in the client (callgrind: exact and repeatable, unlike timings
# on a shared VM), in a debug and a release build: the figures behind "Client CPU per renewal"
# in examples/bench/RESULTS.md.
#
#   bash examples/bench/renewal_cost.sh [NODES] [LEASES]   # defaults: 3 (a quorum), 4000
#
# examples/renewal_cost holds LEASES setnx leases on NODES plain redis-servers and has the
# watchdog renew them all R times; run under callgrind with R1 and R2 rounds (env; default 1
# and 3), the instruction totals subtracted and divided by LEASES x (R2 - R1), so start-up,
# connecting, the acquisitions and the releases drop out. A renewal here is one lease's, on
# every node (NODES pipelined calls). User-space instructions only. PROFILES (env; default
# "debug release") picks the builds. Needs valgrind, redis-server and redis-cli; a debug run
# takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
NODES=${1:-3}
LEASES=${2:-4000}
R1=${R1:-1}
R2=${R2:-3}
PROFILES=${PROFILES:-debug release}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=$(mktemp -d)
PORTS=()
cleanup() {
  for port in "${PORTS[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$OUT"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 150); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.2; done; echo "redis-server on $1 did not start" >&2; exit 1; }
total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }

URLS=()
for _ in $(seq "$NODES"); do
  port=$(free_port)
  redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  PORTS+=("$port")
  wait_ready "$port"
  URLS+=(--url "redis://127.0.0.1:$port/")
done

# run BIN ROUNDS: the client's instruction total.
run() {
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$2" "$1" "${URLS[@]}" "$LEASES" "$2" >"$OUT/run.$2" 2>&1
  grep -q "leases on" "$OUT/run.$2" || { echo "the run with $2 rounds failed:" >&2; cat "$OUT/run.$2" >&2; exit 1; }
  total "$OUT/cg.$2"
}

echo "instructions per lease renewal ($LEASES leases on $NODES node(s), $R2 - $R1 rounds):"
for profile in $PROFILES; do
  bin="$OUT/renewal_cost.$profile"
  if [ -n "${BIN:-}" ]; then
    # A binary built elsewhere (a baseline); PROFILES then only labels it.
    cp "$BIN" "$bin"
  else
    if [ "$profile" = release ]; then
      cargo build --quiet --release -p distlock-bench --example renewal_cost
    else
      cargo build --quiet -p distlock-bench --example renewal_cost
    fi
    # A copy: a build meanwhile (another checkout sharing the target dir) may replace it.
    cp "$TARGET/$profile/examples/renewal_cost" "$bin"
  fi
  # Once natively first: the servers then hold the scripts, and neither measured run pays for
  # the first renewal's NOSCRIPT (every renewal again with the script's source).
  "$bin" "${URLS[@]}" 100 1 >/dev/null
  more=$(run "$bin" "$R2")
  fewer=$(run "$bin" "$R1")
  per=$(((more - fewer) / (LEASES * (R2 - R1))))
  printf '  %-8s %10s\n' "$profile" "$per"
done
