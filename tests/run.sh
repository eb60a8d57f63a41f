#!/usr/bin/env bash
# The whole test suite. Every lock test runs against real redis-server processes that the
# test kit starts on free loopback ports and stops afterwards; nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup.sh
# The examples as users run them (examples/tests/crate_examples/ runs each): `cargo test
# --all-targets` builds them only as test harnesses.
cargo build --examples
cargo test --all-targets "$@" -- --skip lost_reply_tier
cargo test --doc
# The `testing` feature as an application's dev-dependency sees it: distlock alone, without the
# features the rest of the workspace turns on (its own tests, the axum worked example, the
# guide's doc tests).
cargo test -p distlock --features testing,axum
# The lost-reply tier (every mode behind a proxy that loses 2 % of the replies), run on its
# own so its figures are shown.
cargo test --test lost_replies -- --nocapture
