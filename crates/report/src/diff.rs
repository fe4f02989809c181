//! What grew and what shrank between two dumps: by node, and by every scope prefix of the
//! node names (`shared_model/unet_01/*`), which is where step-over-step growth shows.

use oomscope_base::size::human;
use oomscope_format::Dump;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One name's live memory in both dumps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub name: String,
    pub before: u64,
    pub after: u64,
    pub delta: i64,
    pub count_before: u64,
    pub count_after: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diff {
    pub before: String,
    pub after: String,
    /// Live bytes (the usage by node) in each dump.
    pub total_before: u64,
    pub total_after: u64,
    pub pool_before: u64,
    pub pool_after: u64,
    /// Nodes whose bytes changed, largest change first.
    pub nodes: Vec<Change>,
    /// Scope prefixes whose bytes changed, largest change first.
    pub scopes: Vec<Change>,
}

fn delta(before: u64, after: u64) -> i64 {
    (after as i128 - before as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn changes(a: &BTreeMap<String, (u64, u64)>, b: &BTreeMap<String, (u64, u64)>) -> Vec<Change> {
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let mut v: Vec<Change> = names
        .into_iter()
        .map(|n| {
            let (before, count_before) = a.get(n).copied().unwrap_or_default();
            let (after, count_after) = b.get(n).copied().unwrap_or_default();
            Change { name: n.clone(), before, after, delta: delta(before, after), count_before, count_after }
        })
        .filter(|c| c.delta != 0 || c.count_before != c.count_after)
        .collect();
    v.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then_with(|| x.name.cmp(&y.name)));
    v
}

fn by_node(d: &Dump) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for n in &d.usage_by_node {
        let e = m.entry(n.op.clone()).or_insert((0, 0));
        e.0 += n.bytes;
        e.1 += n.count;
    }
    m
}

/// Every proper prefix of every node name (`a`, `a/b` for `a/b/c`), with their bytes.
fn by_scope(d: &Dump) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for n in &d.usage_by_node {
        let parts: Vec<&str> = n.op.split('/').collect();
        for depth in 1..parts.len() {
            let e = m.entry(parts[..depth].join("/")).or_insert((0, 0));
            e.0 += n.bytes;
            e.1 += n.count;
        }
    }
    m
}

/// Compares `a` (before) with `b` (after); the names label them in reports.
pub fn diff(a: &Dump, b: &Dump, name_a: &str, name_b: &str) -> Diff {
    Diff {
        before: name_a.to_string(),
        after: name_b.to_string(),
        total_before: a.usage_total(),
        total_after: b.usage_total(),
        pool_before: a.stats.pool_bytes,
        pool_after: b.stats.pool_bytes,
        nodes: changes(&by_node(a), &by_node(b)),
        scopes: changes(&by_scope(a), &by_scope(b)),
    }
}

fn signed(n: i64) -> String {
    if n < 0 { format!("-{}", human(n.unsigned_abs())) } else { format!("+{}", human(n as u64)) }
}

/// The diff for people: the totals, then what grew and what shrank, by node and by scope.
pub fn render(d: &Diff, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} -> {}", d.before, d.after);
    let _ = writeln!(
        o,
        "  live   {} -> {} ({})",
        human(d.total_before),
        human(d.total_after),
        signed(delta(d.total_before, d.total_after))
    );
    let _ = writeln!(
        o,
        "  pool   {} -> {} ({})",
        human(d.pool_before),
        human(d.pool_after),
        signed(delta(d.pool_before, d.pool_after))
    );
    for (title, list) in [("by node", &d.nodes), ("by scope", &d.scopes)] {
        let grew: Vec<&Change> = list.iter().filter(|c| c.delta > 0).take(top).collect();
        let shrank: Vec<&Change> = list.iter().filter(|c| c.delta < 0).take(top).collect();
        for (what, items) in [("Grew", grew), ("Shrank", shrank)] {
            if items.is_empty() {
                continue;
            }
            let _ = writeln!(o, "\n{what} ({title}):");
            for c in items {
                let counts = if c.count_before != c.count_after {
                    format!("  ({} -> {} allocations)", c.count_before, c.count_after)
                } else {
                    String::new()
                };
                let _ = writeln!(o, "  {:>11}  {}{counts}", signed(c.delta), c.name);
            }
        }
    }
    if d.nodes.is_empty() {
        o.push_str("\nNo node's live memory changed.\n");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::NodeUsage;

    fn dump(nodes: &[(&str, u64, u64)]) -> Dump {
        let text = include_str!("../../../tests/golden/tf-reference.dump.json");
        let mut d = oomscope_format::read_str(std::path::Path::new("x"), text).unwrap();
        d.usage_by_node = nodes
            .iter()
            .map(|(op, bytes, count)| NodeUsage { op: op.to_string(), bytes: *bytes, requested: *bytes, count: *count })
            .collect();
        d
    }

    #[test]
    fn growth_shows_by_node_and_by_scope() {
        let a = dump(&[("model/dense/kernel", 100, 1), ("metrics/Mean", 10, 1), ("model/conv/Relu", 50, 1)]);
        let b = dump(&[
            ("model/dense/kernel", 100, 1),
            ("metrics/Mean", 40, 4),
            ("model/conv/Relu", 20, 1),
            ("model/new", 5, 1),
        ]);
        let d = diff(&a, &b, "step 1", "step 4");
        let names: Vec<(&str, i64)> = d.nodes.iter().map(|c| (c.name.as_str(), c.delta)).collect();
        assert_eq!(names, vec![("metrics/Mean", 30), ("model/conv/Relu", -30), ("model/new", 5)]);
        let scopes: Vec<(&str, i64)> = d.scopes.iter().map(|c| (c.name.as_str(), c.delta)).collect();
        // Prefixes only: "model" = kernel + conv + new, "model/conv", "metrics".
        assert_eq!(scopes, vec![("metrics", 30), ("model/conv", -30), ("model", -25)]);
        let text = render(&d, 10);
        assert!(text.contains("+30B  metrics/Mean  (1 -> 4 allocations)"), "{text}");
        let shrank = text.split("Shrank (by node):\n").nth(1).unwrap_or("");
        assert!(shrank.lines().next().unwrap_or("").trim() == "-30B  model/conv/Relu", "{text}");
    }
}
