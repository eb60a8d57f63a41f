//! The runtime's structure, checked: one direction of dependency (a module imports only its own
//! layer and those below), no file over 600 lines. The layers, lowest first (`ARCHITECTURE.md`
//! says what each module owns; keep its table and `LAYERS` the same):
//!
//! | layer | modules |
//! |---|---|
//! | leaves | error, mode, config, key, identity, context, telemetry, lease, sync, majority, tasks, token, guide |
//! | wire | conn |
//! | protocol | algorithm and the modes: setnx, reentrant, rwlock, semaphore, many; fenced (writes fenced by tokens) |
//! | nodes | nodes (one node, the set of nodes, records, eviction, health) |
//! | upkeep | watchdog, release |
//! | local state | handoff, channels, notify, probe, holds, wait |
//! | acquisition | runtime, lock, guard |
//! | facade | client, inspect, election, fenced |
//! | support | private (`__private`), cli, fuzz, testing, the crate root, bin |
//!
//! Within a layer, modules import each other one way only. A module that is not in the table
//! fails the test: each new one is placed on purpose.

use std::collections::BTreeMap;
use std::path::Path;

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
    ("acquisition", &["runtime", "lock", "guard"]),
    ("facade", &["client", "inspect", "election", "fenced"]),
    (
        "support",
        &["private", "cli", "fuzz", "testing", "lib", "bin"],
    ),
];

/// The layer of a module by its name (the crate root's items count as the root's).
fn layer(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// `src` without its comments (doc comments name paths freely).
fn without_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("//").into_iter().chain(rest.find("/*")).min() {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        rest = if rest.starts_with("//") {
            rest.find('\n').map_or("", |end| &rest[end..])
        } else {
            rest.find("*/").map_or("", |end| &rest[end + 2..])
        };
    }
    out.push_str(rest);
    out
}

/// The modules `crate::<module>` names in `src` (a root item counts as `lib`).
fn imports(src: &str) -> Vec<String> {
    let code = without_comments(src);
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `crate::` as a path's start, not the end of another word.
            code[..*at]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(at, _)| {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if layer(&name).is_some() {
                name
            } else {
                "lib".to_owned()
            }
        })
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read distlock/src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let src = std::fs::read_to_string(&path).expect("read a source file");
            out.push((path.display().to_string(), src));
        }
    }
}

#[test]
fn every_import_goes_down_the_layers_and_no_file_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../distlock/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 30, "found only {} files", files.len());
    let mut problems = BTreeMap::new();
    for (path, src) in &files {
        let rel = path
            .rsplit_once("distlock/src/")
            .map_or(path.as_str(), |(_, rel)| rel);
        let module = rel
            .split(['/', '.'])
            .next()
            .expect("a path has a first part");
        let Some(here) = layer(module) else {
            problems.insert(rel.to_owned(), format!("module `{module}` is in no layer"));
            continue;
        };
        let lines = src.lines().count();
        if lines > 600 {
            problems.insert(rel.to_owned(), format!("{lines} lines"));
        }
        for imported in imports(src) {
            let there = layer(&imported).expect("classified");
            if there > here {
                problems.insert(
                    format!("{rel} -> {imported}"),
                    format!(
                        "a {} module imports from the {} layer",
                        LAYERS[here].0, LAYERS[there].0
                    ),
                );
            }
        }
    }
    // Within a layer, modules may import each other one way only.
    let mut edges: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (path, src) in &files {
        let rel = path
            .rsplit_once("distlock/src/")
            .map_or(path.as_str(), |(_, rel)| rel);
        let module = rel.split(['/', '.']).next().expect("a first part");
        let here = edges.entry(module).or_default();
        for imported in imports(src) {
            if imported != module && layer(&imported) == layer(module) {
                here.push(imported);
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
    assert_eq!(imports("use crate::client::Client;"), ["client"]);
    assert_eq!(imports("let e: crate::Error = todo!();"), ["lib"]);
    assert!(imports("// use crate::client::Client;\n/* crate::lock */").is_empty());
    assert!(layer("conn") < layer("client"));
}
