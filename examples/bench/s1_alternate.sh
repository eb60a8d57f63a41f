#!/usr/bin/env bash
# S1 before and after a change, alternated on one machine: the bench's S1-S4 and the
# stand-alone S1 harness (examples/s1_harness.rs) in the two runtime shapes, each binary
# right after the other, RUNS times; prints one line per run (S1 p50 ÷ limit with the PING
# column beside it, S2 ÷ limit, S3 ÷ limit, S4 ÷ limit-quorum, the load) for
# examples/bench/RESULTS.md.
#
#   bash examples/bench/s1_alternate.sh BEFORE_DIR AFTER_DIR [RUNS] [ROUNDS]
#
# Each DIR holds the `bench` and `s1_harness` binaries of one commit, e.g. for the commit
# checked out:  cargo build --release -p distlock-bench --bin bench --example s1_harness &&
#   mkdir -p /tmp/after && cp target/release/bench target/release/examples/s1_harness /tmp/after/
# RUNS defaults to 3, ROUNDS (the bench's --rounds) to 5. Reports go to $OUT (default
# /tmp/s1-alternate), one directory per run and binary.
set -euo pipefail
BEFORE=${1:?before dir}
AFTER=${2:?after dir}
RUNS=${3:-3}
ROUNDS=${4:-5}
OUT=${OUT:-/tmp/s1-alternate}
mkdir -p "$OUT"

summary() {
  python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1] + "/bench.json"))
med = lambda xs: sorted(xs)[len(xs) // 2]
def fig(s, col, key):
    rounds = d["scenarios"].get(s, {}).get(col, {}).get("rounds", [])
    xs = [r[key] for r in rounds if key in r]
    return med(xs) if xs else float("nan")
ping = med(d["ping_p50_us"])
s1d, s1l = fig("S1", "distlock", "p50_us"), fig("S1", "limit", "p50_us")
s2k, s3k = "cycles_per_s", "acq_per_s"
s4d, s4l = fig("S4", "distlock", "p50_us"), fig("S4", "limit", "p50_us")
print(f"PING p50 {ping:.1f} µs, 2 PINGs {2 * ping / s1l:.2f}× limit | S1 p50 {s1d:.1f} / {s1l:.1f} µs = {s1d / s1l:.3f}× limit"
      f" | S2 {fig('S2', 'distlock', s2k) / fig('S2', 'limit', s2k):.2f}× | S3 {fig('S3', 'distlock', s3k) / fig('S3', 'limit', s3k):.2f}×"
      f" | S4 {s4d / s4l:.2f}× | load {d['meta']['load_average_before']}")
EOF
}

for run in $(seq "$RUNS"); do
  for which in before after; do
    dir=$([ "$which" = before ] && echo "$BEFORE" || echo "$AFTER")
    out="$OUT/run$run-$which"
    "$dir/bench" --only S1,S2,S3,S4 --rounds "$ROUNDS" --out "$out" >/dev/null 2>"$out.log" || { tail "$out.log"; exit 1; }
    echo "run $run $which, bench: $(summary "$out")"
    for shape in spawn main; do
      echo "run $run $which, harness $shape: $("$dir/s1_harness" --runtime "$shape" --cycles 4000 | awk '/distlock/ {printf "distlock p50 %s µs %s limit, ", $3, $5} /PINGs/ {printf "2 PINGs %s µs %s", $4, $6}')"
    done
  done
done
