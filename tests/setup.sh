# Sourced by examples/demo.sh, tests/run.sh, spec/run.sh and .ci/run: makes sure cargo,
# redis-server and spin (the model checker of spec/) are there. Where redis-server or spin is
# missing it is installed (as root, with apt-get), or the script stops with one line saying how.

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and run this command again" >&2
  exit 1
fi

# Installs the Debian package $1 (as root, with apt-get); false where that is not possible.
distlock_apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$1 not found: installing the Debian package $1" >&2
    # Keep the package from starting a system-wide server: the tests start their own.
    local no_start=/usr/sbin/policy-rc.d made=
    if [ ! -e "$no_start" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$no_start" && chmod +x "$no_start" && made=1
    fi
    local status=0
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "${DISTLOCK_APT_UPDATED:-}" ]; then
      apt-get update -qq >/dev/null || status=$?
      DISTLOCK_APT_UPDATED=1
    fi
    [ "$status" = 0 ] && { apt-get install -y -qq "$1" >/dev/null || status=$?; }
    [ -n "$made" ] && rm -f "$no_start"
    return "$status"
  fi
  return 1
}

if [ -z "${DISTLOCK_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  if ! distlock_apt_install redis-server; then
    echo "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install redis-server, macOS: brew install redis) or set DISTLOCK_REDIS_SERVER=/path/to/redis-server" >&2
    exit 1
  fi
fi

# spin and a C compiler check the protocol models (spec/run.sh).
if ! command -v spin >/dev/null 2>&1; then
  if ! distlock_apt_install spin; then
    echo "spin not found: install it (Debian/Ubuntu: sudo apt-get install spin, macOS: brew install spin) and a C compiler" >&2
    exit 1
  fi
fi
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  if ! distlock_apt_install gcc; then
    echo "no C compiler found (spin's verifiers are C): install gcc" >&2
    exit 1
  fi
fi
