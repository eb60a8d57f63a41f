#!/usr/bin/env bash
# Instructions redis-server spends per setnx acquire script call, as the script was at each
# commit given (default: before and after the layering pass, and HEAD), for
# examples/bench/RESULTS.md ("Before and after the layering pass"). Same method as
# server_cost.sh (callgrind, N pipelined calls minus none, divided by N; a few hundred apart
# from run to run). Two shapes: a fenced acquisition that takes the lock, then DEL (S1/S2's
# `distlock fenced` path); a busy acquisition of a caller that waits (GET, PTTL, the mark).
#
#   bash examples/bench/acquire_cost.sh [COMMIT..]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-20000}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
KEY='distlock:{bench-key-000017}'
FENCE='distlock:#fence:{bench-key-000017}'
WAITED='distlock:#waited:{bench-key-000017}'
SHORT="Xq3_9aZ-0PqLm2Rt7vWy1	AbCdEfGh.3.mhx2k1a0"
script_at() { # COMMIT: fence.lua (+ held_as.lua if present) + setnx/acquire.lua
  git show "$1:distlock/src/fence.lua"
  git show "$1:distlock/src/held_as.lua" 2>/dev/null || true
  git show "$1:distlock/src/setnx/acquire.lua"
}
requests() {
  python3 - "$@" <<'PY'
import sys
shape, sha, n = sys.argv[1:4]
key, fence, waited, tok = sys.argv[4:8]
def resp(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x.encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
buf = bytearray()
for _ in range(int(n)):
    if shape == "fenced":   # taken with a fencing token, then DEL (the same for both scripts)
        buf += resp("EVALSHA", sha, "2", key, fence, tok, "10000", "0", "0", "", "", "1") + resp("DEL", key)
    elif shape == "busy":   # busy, the caller waits: GET, PTTL, mark
        buf += resp("EVALSHA", sha, "2", key, waited, tok + "x", "10000", "0", "0", "", "", "0", "1")
sys.stdout.buffer.write(bytes(buf))
PY
}
instructions() { # NAME CALLS SCRIPT SHAPE
  local name=$1 calls=$2 script=$3 shape=$4
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.$calls" \
    redis-server --port "$PORT" --save '' --appendonly no >/dev/null 2>&1 &
  local server=$!
  for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done
  local sha
  sha=$(redis-cli -p "$PORT" script load "$script")
  if [ "$shape" = busy ]; then redis-cli -p "$PORT" set "$KEY" holder px 100000000 >/dev/null; fi
  if [ "$calls" -gt 0 ]; then
    requests "$shape" "$sha" "$calls" "$KEY" "$FENCE" "$WAITED" "$SHORT" | redis-cli -p "$PORT" --pipe >/dev/null
  fi
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$server" || true
  awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name.$calls"
}
per_call() { local idle busy; idle=$(instructions "$1" 0 "$2" "$3"); busy=$(instructions "$1" "$N" "$2" "$3"); echo $(((busy - idle) / N)); }
commits=("$@")
[ ${#commits[@]} -gt 0 ] || commits=(fb4472d 0756817 HEAD)
for c in "${commits[@]}"; do
  s=$(script_at $c)
  echo "$c ($(git rev-parse --short $c)): fenced taken+DEL $(per_call f$c "$s" fenced)  busy+mark $(per_call b$c "$s" busy)"
done
