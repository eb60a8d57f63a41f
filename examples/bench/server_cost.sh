#!/usr/bin/env bash
# Instructions redis-server spends per call (callgrind: exact and repeatable, unlike timings on
# a shared VM), for examples/bench/RESULTS.md, "Other measurements" (earlier runs: CHANGELOG.md).
#
#   bash examples/bench/server_cost.sh
#
# Each figure: a fresh redis-server under callgrind on a free port, N calls sent pipelined
# (redis-cli --pipe), minus the same server with no calls, divided by N (a few hundred apart
# from run to run: the server draws new hash seeds at each start). Needs valgrind,
# redis-server, redis-cli and python3. Takes about 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=20000
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
RELEASE=$(grep -v '^--' distlock/src/setnx/release.lua)
LIMIT="if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"
# The release before 3f6cc74: 2 keys, 4 arguments, PUBLISH every time; and as 3f6cc74 made it:
# 3 keys (lock, channel, mark), 5 arguments, PUBLISH only when marked or asked.
BEFORE="if redis.pcall('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[2], ARGV[3]) return 1 end return 0"
MARKED="if redis.pcall('get', KEYS[1]) == ARGV[1] then if redis.call('del', KEYS[1], KEYS[3]) > 1 or ARGV[5] == '1' then redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[2], ARGV[3]) end return 1 end return 0"
KEY='distlock:{bench-key-000017}'
# The lock's waited-for mark, declared as the release's second key since the keys of a lock
# were laid out so that no name reaches another's (distlock/src/key.rs).
WAITED='distlock:#waited:{bench-key-000017}'
# The release as it was before that: one key, the mark made from the lock key inside the
# script (undeclared) and the channel too.
DERIVED="if redis.pcall('get', KEYS[1]) == ARGV[1] then if redis.call('del', KEYS[1], KEYS[1] .. ':waited') > 1 or ARGV[5] == '1' then redis.call(ARGV[4] == 's' and 'spublish' or 'publish', KEYS[1] .. ':wake', ARGV[3] or '') end return 1 end return 0"
TOKEN=0123456789abcdef0123456789abcdef
# The setnx value before the process record (token and the whole holder description), and now
# (a 21-character token, the process's tag, the site's number and the time in base 36).
DESCRIBED="$TOKEN	host=vm-1234abcd	pid=123456	site=examples/bench/src/columns.rs:210:18	at=1764045000000"
SHORT="Xq3_9aZ-0PqLm2Rt7vWy1	AbCdEfGh.3.mhx2k1a0"

# requests SCRIPT SHA: writes N request pairs (or single script calls) as RESP to stdout.
requests() {
  python3 - "$@" <<'EOF'
import sys
shape, sha, n, key, *rest = sys.argv[1:]
# The release's KEYS: the lock, and for the shapes ending in 2 its waited-for mark too.
release_keys = ["1", key]
if shape.endswith("2"):
    shape = shape[:-1]
    release_keys = ["2", key, "distlock:#waited:" + key[len("distlock:"):]]
def resp(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x.encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
buf = bytearray()
for _ in range(int(n)):
    if shape == "script":      # one script that sets the lock, then releases it
        buf += resp("EVALSHA", sha, *rest)
    elif shape == "limit":     # the limit's cycle: SET NX PX, compare-and-delete
        buf += resp("SET", key, rest[0], "NX", "PX", "10000") + resp("EVALSHA", sha, "1", key, rest[0])
    elif shape == "waiter":    # distlock's cycle for a caller that waits: SET NX PX, release
        buf += resp("SET", key, rest[0], "NX", "PX", "10000") + resp("EVALSHA", sha, *release_keys, rest[0])
    else:                      # distlock's cycle for a caller that does not wait: SET NX PX GET, release
        buf += resp("SET", key, rest[0], "NX", "PX", "10000", "GET") + resp("EVALSHA", sha, *release_keys, rest[0])
sys.stdout.buffer.write(bytes(buf))
EOF
}

# instructions NAME CALLS SCRIPT SHAPE ARGS..: the server's total instruction count.
instructions() {
  local name=$1 calls=$2 script=$3 shape=$4
  shift 4
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.$calls" \
    redis-server --port "$PORT" --save '' --appendonly no >/dev/null 2>&1 &
  local server=$!
  for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done
  local sha
  sha=$(redis-cli -p "$PORT" script load "$script")
  if [ "$calls" -gt 0 ]; then
    requests "$shape" "$sha" "$calls" "$KEY" "$@" | redis-cli -p "$PORT" --pipe >/dev/null
  fi
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$server" || true
  awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$name.$calls"
}

per_call() { # NAME SCRIPT SHAPE ARGS..
  local idle busy
  idle=$(instructions "$1" 0 "$2" "$3" "${@:4}")
  busy=$(instructions "$1" "$N" "$2" "$3" "${@:4}")
  echo $(((busy - idle) / N))
}

set_first() { echo "redis.call('set',KEYS[1],ARGV[1]) $1"; }

echo "release, per call (the script sets the lock, then runs the release's body):"
echo "  limit's compare-and-delete:             $(per_call limit "$(set_first "$LIMIT")" script 1 "$KEY" "$DESCRIBED")"
echo "  limit's compare-and-delete, ${#SHORT}-byte value: $(per_call limitshortrelease "$(set_first "$LIMIT")" script 1 "$KEY" "$SHORT")"
echo "  before 3f6cc74 (2 keys, 4 arguments, PUBLISH): $(per_call before "$(set_first "$BEFORE")" script 2 "$KEY" "$KEY:wake" "$DESCRIBED" "" "" "")"
echo "  3f6cc74 (3 keys, 5 arguments, no PUBLISH): $(per_call marked "$(set_first "$MARKED")" script 3 "$KEY" "$KEY:wake" "$KEY:waited" "$DESCRIBED" "" "" "" "")"
echo "  3f6cc74, trailing empty arguments off:  $(per_call trimmed "$(set_first "$MARKED")" script 3 "$KEY" "$KEY:wake" "$KEY:waited" "$DESCRIBED")"
echo "  940a782 (1 key, 1 argument, ${#DESCRIBED}-byte value): $(per_call derivedlong "$(set_first "$DERIVED")" script 1 "$KEY" "$DESCRIBED")"
echo "  c6639ba (1 key, 1 argument, ${#SHORT}-byte value, mark made in the script): $(per_call derived "$(set_first "$DERIVED")" script 1 "$KEY" "$SHORT")"
echo "  now (2 keys: the mark declared, 1 argument, ${#SHORT}-byte value): $(per_call short "$(set_first "$RELEASE")" script 2 "$KEY" "$WAITED" "$SHORT")"
# The publish and the other-mode check as a shared prelude of local functions (as fence.lua is
# for the fence mint): what one script of every mode would carry in front of its body.
PRELUDE="local function wake(channel, id, sharded) redis.pcall(sharded and 'spublish' or 'publish', channel, id or '') end
local function other_mode(key) local kind = redis.call('type', key).ok if kind == 'hash' and redis.call('pttl', key) >= 0 then if redis.call('hexists', key, 'owner') == 1 then return 'reentrant' end return redis.call('hget', key, 'mode') or 'write' end return nil, kind end
"
PRELUDED="$PRELUDE$(echo "$RELEASE" | sed "s/redis.pcall(ARGV\\[4\\] == 's' and 'spublish' or 'publish', KEYS\\[1\\], ARGV\\[3\\] or '')/wake(KEYS[1], ARGV[3], ARGV[4] == 's')/")"
echo "  now, with a shared prelude (publish and other-mode check as local functions): $(per_call preluded "$(set_first "$PRELUDED")" script 2 "$KEY" "$WAITED" "$SHORT")"
echo "uncontended cycle, per SET + release pair:"
echo "  limit (32-byte token):                  $(per_call limitcycle "$LIMIT" limit "$TOKEN")"
echo "  limit (${#SHORT}-byte token):                  $(per_call limitshort "$LIMIT" limit "$SHORT")"
echo "  c6639ba, a caller that waits (no GET), ${#SHORT}-byte value: $(per_call derivedwaiter "$DERIVED" waiter "$SHORT")"
echo "  distlock, a caller that waits (no GET), ${#SHORT}-byte value: $(per_call waiter "$RELEASE" waiter2 "$SHORT")"
echo "  the same with the shared prelude:       $(per_call waiterpreluded "$PRELUDED" waiter2 "$SHORT")"
echo "  c6639ba, a caller that does not wait (SET .. GET), ${#SHORT}-byte value: $(per_call derivedcycle "$DERIVED" cycle "$SHORT")"
echo "  SET .. GET (a caller that does not wait):"
for value in "$TOKEN" "$SHORT" "$TOKEN	host=vm-1234" "$TOKEN	host=vm-1234abcd	pid=1" "$DESCRIBED"; do
  echo "  distlock, ${#value}-byte value:               $(per_call cycle "$RELEASE" cycle2 "$value")"
done
