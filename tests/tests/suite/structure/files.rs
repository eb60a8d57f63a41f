//! The file-level rules over the whole workspace (every crate, its tests, examples and bench,
//! the fuzz targets): no Rust file over 600 lines, no import cycle between files.
//!
//! Imports are the paths that start with `crate::`, `super::` or `self::` in code (comments and
//! literals left out), grouped `use super::{a, b::{c, d}}` read element by element. A path
//! resolves to the deepest file it names within its crate's source tree (the directory of the
//! nearest `lib.rs` or `main.rs`); a parent naming its own child module is not an edge, so a
//! `mod.rs` and the children that `use super::*` form none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest a Rust file may be.
pub(super) const MAX_LINES: usize = 600;

/// Every `.rs` file under `root`, by its path relative to `root`, with its source. Build
/// output (`target`) and hidden directories are left out.
pub(super) fn workspace_sources(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(root, &path, out);
                }
            } else if name.ends_with(".rs") {
                let src = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let rel = path
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_path_buf();
                out.insert(rel, src);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// `src` with its comments and the contents of its string and char literals removed (a URL's
/// `//` or a `crate::` in a message is not code).
pub(super) fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            chars.get(start + hashes) == Some(&'"')
        } {
            // A raw string: ends at a quote followed by as many `#` as it opened with.
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            i = start + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal (a lifetime has no closing quote).
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Punct(&'static str),
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
            continue;
        }
        i += 1;
        out.push(match c {
            ':' if chars.get(i) == Some(&':') => {
                i += 1;
                Token::Punct("::")
            }
            '{' => Token::Punct("{"),
            '}' => Token::Punct("}"),
            ',' => Token::Punct(","),
            '*' => Token::Punct("*"),
            c if c.is_whitespace() => continue,
            _ => Token::Other,
        });
    }
    out
}

/// The paths of the use tree that starts at `at`, and where it ends.
fn use_tree(tokens: &[Token], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    loop {
        match tokens.get(at) {
            Some(Token::Word(word)) => {
                segments.push(word.clone());
                at += 1;
            }
            Some(Token::Punct("{")) => {
                at += 1;
                let mut paths = Vec::new();
                while at < tokens.len() && tokens[at] != Token::Punct("}") {
                    let (inner, end) = use_tree(tokens, at);
                    paths.extend(
                        inner
                            .into_iter()
                            .map(|tail| [segments.clone(), tail].concat()),
                    );
                    at = end;
                    // `as name`, or anything else up to the next element.
                    while at < tokens.len()
                        && !matches!(tokens[at], Token::Punct(",") | Token::Punct("}"))
                    {
                        at += 1;
                    }
                    if tokens.get(at) == Some(&Token::Punct(",")) {
                        at += 1;
                    }
                }
                return (paths, at + 1);
            }
            Some(Token::Punct("*")) => return (vec![segments], at + 1),
            _ => return (vec![segments], at),
        }
        if tokens.get(at) != Some(&Token::Punct("::")) {
            return (vec![segments], at);
        }
        at += 1;
    }
}

/// A path that starts at `crate`, `super` or `self`, and the inline modules (`mod tests { .. }`)
/// it is written in, outermost first.
#[derive(Debug)]
pub(super) struct LocalPath {
    pub(super) inline: Vec<String>,
    pub(super) path: Vec<String>,
}

/// Every path in `src` that starts at `crate`, `super` or `self`, one per element of a group.
pub(super) fn local_paths(src: &str) -> Vec<LocalPath> {
    let tokens = tokens(&code_only(src));
    let mut paths = Vec::new();
    let mut depth = 0;
    let mut inline: Vec<(String, usize)> = Vec::new();
    for at in 0..tokens.len() {
        match &tokens[at] {
            Token::Punct("{") => {
                depth += 1;
                if let (Some(Token::Word(module)), Some(Token::Word(keyword))) = (
                    at.checked_sub(1).map(|i| &tokens[i]),
                    at.checked_sub(2).map(|i| &tokens[i]),
                ) {
                    if keyword == "mod" {
                        inline.push((module.clone(), depth));
                    }
                }
            }
            Token::Punct("}") => {
                if inline.last().is_some_and(|(_, opened)| *opened == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Word(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tokens.get(at + 1) == Some(&Token::Punct("::"))
                    && (at == 0 || tokens[at - 1] != Token::Punct("::")) =>
            {
                let modules: Vec<String> = inline.iter().map(|(name, _)| name.clone()).collect();
                paths.extend(use_tree(&tokens, at).0.into_iter().map(|path| LocalPath {
                    inline: modules.clone(),
                    path,
                }));
            }
            _ => {}
        }
    }
    paths
}

/// The module path `path` names, seen from the module `here` (`crate::a`, `super::b`,
/// `self::c`, with `self` in a group dropped).
pub(super) fn absolute(here: &[String], path: &[String]) -> Vec<String> {
    let mut named: Vec<String> = Vec::new();
    for (i, segment) in path.iter().enumerate() {
        match segment.as_str() {
            "crate" if i == 0 => {}
            "self" if i == 0 => named = here.to_vec(),
            "super" if i == 0 || path[..i].iter().all(|s| s == "super") => {
                if i == 0 {
                    named = here.to_vec();
                }
                named.pop();
            }
            "self" => {}
            _ => named.push(segment.clone()),
        }
    }
    named
}

/// The directory of a file's crate source tree (the nearest holding a `lib.rs` or `main.rs`)
/// and the file's module path in it. A file in no such tree is a tree of its own.
fn module_of(file: &Path, sources: &BTreeMap<PathBuf, String>) -> (PathBuf, Vec<String>) {
    let dir = file.parent().unwrap_or(Path::new(""));
    let root = dir.ancestors().find(|d| {
        sources.contains_key(&d.join("lib.rs")) || sources.contains_key(&d.join("main.rs"))
    });
    let Some(root) = root else {
        return (file.to_path_buf(), Vec::new());
    };
    let mut module: Vec<String> = file
        .strip_prefix(root)
        .expect("under its root")
        .with_extension("")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if module.len() == 1 && matches!(module[0].as_str(), "lib" | "main") {
        module.clear();
    } else if module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    (root.to_path_buf(), module)
}

/// The file each file imports from, by the rules above.
pub(super) fn file_imports(
    sources: &BTreeMap<PathBuf, String>,
) -> BTreeMap<&Path, BTreeSet<&Path>> {
    let modules: BTreeMap<&Path, (PathBuf, Vec<String>)> = sources
        .keys()
        .map(|file| (file.as_path(), module_of(file, sources)))
        .collect();
    let files: BTreeMap<(&Path, &[String]), &Path> = modules
        .iter()
        .map(|(file, (root, module))| ((root.as_path(), module.as_slice()), *file))
        .collect();
    let mut edges = BTreeMap::new();
    for (file, src) in sources {
        let (root, here) = &modules[file.as_path()];
        let mut targets = BTreeSet::new();
        for LocalPath { inline, path } in local_paths(src) {
            let named = absolute(&[here.clone(), inline].concat(), &path);
            let target = (0..=named.len())
                .rev()
                .find_map(|n| files.get(&(root.as_path(), &named[..n])));
            if let Some(&target) = target {
                let there = &modules[target].1;
                let own_child = there.len() > here.len() && there.starts_with(here);
                if target != file.as_path() && !own_child {
                    targets.insert(target);
                }
            }
        }
        edges.insert(file.as_path(), targets);
    }
    edges
}

/// Each file that imports, through others, from itself, with one such chain.
pub(super) fn cycles<'a>(edges: &BTreeMap<&'a Path, BTreeSet<&'a Path>>) -> Vec<String> {
    let mut found = Vec::new();
    for &start in edges.keys() {
        // Depth-first from `start`, remembering how each file was reached.
        let mut came_from: BTreeMap<&Path, &Path> = BTreeMap::new();
        let mut stack = vec![start];
        'search: while let Some(file) = stack.pop() {
            for &next in edges.get(file).into_iter().flatten() {
                if next == start {
                    let mut chain = vec![file];
                    while let Some(&before) = came_from.get(chain.last().expect("not empty")) {
                        chain.push(before);
                    }
                    chain.reverse();
                    let names: Vec<String> =
                        chain.iter().map(|f| f.display().to_string()).collect();
                    found.push(format!("{} -> {}", names.join(" -> "), start.display()));
                    break 'search;
                }
                if next != start && !came_from.contains_key(next) {
                    came_from.insert(next, file);
                    stack.push(next);
                }
            }
        }
    }
    found
}

/// Files over [`MAX_LINES`], with their length.
pub(super) fn long_files(sources: &BTreeMap<PathBuf, String>) -> Vec<String> {
    sources
        .iter()
        .map(|(file, src)| (file, src.lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(file, lines)| format!("{} ({lines} lines)", file.display()))
        .collect()
}

#[test]
fn no_file_in_the_workspace_is_over_600_lines_or_in_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = workspace_sources(&root);
    for part in [
        "distlock/src/lib.rs",
        "distlock-macros/src/lib.rs",
        "tests/src/lib.rs",
    ] {
        assert!(sources.contains_key(Path::new(part)), "{part} not found");
    }
    for part in [
        "examples/src",
        "examples/bench/src",
        "fuzz/fuzz_targets",
        "tests/tests/suite",
    ] {
        assert!(
            sources.keys().any(|f| f.starts_with(part)),
            "nothing under {part}"
        );
    }
    let long = long_files(&sources);
    let cycles = cycles(&file_imports(&sources));
    assert!(
        long.is_empty() && cycles.is_empty(),
        "over {MAX_LINES} lines: {long:#?}\nimport cycles: {cycles:#?}"
    );
}

#[test]
fn grouped_and_nested_imports_are_read_element_by_element() {
    let paths = local_paths(
        "use super::{a, b::{c, self}, d as e};\nuse crate::x::*;\nfn f() { self::g::h(); super::super::i(); }",
    );
    let joined: Vec<String> = paths.iter().map(|p| p.path.join("::")).collect();
    assert_eq!(
        joined,
        [
            "super::a",
            "super::b::c",
            "super::b::self",
            "super::d",
            "crate::x",
            "self::g::h",
            "super::super::i"
        ]
    );
    let hidden = "// use crate::a;\n/* super::b */ let s = \"crate::c\"; let r = r#\"self::d\"#; let c = '\"';";
    assert!(local_paths(hidden).is_empty(), "{:?}", local_paths(hidden));
}

#[test]
fn a_cycle_between_files_and_a_long_file_are_found() {
    let file = |path: &str, src: &str| (PathBuf::from(path), src.to_owned());
    let sources = BTreeMap::from([
        file("c/src/lib.rs", "mod a; mod b; mod p; use crate::a::A;"),
        file("c/src/a.rs", "use crate::b::{B, self};"),
        file(
            "c/src/b.rs",
            "use super::{a::A}; mod tests { use super::*; }",
        ),
        file("c/src/p/mod.rs", "mod q; use self::q::Q;"),
        file("c/src/p/q.rs", "use super::*;"),
        file("c/tests/t.rs", &"fn f() {}\n".repeat(MAX_LINES + 1)),
    ]);
    let found = cycles(&file_imports(&sources));
    assert_eq!(
        found,
        [
            "c/src/a.rs -> c/src/b.rs -> c/src/a.rs",
            "c/src/b.rs -> c/src/a.rs -> c/src/b.rs"
        ]
    );
    assert_eq!(
        long_files(&sources),
        [format!("c/tests/t.rs ({} lines)", MAX_LINES + 1)]
    );
}
