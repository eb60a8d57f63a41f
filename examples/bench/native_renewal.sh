#!/usr/bin/env bash
# What one watchdog renewal costs on Valkey 8.1, renewed natively (`SET .. IFEQ .. PX`) and by
# the extend script, for examples/bench/RESULTS.md, "Native renewal on Valkey 8.1".
#
#   bash examples/bench/native_renewal.sh [LOCKS]     # default 1,000 locks
#
# The same server binary for both: the script side is started with `--rename-command COMMAND
# ""`, so the client's probe (`COMMAND DOCS SET`) finds no `SET .. IFEQ` and renews by script
# (as `bench --no-native` does). Figures:
# - instructions per renewal (callgrind; user space only), of the server and of the client, by
#   difference: runs of examples/native_renewal.rs holding LOCKS locks (ttl 30 s, renewed every
#   second: valgrind slows the server or the client 50-fold, and a 3 s ttl would lapse) for W1 and for W2
#   seconds, minus the same two runs with the watchdog off (the idle work of W2 - W1 seconds:
#   the server's cron, the runtime's timers), divided by the renewals of W2 - W1 seconds;
# - from runs without valgrind (RUNS of each, alternated; 10,000 locks): commands, bytes in and
#   out per renewal, the server's time per call (`INFO commandstats` usec) and CPU per
#   renewal, the client's CPU per renewal. Times depend on the load (printed).
# Needs valgrind, python3 and the Valkey 8.1 binary (tests/matrix.sh fetches it into
# target/servers/valkey-8.1). Takes about 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOCKS=${1:-1000}
W1=${W1:-4}
W2=${W2:-16}
RUNS=${RUNS:-2}
TARGET=${CARGO_TARGET_DIR:-target}
VALKEY=${VALKEY:-$TARGET/servers/valkey-8.1/bin/valkey-server}
CLI=${CLI:-$(dirname "$VALKEY")/valkey-cli}
[ -x "$VALKEY" ] || { echo "no $VALKEY: bash tests/matrix.sh valkey-8.1 fetches it" >&2; exit 1; }
cargo build --quiet --release -p distlock-bench --example native_renewal
BIN="$TARGET/release/examples/native_renewal"
OUT=$(mktemp -d)
PORTS=()
cleanup() {
  for port in "${PORTS[@]}"; do "$CLI" -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$OUT"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 300); do "$CLI" -p "$1" ping >/dev/null 2>&1 && return; sleep 0.2; done; echo "valkey-server on $1 did not start" >&2; exit 1; }
total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }
field() { awk -v f="$1" '{for (i = 1; i < NF; i++) if ($i == f) {print $(i + 1); exit}}' <<<"$2"; }
# Server arguments of each side; `idle` is the native server with nothing renewed.
server_args() {
  case $1 in
  script) echo "--rename-command COMMAND \"\"" ;;
  *) echo "" ;;
  esac
}
tool_args() { [ "$1" = idle ] && echo "--watchdog off" || echo "--ttl-ms 30000 --renew-every-ms 1000"; }

# start SIDE [valgrind...]: a fresh server for SIDE on a free port: sets PORT and PID.
start() {
  local side=$1
  shift
  PORT=$(free_port)
  eval "$* \"$VALKEY\" --port $PORT --save '' --appendonly no $(server_args "$side")" \
    >/dev/null 2>&1 &
  PID=$!
  PORTS+=("$PORT")
  wait_ready "$PORT"
}

# stop: shuts the server down and waits for it (and its callgrind output).
stop() {
  "$CLI" -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$PID" || true
}

# server SIDE WINDOW: the server's instruction total (under callgrind) for a run; also writes
# the tool's line to $OUT/line.
server() {
  local side=$1 window=$2
  start "$side" valgrind --tool=callgrind --callgrind-out-file="$OUT/server.$side.$window"
  # shellcheck disable=SC2046
  "$BIN" --url "redis://127.0.0.1:$PORT/" --locks "$LOCKS" --window-s "$window" \
    $(tool_args "$side") >"$OUT/line"
  stop
  total "$OUT/server.$side.$window"
}

# client SIDE WINDOW: the client's instruction total (under callgrind) for a run against a
# native server; also writes the tool's line to $OUT/line.
client() {
  local side=$1 window=$2
  start "$side"
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$OUT/client.$side.$window" \
    "$BIN" --url "redis://127.0.0.1:$PORT/" --locks "$LOCKS" --window-s "$window" \
    $(tool_args "$side") >"$OUT/line" 2>/dev/null
  stop
  total "$OUT/client.$side.$window"
}

renewals() { echo $(($(field renew_set "$1") + $(field renew_evalsha "$1"))); }

echo "instructions per renewal ($LOCKS locks, ttl 30 s renewed every second, windows of $W1 and $W2 s, idle subtracted):"
printf '  %-8s %10s %10s %14s\n' side server client "renewals (W2-W1)"
declare -A S C R
for side in idle native script; do
  for w in "$W1" "$W2"; do
    S[$side.$w]=$(server "$side" "$w")
    R[$side.$w]=$(renewals "$(cat "$OUT/line")")
    held=$(field held "$(cat "$OUT/line")")
    [ "${held%/*}" = "${held#*/}" ] || echo "  ($side, $w s, server under callgrind: held $held)"
    C[$side.$w]=$(client "$side" "$w")
    held=$(field held "$(cat "$OUT/line")")
    [ "${held%/*}" = "${held#*/}" ] || echo "  ($side, $w s, client under callgrind: held $held)"
  done
done
idle_s=$((S[idle.$W2] - S[idle.$W1]))
idle_c=$((C[idle.$W2] - C[idle.$W1]))
for side in native script; do
  r=$((R[$side.$W2] - R[$side.$W1]))
  s=$(((S[$side.$W2] - S[$side.$W1] - idle_s) / r))
  c=$(((C[$side.$W2] - C[$side.$W1] - idle_c) / r))
  printf '  %-8s %10s %10s %14s\n' "$side" "$s" "$c" "$r"
done
echo "  (idle over $((W2 - W1)) s: server $idle_s, client $idle_c instructions)"

echo "per renewal without valgrind (10,000 locks, ttl 3 s, 10 s windows; load $(cut -d' ' -f1-3 /proc/loadavg)):"
for run in $(seq "$RUNS"); do
  for side in native script; do
    start "$side"
    line=$("$BIN" --url "redis://127.0.0.1:$PORT/" --locks 10000 --window-s 10)
    stop
    python3 - "$side" "$run" "$line" <<'EOF'
import sys
side, run, line = sys.argv[1:]
w = line.split()
f = {w[i]: w[i + 1] for i in range(0, len(w) - 1, 2)}
n = float(f["renew_set"]) + float(f["renew_evalsha"])
cmds = n + float(f["inner_calls"])
usec = float(f["usec_set"]) + float(f["usec_evalsha"])
print(f"  {side:<7} run {run}: {n:.0f} renewals, {cmds / n:.2f} commands each (scripts' calls included), "
      f"{float(f['in_bytes']) / n:.1f} bytes in, {float(f['out_bytes']) / n:.1f} out, "
      f"server {usec / n:.2f} µs in the call (commandstats), {float(f['server_cpu_us']) / n:.2f} µs CPU, "
      f"client {float(f['client_cpu_us']) / n:.2f} µs CPU, {float(f['round_trips'])} round trips, held {f['held']}")
EOF
  done
done
