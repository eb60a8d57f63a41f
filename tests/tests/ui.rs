//! Compile-time behaviour of the lock attributes, used the way a user uses them: through the
//! `distlock` crate.
//!
//! * `ui/fail/`: one mistake per file; each `.stderr` is the exact diagnostic, which must point
//!   at the offending token and say what to do.
//! * `ui/pass/`: shapes that must keep compiling (methods, generics, patterns, axum handlers,
//!   `#![deny(warnings)]`, user types named like ours).
//!
//! Regenerate the goldens with `TRYBUILD=overwrite cargo test -p distlock-testkit --test ui`
//! and read every `.stderr` before committing it. The goldens follow rustc's wording, so they
//! are checked on the toolchain CI pins; a compiler upgrade may need a regeneration.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    cases.compile_fail("ui/fail/*.rs");
}
