#!/usr/bin/env bash
# Model-checks the lock protocol (see spec/README.md): every model with spin, each run bounded.
#
#   bash spec/run.sh          the CI runs (each well under a minute; a few minutes in all)
#   bash spec/run.sh --long   larger bounds: 2 faults, 3 clients, liveness on the full models
#                             (memory up to 6 GB; the 3-client setnx run alone takes well over
#                             10 minutes)
#
# Three kinds of run, each one line of output:
#   verified   must finish the full search with 0 errors;
#   finding    the code as it is today against a property it breaks: must produce the
#              counterexample (see "Findings" in spec/README.md) until the Rust is fixed;
#   control    a negative control (an older protocol behind a -D flag): must produce a
#              counterexample of the named property, or the model proves nothing.
# Anything else (an error where none may be, none where one must be, the wrong property, a
# search cut short by memory or depth) is a surprise: the script then exits non-zero.
set -uo pipefail
cd "$(dirname "$0")"
spec=$(pwd)

long=0
case "${1:-}" in
  --long) long=1 ;;
  "") ;;
  *) echo "usage: bash spec/run.sh [--long]" >&2; exit 2 ;;
esac

if ! command -v spin >/dev/null 2>&1; then
  . ../tests/setup.sh
fi
cc=$(command -v gcc || command -v cc) || { echo "no C compiler: install gcc" >&2; exit 1; }

if [ "$long" = 1 ]; then memlim=6144; else memlim=1024; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/distlock-spec.XXXXXX")
trap 'rm -rf "$work"' EXIT
surprises=0

# The text of each property's assertion, as pan prints it (to tell which one failed).
prop_pattern() {
  case "$1" in
    mutex) echo 'gst\[' ;;                  # a guard says held (G_HELD) beside another
    fence) echo 'ctr>maxtok' ;;             # a token not above every earlier one
    reentry) echo 'r==0' ;;                 # a re-entry answered busy
    settles) echo 'acceptance cycle' ;;     # the liveness claim
    *) echo "$1" ;;
  esac
}

# run KIND NAME MODEL PROPERTY [-Dflags...] [-- pan args]
# KIND: verified | finding | control | live (a verified liveness run: never claim, weak
# fairness). PROPERTY: what a finding or control must break ('-' for verified runs).
run() {
  local kind=$1 name=$2 model=$3 prop=$4
  shift 4
  local flags=() panargs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; panargs=("$@"); }
  local d="$work/$name"
  mkdir -p "$d" && cp "$spec"/*.pml "$d"/
  local start end secs line
  start=$(date +%s.%N)
  local ccflags=(-O2 -w "-DMEMLIM=$memlim") mode=()
  if [ "$kind" = live ]; then
    flags=(-DLIVE "${flags[@]}")
    ccflags+=(-DNFAIR=3)
    mode=(-a -f)
  else
    ccflags+=(-DSAFETY)
  fi
  [ "$long" = 1 ] && ccflags+=(-DCOLLAPSE)
  if ! (cd "$d" && spin -a "${flags[@]}" "$model" >spin.out 2>&1 &&
        "$cc" "${ccflags[@]}" -o pan pan.c >cc.out 2>&1); then
    echo "SURPRISE  $name: the model does not compile (${flags[*]})"
    cat "$d/spin.out" "$d/cc.out" 2>/dev/null | head -20
    surprises=$((surprises + 1))
    return
  fi
  (cd "$d" && ./pan "${mode[@]}" -m200000 "${panargs[@]}" >pan.out 2>&1)
  end=$(date +%s.%N)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  local out="$d/pan.out" errors states depth_cut mem_cut first
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  states=$(awk '/states, stored/ { print $1; exit }' "$out")
  depth_cut=$(grep -c "max search depth too small" "$out")
  mem_cut=$(grep -c "reached -DMEMLIM\|out of memory" "$out")
  first=$(grep -m1 -E "^pan:1: |acceptance cycle \(at depth" "$out")
  line=$(printf '%-9s %-22s %10s states %6ss' "$kind" "$name" "${states:-?}" "$secs")
  case "$kind" in
    verified|live)
      if [ "${errors:-x}" = 0 ] && [ "$depth_cut" = 0 ] && [ "$mem_cut" = 0 ]; then
        echo "ok        $line  0 errors"
      else
        echo "SURPRISE  $line  errors=${errors:-?} depth-cut=$depth_cut memory-cut=$mem_cut"
        [ -n "$first" ] && echo "          $first"
        echo "          replay: cd $spec && spin -t -p -g ${flags[*]} $model  (trail kept in $d)"
        trap - EXIT
        surprises=$((surprises + 1))
        return
      fi
      ;;
    finding|control)
      local pat
      pat=$(prop_pattern "$prop")
      if [ "${errors:-0}" -ge 1 ] && grep -m1 -E "^pan:1: |acceptance cycle" "$out" | grep -q -- "$pat"; then
        echo "ok        $line  counterexample: $prop"
      else
        echo "SURPRISE  $line  expected a counterexample of '$prop', got errors=${errors:-?}"
        [ -n "$first" ] && echo "          $first"
        surprises=$((surprises + 1))
      fi
      ;;
  esac
  rm -rf "$d"
}

# The protocol with the two proposed fixes of the findings (spec/README.md): every property
# holds. FIX_GIVE_BACK: lock.rs draws a new id after giving back a late grant;
# FIX_READ_RETRY: read_acquire.lua renews the reader's lease when it finds its own read.
FIX=(-DFIX_GIVE_BACK)
RWFIX=(-DFIX_GIVE_BACK -DFIX_READ_RETRY)

if [ "$long" = 0 ]; then
  run verified setnx            setnx.pml     - "${FIX[@]}"
  run verified setnx-restart    setnx.pml     - "${FIX[@]}" -DRESTART
  run live     setnx-settles    setnx.pml     - "${FIX[@]}" -DONE_FULL -DWATT=1
  run verified reentrant        reentrant.pml - "${FIX[@]}"
  run live     reentrant-settles reentrant.pml - "${FIX[@]}" -DMAXATT=1 -DFAULTS=0
  run verified rwlock           rwlock.pml    - "${RWFIX[@]}"
  run live     rwlock-settles   rwlock.pml    - "${RWFIX[@]}" -DMAXATT=1 -DFAULTS=0
  run verified redlock          redlock.pml   -
else
  run verified setnx            setnx.pml     - "${FIX[@]}" -DFAULTS=2
  run verified setnx-3clients   setnx.pml     - "${FIX[@]}" -DNC=3 -DONE_FULL
  run verified setnx-restart    setnx.pml     - "${FIX[@]}" -DRESTART -DFAULTS=2
  run live     setnx-settles    setnx.pml     - "${FIX[@]}"
  run verified reentrant        reentrant.pml - "${FIX[@]}" -DFAULTS=2
  run live     reentrant-settles reentrant.pml - "${FIX[@]}"
  run verified rwlock           rwlock.pml    - "${RWFIX[@]}" -DFAULTS=2
  run live     rwlock-settles   rwlock.pml    - "${RWFIX[@]}" -DMAXATT=1
  run verified redlock          redlock.pml   - -DFAULTS=2
fi

# Findings: the code as it is today (no FIX flag) breaks these; see spec/README.md.
run finding  give-back-setnx     setnx.pml     mutex
run finding  give-back-reentrant reentrant.pml mutex
run finding  read-retry-rwlock   rwlock.pml    mutex   -DFIX_GIVE_BACK -DNO_REENTRY_CHECK
run finding  read-retry-reentry  rwlock.pml    reentry -DFIX_GIVE_BACK

# Negative controls: the protocol before the fault issue's fixes must fail.
run control  old-release-reentrant reentrant.pml mutex "${FIX[@]}" -DOLD_RELEASE
run control  old-release-rwlock    rwlock.pml    mutex "${RWFIX[@]}" -DOLD_RELEASE
run control  old-extend-setnx      setnx.pml     mutex "${FIX[@]}" -DOLD_EXTEND
run control  old-extend-reentrant  reentrant.pml mutex "${FIX[@]}" -DOLD_EXTEND
run control  old-restart-guard     redlock.pml   mutex -DOLD_RESTART_GUARD
run control  old-fence             setnx.pml     fence "${FIX[@]}" -DRESTART -DOLD_FENCE

if [ "$surprises" -gt 0 ]; then
  echo "spec: $surprises surprise(s)" >&2
  exit 1
fi
echo "spec: every model as expected"
