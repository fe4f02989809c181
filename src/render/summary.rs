//! The short report for people: the failed request, the headroom, what holds the memory,
//! and how fragmented the free memory is.

use crate::dump::{Dump, OomRecord, VerdictKind};
use crate::size::human;
use std::fmt::Write;

/// Nodes listed before "and N more".
const TOP_NODES: usize = 10;

pub fn render(d: &Dump) -> String {
    let mut o = String::new();
    let s = &d.stats;
    let a = &d.allocator;
    match &d.oom {
        Some(oom) => {
            let _ = writeln!(o, "OOM in {}: {}", a.name, request_line(oom));
            if let Some(v) = &d.verdict {
                o.push('\n');
                o.push_str(&super::verdict::render(v));
                o.push('\n');
            }
            if oom.outside {
                let _ = writeln!(
                    o,
                    "  outside request  {} asked the device directly (outside the pool); the device had {} free",
                    oom.op,
                    human(oom.device_free)
                );
            } else {
                let _ = writeln!(o, "{}", headroom_line(oom));
            }
            let _ = writeln!(
                o,
                "  at the failure   {} in use in a pool of {} (limit {}); {} free in the pool, largest free block {}",
                human(oom.bytes_in_use),
                human(oom.pool_bytes),
                human(a.limit),
                human(oom.pool_bytes - oom.bytes_in_use.min(oom.pool_bytes)),
                human(oom.largest_free_block),
            );
        }
        None => {
            let _ = writeln!(
                o,
                "No allocation failed in {}: peak {} in use of a {} limit ({:.1}%).",
                a.name,
                human(s.peak_bytes_in_use),
                human(a.limit),
                percent(s.peak_bytes_in_use, a.limit)
            );
            if let Some(v) = d.verdict.as_ref().filter(|v| v.kind != VerdictKind::Fits) {
                o.push('\n');
                o.push_str(&super::verdict::render(v));
                o.push('\n');
            }
        }
    }
    let _ = writeln!(
        o,
        "  now              {} in use by {} allocations (peak {}), pool {} (peak {}), limit {}",
        human(s.bytes_in_use),
        d.live_chunks().count(),
        human(s.peak_bytes_in_use),
        human(s.pool_bytes),
        human(s.peak_pool_bytes),
        human(a.limit)
    );
    let _ = writeln!(
        o,
        "  fragmentation    {:.1}% ({} free in the pool, largest free block {})",
        s.fragmentation * 100.0,
        human(s.free_bytes),
        human(s.largest_free_block)
    );
    let _ = writeln!(
        o,
        "  device           {}: {} total, {} free{}",
        d.device.model,
        human(d.device.total),
        human(d.device.free),
        if d.device.others > 0 {
            format!(", {} held by other processes", human(d.device.others))
        } else {
            String::new()
        }
    );
    if !d.refusals.is_empty() {
        let sizes: Vec<String> = d.refusals.iter().map(|r| human(r.bytes)).collect();
        let _ = writeln!(
            o,
            "  device refused   {} region request{} ({}); the pool got {} of its {} limit",
            d.stats.num_device_refusals,
            if d.stats.num_device_refusals == 1 { "" } else { "s" },
            sizes.join(", "),
            human(s.peak_pool_bytes),
            human(a.limit)
        );
    }

    let total = d.usage_total();
    let _ = writeln!(o, "\nLive memory by node ({} in {} nodes):", human(total), d.usage_by_node.len());
    for n in d.usage_by_node.iter().take(TOP_NODES) {
        let _ = writeln!(o, "  {:>10}  {:>5.1}%  {:>6} x  {}", human(n.bytes), percent(n.bytes, total), n.count, n.op);
    }
    if d.usage_by_node.len() > TOP_NODES {
        let rest: u64 = d.usage_by_node[TOP_NODES..].iter().map(|n| n.bytes).sum();
        let _ = writeln!(o, "  ... {} more nodes with {}", d.usage_by_node.len() - TOP_NODES, human(rest));
    }
    if d.ooms_total > 1 {
        let _ = writeln!(o, "\n{} requests failed; the first is reported above. Others:", d.ooms_total);
        for oom in d.ooms.iter().skip(1).take(TOP_NODES) {
            let _ = writeln!(o, "  {}", request_line(oom));
        }
        if d.ooms_total as usize > TOP_NODES + 1 {
            let _ = writeln!(o, "  ... and {} more", d.ooms_total as usize - TOP_NODES - 1);
        }
    }
    o
}

/// `957.03MiB (rounded to 1003520000) for Conv2D, shape [10000,32,28,28] float32, step 0`
pub fn request_line(oom: &OomRecord) -> String {
    let mut s = if oom.outside {
        format!("{} outside the pool for {}", human(oom.requested), oom.op)
    } else {
        format!("{} (rounded to {}) for {}", human(oom.requested), oom.rounded, oom.op)
    };
    if let Some(shape) = &oom.shape {
        let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
        let _ = write!(s, ", shape [{}]", dims.join(","));
    }
    if let Some(dtype) = &oom.dtype {
        let _ = write!(s, " {dtype}");
    }
    if oom.step >= 0 {
        let _ = write!(s, ", step {}", oom.step);
    }
    s
}

/// The largest block the allocator could have served and how far the request was from it.
fn headroom_line(oom: &OomRecord) -> String {
    let obtainable = largest_obtainable(oom);
    format!(
        "  headroom         the largest block it could have served was {}: short by {}",
        human(obtainable),
        human(oom.rounded.saturating_sub(obtainable))
    )
}

/// The largest single allocation possible at the failure: a free chunk, or a new region
/// within both the limit and what the device had free.
pub fn largest_obtainable(oom: &OomRecord) -> u64 {
    let new_region = oom.limit_headroom.min(oom.device_free) / 256 * 256;
    oom.largest_free_block.max(new_region)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}
