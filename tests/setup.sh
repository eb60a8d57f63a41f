# Sourced by examples/demo.sh, tests/run.sh, spec/run.sh and .ci/run: makes sure cargo, redis-server, spin and a
# PostgreSQL server (for the fenced-write example's test) are there. Where a server is missing
# it is installed (as root, with apt-get), or the script stops with one line saying how.

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and run this command again" >&2
  exit 1
fi

# Whether missing servers can be installed here: as root, with apt-get.
distlock_can_apt() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

# Installs Debian packages (says which on one line) without letting them start system-wide
# servers: the tests start their own.
distlock_apt_install() {
  echo "$1 not found: installing the Debian package $2" >&2
  shift
  local no_start=/usr/sbin/policy-rc.d
  local made_no_start=
  if [ ! -e "$no_start" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$no_start" && chmod +x "$no_start" && made_no_start=1
  fi
  local status=0
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || status=$?
  [ -n "$made_no_start" ] && rm -f "$no_start"
  return $status
}

if [ -z "${DISTLOCK_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  if ! distlock_can_apt || ! distlock_apt_install redis-server redis-server; then
    echo "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install redis-server, macOS: brew install redis) or set DISTLOCK_REDIS_SERVER=/path/to/redis-server" >&2
    exit 1
  fi
fi

# The test kit looks for initdb and postgres in DISTLOCK_PG_BINDIR, beside initdb on PATH, or
# in /usr/lib/postgresql/<version>/bin (where Debian puts them); so does this check.
distlock_have_postgres() {
  if [ -n "${DISTLOCK_PG_BINDIR:-}" ]; then
    [ -x "$DISTLOCK_PG_BINDIR/initdb" ] && [ -x "$DISTLOCK_PG_BINDIR/postgres" ]
    return
  fi
  local initdb dir
  if initdb=$(command -v initdb 2>/dev/null); then
    dir=$(dirname "$(readlink -f "$initdb")")
    [ -x "$dir/postgres" ] && return 0
  fi
  for dir in /usr/lib/postgresql/*/bin; do
    [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && return 0
  done
  return 1
}

if ! distlock_have_postgres; then
  if ! distlock_can_apt || ! distlock_apt_install "PostgreSQL server" postgresql ||
    ! distlock_have_postgres; then
    echo "PostgreSQL server not found (initdb, postgres; for the fenced-write example's test): install it (Debian/Ubuntu: sudo apt-get install postgresql, macOS: brew install postgresql) or set DISTLOCK_PG_BINDIR=/path/to/postgresql/bin" >&2
    exit 1
  fi
fi

# spin and a C compiler check the protocol models (spec/run.sh).
if ! command -v spin >/dev/null 2>&1; then
  if ! distlock_can_apt || ! distlock_apt_install spin spin; then
    echo "spin not found: install it (Debian/Ubuntu: sudo apt-get install spin, macOS: brew install spin) and a C compiler" >&2
    exit 1
  fi
fi
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  if ! distlock_can_apt || ! distlock_apt_install gcc gcc; then
    echo "no C compiler found (spin's verifiers are C): install gcc" >&2
    exit 1
  fi
fi
