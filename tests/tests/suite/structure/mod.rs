//! The runtime's structure, checked: one direction of dependency (a module imports only its own
//! layer and those below, the layers of `LAYERS`, lowest first). Over the whole workspace, no
//! file over 600 lines and no import cycle between files (`files.rs`); the test binaries beside
//! the suite are the ones `main.rs` lists (`binaries.rs`). `ARCHITECTURE.md` shows the layers
//! as a table and says what each module owns; its table lists the modules of `LAYERS`, each in
//! its layer (checked below).
//!
//! Within a layer, modules import each other one way only. A module that is not in `LAYERS`
//! fails the test: each new one is placed on purpose.

use std::collections::BTreeMap;
use std::path::Path;

mod binaries;
mod files;

const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &[
            "error",
            "mode",
            "config",
            "key",
            "identity",
            "context",
            "telemetry",
            "lease",
            "sync",
            "majority",
            "tasks",
            "token",
            "guide",
        ],
    ),
    ("wire", &["conn"]),
    (
        "protocol",
        &[
            "algorithm",
            "setnx",
            "reentrant",
            "rwlock",
            "semaphore",
            "many",
        ],
    ),
    ("nodes", &["nodes"]),
    ("upkeep", &["watchdog", "release"]),
    (
        "local state",
        &["handoff", "channels", "notify", "probe", "holds", "wait"],
    ),
    ("acquisition", &["runtime", "lock", "guard", "lease_view"]),
    ("facade", &["client", "inspect", "election", "fenced"]),
    (
        "support",
        &[
            "private",
            "cli",
            "fuzz",
            "test_hooks",
            "testing",
            "lib",
            "bin",
        ],
    ),
];

/// The layer of a module by its name (the crate root's items count as the root's).
fn layer(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The modules that the paths in `src`, a file of module `here`, name: `crate::`, `super::`
/// and `self::` paths, grouped imports element by element (a root item counts as `lib`).
fn imports(here: &[String], src: &str) -> Vec<String> {
    files::local_paths(src)
        .into_iter()
        .map(|local| {
            let named = files::absolute(&[here, &local.inline].concat(), &local.path);
            match named.first() {
                Some(top) if layer(top).is_some() => top.clone(),
                _ => "lib".to_owned(),
            }
        })
        .collect()
}

/// The module path of a file of `distlock/src`, from its path there.
fn module_path(rel: &str) -> Vec<String> {
    let mut module: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if module == ["lib"] {
        module.clear();
    } else if module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    module
}

#[test]
fn every_import_goes_down_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files: Vec<(String, Vec<String>, String)> = files::workspace_sources(&root)
        .into_iter()
        .filter_map(|(path, src)| {
            let rel = path.strip_prefix("distlock/src").ok()?.to_str()?.to_owned();
            Some((rel.clone(), module_path(&rel), src))
        })
        .collect();
    assert!(files.len() > 30, "found only {} files", files.len());
    let mut problems = BTreeMap::new();
    // Within a layer, modules may import each other one way only.
    let mut edges: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (rel, path, src) in &files {
        let module = path.first().map_or("lib", String::as_str);
        let Some(here) = layer(module) else {
            problems.insert(rel.clone(), format!("module `{module}` is in no layer"));
            continue;
        };
        for imported in imports(path, src) {
            let there = layer(&imported).expect("classified");
            if there > here {
                problems.insert(
                    format!("{rel} -> {imported}"),
                    format!(
                        "a {} module imports from the {} layer",
                        LAYERS[here].0, LAYERS[there].0
                    ),
                );
            } else if there == here && imported != module {
                edges.entry(module).or_default().push(imported);
            }
        }
    }
    for start in edges.keys() {
        let mut seen = vec![start.to_string()];
        let mut stack: Vec<String> = edges[start].clone();
        while let Some(next) = stack.pop() {
            if next == *start {
                problems.insert(
                    format!("{start} -> .. -> {start}"),
                    "an import cycle".into(),
                );
                break;
            }
            if !seen.contains(&next) {
                stack.extend(edges.get(next.as_str()).into_iter().flatten().cloned());
                seen.push(next);
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_check_sees_an_upward_import() {
    let conn = module_path("conn/link.rs");
    assert_eq!(imports(&conn, "use crate::client::Client;"), ["client"]);
    assert_eq!(
        imports(&conn, "use crate::{error::Error, client::Client};"),
        ["error", "client"]
    );
    assert_eq!(imports(&conn, "let e: crate::Error = todo!();"), ["lib"]);
    assert_eq!(imports(&conn, "use super::wire::Socket;"), ["conn"]);
    let tests = "mod tests { use super::*; use super::super::Conn; }";
    assert_eq!(imports(&conn, tests), ["conn", "conn"]);
    assert!(imports(&conn, "// use crate::client::Client;\n/* crate::lock */").is_empty());
    assert!(layer("conn") < layer("client"));
}

/// The modules a row of ARCHITECTURE.md's layer table names: its backticked names, leaving out
/// what is said of them in parentheses (`private` (`__private`, the macro support)).
fn named_in_row(cell: &str) -> Vec<String> {
    let mut outside = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    outside
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn architecture_md_shows_the_same_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md");
    let shown: Vec<(String, Vec<String>)> = text
        .lines()
        .skip_while(|line| !line.starts_with("| layer | modules |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].to_owned(), named_in_row(cells[1]))
        })
        .collect();
    let checked: Vec<(String, Vec<String>)> = LAYERS
        .iter()
        .map(|(layer, modules)| {
            let modules = modules.iter().map(|m| m.to_string()).collect();
            (layer.to_string(), modules)
        })
        .collect();
    assert_eq!(
        shown, checked,
        "ARCHITECTURE.md's layer table against LAYERS"
    );
    assert_eq!(
        named_in_row("`private` (`__private`, the macro support), `lib` (the crate root), `bin`"),
        ["private", "lib", "bin"]
    );
}
