//! Compile-time behaviour of the lock attributes, used the way a user uses them: through the
//! `distlock` crate.
//!
//! `fail/`: one mistake per file; each `.stderr` is the exact diagnostic, which must point at
//! the offending token and say what to do. The shapes that must keep compiling (methods,
//! generics, patterns, axum handlers, `#![deny(warnings)]`, user types named like ours) are
//! the test kit's `tests/pass/`, each a crate of its own built by `cargo test` and `cargo
//! clippy`.
//!
//! Regenerate the goldens with `TRYBUILD=overwrite cargo test -p distlock-ui --test ui` and
//! read every `.stderr` before committing it. The goldens follow rustc's wording, so they are
//! checked on the toolchain CI pins; a compiler upgrade may need a regeneration.

#[test]
fn ui() {
    // Only compile-fail cases: trybuild then checks (`cargo check`) instead of building, and
    // its project needs no code generation at all.
    trybuild::TestCases::new().compile_fail("fail/*.rs");
}
