#!/usr/bin/env bash
# The demo: several workers contend for locks on a redis-server the demo starts itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup.sh
cargo run --quiet --release -p distlock-examples --bin demo
