//! The demos run to the end on a `redis-server` of their own (each starts one), so the README's
//! `bash examples/demo.sh` and `cargo run --bin macro_demo` keep working.

use std::process::Command;

fn run(binary: &str, last_line: &str) {
    let out = Command::new(binary).output().expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{binary} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(last_line), "{binary} printed:\n{stdout}");
}

#[test]
fn demo_runs_to_the_end() {
    run(
        env!("CARGO_BIN_EXE_demo"),
        "done; the demo's redis-server stops now",
    );
}

#[test]
fn macro_demo_runs_to_the_end() {
    run(
        env!("CARGO_BIN_EXE_macro_demo"),
        "lease on lock `export:3` was lost",
    );
}
