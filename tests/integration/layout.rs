//! The crates' layout, as docs/architecture.md states it: data flows one way, the library
//! loaded into training processes links no importer of foreign formats, no workload
//! simulator and no UI, the diagnosis renders nothing, and no crate grows into a grab bag.

use crate::common::root;
use std::collections::{BTreeMap, BTreeSet};

/// Each workspace crate's `oomscope-*` dependencies (not dev-dependencies), from its
/// Cargo.toml.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path().join("Cargo.toml")).unwrap();
        let name = text.lines().find_map(|l| l.strip_prefix("name = \"")).unwrap().trim_end_matches('"').to_string();
        let mut deps = BTreeSet::new();
        let mut section = String::new();
        for line in text.lines() {
            if line.starts_with('[') {
                section = line.to_string();
            } else if section == "[dependencies]"
                && let Some(dep) = line.split('.').next().filter(|d| d.starts_with("oomscope-"))
            {
                deps.insert(dep.to_string());
            }
        }
        out.insert(name, deps);
    }
    out
}

fn closure(deps: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(c) = todo.pop() {
        for d in deps.get(&c).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_crates_depend_one_way_and_the_library_links_what_it_needs() {
    let deps = dependencies();
    let order = [
        "oomscope-base",
        "oomscope-format",
        "oomscope-core",
        "oomscope-replay",
        "oomscope-ingest",
        "oomscope-diagnose",
        "oomscope-sim",
        "oomscope-report",
        "oomscope-pipeline",
        "oomscope-inputs",
        "oomscope-fit",
        "oomscope-live",
        "oomscope-ffi",
        "oomscope-tui",
    ];
    assert_eq!(
        deps.keys().collect::<BTreeSet<_>>(),
        order.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>().iter().collect()
    );
    for (i, c) in order.iter().enumerate() {
        for d in &deps[*c] {
            let at = order.iter().position(|o| o == d).unwrap();
            assert!(at < i, "{c} depends on {d}, which comes after it");
        }
    }
    let ffi = closure(&deps, "oomscope-ffi");
    for never in ["oomscope-ingest", "oomscope-sim", "oomscope-inputs", "oomscope-fit", "oomscope-tui"] {
        assert!(!ffi.contains(never), "liboomscope.so links {never}: {ffi:?}");
    }
    assert!(!closure(&deps, "oomscope-diagnose").contains("oomscope-report"), "the diagnosis renders nothing");
}

/// The environment between `oomscope run` (or `install()`) and the processes it starts is
/// spelled once, in `oomscope_core::env`: every `OOMSCOPE_` variable the Python package or
/// the command names is one of its variables.
#[test]
fn every_variable_of_the_run_environment_is_the_contracts() {
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(root().join("python/oomscope")).unwrap().flatten().map(|e| e.path()).collect();
    files.push(root().join("python/sitecustomize.py"));
    for dir in ["src/cli", "src/cli/run"] {
        files.extend(std::fs::read_dir(root().join(dir)).unwrap().flatten().map(|e| e.path()));
    }
    let mut seen = BTreeSet::new();
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "py" || x == "rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, _) in text.match_indices("OOMSCOPE_") {
            let name: String =
                text[i..].chars().take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit()).collect();
            // The build's own (the version) and the tests' (the UI's panic) are not the run's.
            if name != "OOMSCOPE_VERSION" && name != "OOMSCOPE_" {
                seen.insert((name, f.display().to_string()));
            }
        }
    }
    assert!(seen.len() > 10, "{seen:?}");
    for (name, file) in &seen {
        assert!(
            oomscope_core::env::ALL.contains(&name.as_str()),
            "{file} names {name}, which oomscope_core::env does not"
        );
    }
}

#[test]
fn no_crate_holds_more_than_a_third_of_the_source() {
    fn lines(dir: &std::path::Path) -> usize {
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                n += lines(&p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                n += std::fs::read_to_string(&p).unwrap().lines().count();
            }
        }
        n
    }
    let mut parts: Vec<(String, usize)> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), lines(&e.path())))
        .collect();
    parts.push(("src".into(), lines(&root().join("src"))));
    let total: usize =
        parts.iter().map(|p| p.1).sum::<usize>() + lines(&root().join("tests")) + lines(&root().join("benches"));
    for (name, n) in &parts {
        assert!(*n * 100 <= total * 35, "{name} holds {n} of {total} lines of Rust");
    }
}
