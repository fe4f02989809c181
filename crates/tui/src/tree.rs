//! The nodes view's tree: op names folded by scope, `shared_model/unet_01/Conv2D` under
//! `shared_model` and `shared_model/unet_01`. PyTorch-style module paths
//! (`model.layer1.0.conv1/aten::convolution`) fold at the dots of the module part too.

use crate::app::{NodeRow, NodeSort, cmp_rows};
use oomscope_format::NodeUsage as Node;
use std::collections::{BTreeMap, HashSet};

/// The scope parts of an op name: split at `/`, and at `.` in all but the last part.
pub fn parts(name: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let segments: Vec<&str> = name.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        if i + 1 < segments.len() && seg.contains('.') && !seg.starts_with('.') {
            out.extend(seg.split('.'));
        } else {
            out.push(seg);
        }
    }
    out
}

#[derive(Default)]
struct Scope {
    bytes: u64,
    count: u64,
    /// The full name of this scope (its prefix of an op name).
    name: String,
    children: BTreeMap<String, Scope>,
}

/// Rows of the tree, depth first. A scope is open when it is a root and not toggled, or
/// not a root and toggled; `open_all` (a filter is active) opens every scope.
pub fn rows(nodes: &[&Node], sort: NodeSort, toggled: &HashSet<String>, open_all: bool) -> Vec<NodeRow> {
    let mut root = Scope::default();
    for n in nodes {
        let mut scope = &mut root;
        let mut name_len = 0;
        let parts = parts(&n.op);
        for (i, part) in parts.iter().enumerate() {
            // The prefix of the original name that ends at this part.
            name_len += part.len() + usize::from(i > 0);
            let full = &n.op[..name_len.min(n.op.len())];
            scope = scope
                .children
                .entry(part.to_string())
                .or_insert_with(|| Scope { name: full.to_string(), ..Scope::default() });
            scope.bytes += n.bytes;
            scope.count += n.count;
        }
    }
    let mut out = Vec::new();
    walk(&root, 0, sort, toggled, open_all, &mut out);
    out
}

fn walk(
    scope: &Scope,
    depth: usize,
    sort: NodeSort,
    toggled: &HashSet<String>,
    open_all: bool,
    out: &mut Vec<NodeRow>,
) {
    let mut kids: Vec<(NodeRow, &Scope)> = scope
        .children
        .iter()
        .map(|(part, s)| {
            let has_children = !s.children.is_empty();
            let open = open_all || ((depth == 0) != toggled.contains(&s.name));
            let row = NodeRow {
                name: s.name.clone(),
                label: part.clone(),
                depth,
                bytes: s.bytes,
                count: s.count,
                expanded: has_children.then_some(open),
            };
            (row, s)
        })
        .collect();
    kids.sort_by(|a, b| cmp_rows(&a.0, &b.0, sort));
    for (row, s) in kids {
        let open = row.expanded == Some(true);
        out.push(row);
        if open {
            walk(s, depth + 1, sort, toggled, open_all, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, bytes: u64) -> Node {
        Node { op: name.into(), bytes, requested: bytes, count: 1 }
    }

    #[test]
    fn scope_parts() {
        assert_eq!(parts("shared_model/unet_01/Conv2D"), ["shared_model", "unet_01", "Conv2D"]);
        assert_eq!(
            parts("model.layer1.0.conv1/aten::convolution"),
            ["model", "layer1", "0", "conv1", "aten::convolution"]
        );
        assert_eq!(parts("Conv2D.1"), ["Conv2D.1"]);
        assert_eq!(parts("<unnamed>"), ["<unnamed>"]);
    }

    #[test]
    fn folds_by_scope_with_sums() {
        let nodes = [node("a/x/Conv2D", 100), node("a/x/Relu", 50), node("a/y/Conv2D", 400), node("b", 10)];
        let refs: Vec<&Node> = nodes.iter().collect();
        let rows = rows(&refs, NodeSort::Bytes, &HashSet::new(), false);
        let shown: Vec<(usize, &str, u64, Option<bool>)> =
            rows.iter().map(|r| (r.depth, r.label.as_str(), r.bytes, r.expanded)).collect();
        // Roots open, deeper scopes folded; children by bytes.
        assert_eq!(
            shown,
            [(0, "a", 550, Some(true)), (1, "y", 400, Some(false)), (1, "x", 150, Some(false)), (0, "b", 10, None)]
        );
        assert_eq!(rows[1].name, "a/y");

        let toggled: HashSet<String> = ["a/x".to_string(), "a".to_string()].into();
        let rows2 = super::rows(&refs, NodeSort::Bytes, &toggled, false);
        assert_eq!(rows2.len(), 2, "a is folded: only the roots show");
        let toggled: HashSet<String> = ["a/x".to_string()].into();
        let rows3 = super::rows(&refs, NodeSort::Name, &toggled, false);
        let labels: Vec<&str> = rows3.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["a", "x", "Conv2D", "Relu", "y", "b"]);
    }
}
