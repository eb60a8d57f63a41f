#!/usr/bin/env bash
# The long fuzzing run: every `cargo fuzz` target for the given number of seconds each
# (default 60). Needs cargo-fuzz (installed here if missing) and nightly compiler features,
# which RUSTC_BOOTSTRAP=1 unlocks on a stable toolchain.
#
#   fuzz/run.sh            # 60 s per target
#   fuzz/run.sh 600        # 10 min per target
#   SANITIZER=none fuzz/run.sh   # without AddressSanitizer (faster; the code is safe Rust)
#
# Each target starts from its committed seeds (fuzz/seeds/<target>) and crash reproducers
# (fuzz/regressions/<target>); new corpus entries go to fuzz/corpus/<target> (not committed).
# A crash stops the run and leaves its input in fuzz/artifacts/<target>/: fix the bug, add a
# unit test, and copy the input to fuzz/regressions/<target>/ so `cargo test` replays it.
set -euo pipefail

seconds="${1:-60}"
sanitizer="${SANITIZER:-address}"
cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
cargo fuzz build -s "$sanitizer"
for target in $targets; do
    mkdir -p "corpus/$target" "seeds/$target" "regressions/$target"
    echo "== $target: ${seconds}s"
    cargo fuzz run -s "$sanitizer" "$target" "corpus/$target" "seeds/$target" "regressions/$target" \
        -- -max_total_time="$seconds" -print_final_stats=1
done
