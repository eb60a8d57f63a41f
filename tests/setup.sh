# Sourced by examples/demo.sh and tests/run.sh: makes sure cargo and redis-server are there.
# Where redis-server is missing it is installed (as root, with apt-get), or the script stops
# with one line saying how.

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and run this command again" >&2
  exit 1
fi

if [ -z "${DISTLOCK_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "redis-server not found: installing the Debian package redis-server" >&2
    # Keep the package from starting a system-wide server: the tests start their own.
    no_start=/usr/sbin/policy-rc.d
    if [ ! -e "$no_start" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$no_start" && chmod +x "$no_start"
      trap 'rm -f "$no_start"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null
  else
    echo "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install redis-server, macOS: brew install redis) or set DISTLOCK_REDIS_SERVER=/path/to/redis-server" >&2
    exit 1
  fi
fi
