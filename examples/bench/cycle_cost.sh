#!/usr/bin/env bash
# Instructions per lock cycle (acquire + release), in the client and in redis-server, for
# distlock and the bench's `limit` side by side (callgrind: exact and repeatable, unlike
# timings on a shared VM); the figures behind S2's (and S1's) cost rows, for
# examples/bench/RESULTS.md.
#
#   bash examples/bench/cycle_cost.sh [TASKS]   # 32: S2's shape (default); 0: S1's (one loop)
#
# Both sides by difference: the same run with C1 and with C2 cycles per loop (env; default 50
# and 250 per task in S2's shape, 200 and 2000 in S1's), the instruction totals subtracted and divided by the extra cycles, so start-up,
# connecting and the server's idle ticks drop out. Client: examples/client_work under
# callgrind (all its threads: the runtime, the I/O driver, the tasks) against a plain
# redis-server. Server: a redis-server under callgrind, examples/client_work run natively
# against it. User-space instructions only (callgrind does not see the kernel). Needs
# valgrind, redis-server, redis-cli and python3; takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
TASKS=${1:-32}
C1=${C1:-$((TASKS == 0 ? 200 : 50))}
C2=${C2:-$((TASKS == 0 ? 2000 : 250))}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --quiet --release -p distlock-bench --example client_work
BIN="$TARGET/release/examples/client_work"
OUT=$(mktemp -d)
SERVERS=()
cleanup() {
  for port in "${SERVERS[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$OUT"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 150); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.2; done; echo "redis-server on $1 did not start" >&2; exit 1; }
total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }
# Cycles a run does: one loop in S1's shape, TASKS loops in S2's.
loops=$((TASKS == 0 ? 1 : TASKS))

# client WHICH CYCLES: the client's instruction total for a run against the plain server.
client() {
  valgrind --tool=callgrind --callgrind-out-file="$OUT/client.$1.$2" \
    "$BIN" --url "redis://127.0.0.1:$PLAIN/" --cycles "$2" "$1" 0 "$TASKS" >/dev/null 2>&1
  total "$OUT/client.$1.$2"
}

# server WHICH CYCLES: a fresh redis-server's instruction total for a native run against it.
server() {
  local port
  port=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$OUT/server.$1.$2" \
    redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  local pid=$!
  wait_ready "$port"
  "$BIN" --url "redis://127.0.0.1:$port/" --cycles "$2" "$1" 0 "$TASKS" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  total "$OUT/server.$1.$2"
}

PLAIN=$(free_port)
redis-server --port "$PLAIN" --save '' --appendonly no >/dev/null 2>&1 &
SERVERS+=("$PLAIN")
wait_ready "$PLAIN"

extra=$((loops * (C2 - C1)))
echo "instructions per cycle ($([ "$TASKS" = 0 ] && echo "S1's shape: one loop" || echo "S2's shape: $TASKS tasks, distinct keys"); $C2 - $C1 cycles per loop):"
printf '  %-10s %12s %12s\n' column client server
for which in distlock limit; do
  c=$((($(client "$which" "$C2") - $(client "$which" "$C1")) / extra))
  s=$((($(server "$which" "$C2") - $(server "$which" "$C1")) / extra))
  printf '  %-10s %12s %12s\n' "$which" "$c" "$s"
done
