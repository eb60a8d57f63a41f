//! The test binaries beside the suite are exactly those the suite's `main.rs` lists as needing
//! a process of their own, and those `docs/verification.md` gives a reason for; every module
//! file of the suite is declared in `main.rs`.

use std::collections::BTreeSet;
use std::path::Path;

/// The names in backticks that end in `.rs` or `/` in `text`, without that ending: the test
/// binaries a list names (`operations.rs`, `election/`).
fn named_binaries(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| {
            quoted
                .strip_suffix(".rs")
                .or_else(|| quoted.strip_suffix('/'))
        })
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// The test binaries in `tests/tests` other than the suite: `name.rs`, or `name/main.rs`.
fn binaries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read tests/tests")
        .map(|entry| entry.expect("an entry").path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_owned();
            let binary = if path.is_dir() {
                path.join("main.rs").is_file()
            } else {
                path.extension().is_some_and(|e| e == "rs")
            };
            (binary && name != "suite").then_some(name)
        })
        .collect()
}

/// The `mod name;` lines of `src`.
fn declared_modules(src: &str) -> BTreeSet<String> {
    src.lines()
        .filter_map(|line| line.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The module files of the suite: `name.rs` or `name/mod.rs` beside `main.rs`.
fn suite_modules(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read tests/tests/suite")
        .map(|entry| entry.expect("an entry").path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_owned();
            let module = if path.is_dir() {
                path.join("mod.rs").is_file()
            } else {
                path.extension().is_some_and(|e| e == "rs") && name != "main"
            };
            module.then_some(name)
        })
        .collect()
}

#[test]
fn the_binaries_beside_the_suite_are_the_ones_its_list_names() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(tests.join("suite/main.rs")).expect("read main.rs");
    let listed: String = main
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let present = binaries(&tests);
    assert!(present.len() > 3, "found only {present:?}");
    assert_eq!(named_binaries(&listed), present, "suite/main.rs's list");

    let verification = std::fs::read_to_string(tests.join("../../docs/verification.md"))
        .expect("read docs/verification.md");
    let reasons = verification
        .split_once("What stays a binary of its own")
        .and_then(|(_, rest)| rest.split_once("\nWhat moved"))
        .map(|(section, _)| section)
        .expect("docs/verification.md's section on the binaries of their own");
    assert_eq!(
        named_binaries(reasons),
        present,
        "docs/verification.md's reasons"
    );

    let declared = declared_modules(&main);
    assert_eq!(
        declared,
        suite_modules(&tests.join("suite")),
        "suite/main.rs's modules"
    );
}

#[test]
fn a_list_is_read_by_its_backticked_file_names() {
    let names =
        named_binaries("`operations.rs` (a recorder), `election/` and `mod common;`, `a.rs`");
    assert_eq!(
        names,
        BTreeSet::from(["operations".into(), "election".into(), "a".into()])
    );
}
