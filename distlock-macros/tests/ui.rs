//! Compile-time diagnostics of the lock attributes, one case per file.
//! Regenerate the goldens with `TRYBUILD=overwrite cargo test -p distlock-macros --test ui`
//! and read every `.stderr`: each must point at the offending token and say what to do.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
