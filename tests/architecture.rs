//! The shape of the source tree, as docs/ARCHITECTURE.md states it: its module table lists
//! every module file of every crate and nothing else, and no module of a crate imports a
//! sibling that imports it back (directly or around a longer cycle). A cycle makes two modules
//! one unit to read, test and change; the table is a newcomer's map and must not lie.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each crate's `src/` directory, relative to the workspace root.
const CRATE_SOURCES: &[&str] = &[
    "src",
    "schemas/src",
    "kafka/src",
    "ops/src",
    "services/sidecar/src",
    "services/model-server/src",
    "joiner/src",
    "diff/src",
    "inspect/src",
    "demo/src",
    "testkit/src",
    "bench/src",
];

/// Whether a file holds unit tests only (`tests.rs`, or anything under a `tests/` or
/// `proptests/` directory of a crate's sources): listed with the module they test.
fn is_test_file(relative: &str) -> bool {
    relative.ends_with("/tests.rs")
        || relative.contains("/tests/")
        || relative.contains("/proptests/")
}

/// Every `.rs` file under `dir`, relative to the workspace root.
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root()).unwrap();
            out.push(relative.to_string_lossy().into_owned());
        }
    }
}

fn module_files() -> Vec<String> {
    let mut files = Vec::new();
    for src in CRATE_SOURCES {
        rust_files(&root().join(src), &mut files);
    }
    files.retain(|f| !is_test_file(f));
    files.sort();
    files
}

#[test]
fn the_module_table_lists_every_module_file() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let listed: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(path, _)| path.to_owned()))
        .filter(|path| path.ends_with(".rs"))
        .collect();
    let files: BTreeSet<String> = module_files().into_iter().collect();
    let missing: Vec<_> = files.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/ARCHITECTURE.md's module table: not listed {missing:?}; no such file {stale:?}"
    );
}

/// A file's module path within its crate: `joiner/src/sink/layout.rs` -> [sink, layout].
fn module_path(src: &str, file: &str) -> Vec<String> {
    let inner = file.strip_prefix(src).unwrap().trim_start_matches('/');
    let inner = inner.strip_suffix(".rs").unwrap();
    let mut parts: Vec<String> = inner.split('/').map(str::to_owned).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The module paths (within the crate) that `text` names through `crate::` or `super::`,
/// `use` groups included, from `module` (the file's own module path). Comments are skipped.
fn references(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for (prefix, base) in [("crate::", Vec::new()), ("super::", super_of(module))] {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                let preceded = rest[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
                rest = &rest[at + prefix.len()..];
                if preceded {
                    continue;
                }
                for path in paths_at(rest) {
                    let mut full = base.clone();
                    full.extend(path);
                    out.push(full);
                }
            }
        }
    }
    out
}

/// The parent module of `module`, which `super::` names (a `mod.rs` is its directory's module,
/// so its `super` is one level up as for any other file).
fn super_of(module: &[String]) -> Vec<String> {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// The lowercase path segments at the start of `text` (`a::b::C` -> [[a, b]]), expanding one
/// level of `{...}` groups (`a::{b, c::d}` -> [[a, b], [a, c, d]]).
fn paths_at(text: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            return group[..end]
                .split(',')
                .flat_map(|part| paths_at(part.trim()))
                .map(|tail| segments.iter().cloned().chain(tail).collect())
                .collect();
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        rest = &rest[name.len()..];
        segments.push(name);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    vec![segments]
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let mut problems = Vec::new();
    for src in CRATE_SOURCES {
        let mut files = Vec::new();
        rust_files(&root().join(src), &mut files);
        files.retain(|f| !is_test_file(f));
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .map(|f| (module_path(src, f), f.clone()))
            .collect();
        // Edges between siblings: from a module's child on the way to the importer to the
        // child on the way to the imported module, under their deepest common ancestor.
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, file) in &modules {
            let text = std::fs::read_to_string(root().join(file)).unwrap();
            for reference in references(&text, module) {
                // The longest prefix that is a module file of the crate.
                let Some(target) = (0..=reference.len())
                    .rev()
                    .map(|n| reference[..n].to_vec())
                    .find(|p| modules.contains_key(p))
                else {
                    continue;
                };
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                // A module may use its ancestors and its descendants.
                if common == module.len() || common == target.len() {
                    continue;
                }
                edges
                    .entry(module[..=common].to_vec())
                    .or_default()
                    .insert(target[..=common].to_vec());
            }
        }
        for cycle in cycles(&edges) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            problems.push(format!("{src}: {}", names.join(" -> ")));
        }
    }
    assert!(problems.is_empty(), "import cycles: {problems:#?}");
}

/// The cycles a depth-first search over `edges` meets (each back edge gives one).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    fn visit<'a>(
        node: &'a Vec<String>,
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<&'a Vec<String>>,
        done: &mut BTreeSet<&'a Vec<String>>,
        found: &mut Vec<Vec<Vec<String>>>,
    ) {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<Vec<String>> = path[at..].iter().map(|n| (*n).clone()).collect();
            cycle.push(node.clone());
            found.push(cycle);
            return;
        }
        if !done.insert(node) {
            return;
        }
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, path, done, found);
        }
        path.pop();
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for start in edges.keys() {
        visit(start, edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}
