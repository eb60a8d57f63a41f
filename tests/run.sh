#!/usr/bin/env bash
# The whole test suite. Every lock test runs against real redis-server processes that the
# test kit starts on free loopback ports and stops afterwards; nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup.sh
cargo test --all-targets "$@"
cargo test --doc
