//! The short report for people: the failed request, the verdict, the headroom, what holds
//! the memory, and how fragmented the free memory is. For an imported log, only what the
//! log showed, and a line that says what it did not.

use oomscope_base::size::human;
use oomscope_format::op_text;
use oomscope_format::{Dump, ImportedFrom, NodeUsage, OomRecord, PeakInfo, Section};
use std::fmt::Write;

/// Nodes listed before "and N more".
const TOP_NODES: usize = 10;

pub fn render(d: &Dump) -> String {
    let mut o = String::new();
    let s = &d.stats;
    let a = &d.allocator;
    let imported = d.imported.as_ref();
    // An imported log's figures are the log's; a recording's are all there.
    let has_totals = d.has(Section::Totals) || d.has(Section::Stats);
    // TF's own LargestFreeBlock row is always 0: the largest free block is known from the
    // chunks only.
    let chunks_known = imported.is_none() || (d.has(Section::Regions) && !d.regions.is_empty());
    first_line(&mut o, d);
    if let Some(v) = &d.verdict {
        o.push('\n');
        o.push_str(&super::verdict::render(v));
        o.push('\n');
    }
    if let Some(oom) = &d.oom {
        if oom.outside {
            let free = if oom.device_free > 0 || imported.is_none() {
                format!("; the device had {} free", human(oom.device_free))
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "  outside request  {} asked the device directly (outside the pool){free}",
                op_text(&oom.op)
            );
        } else if has_totals && a.limit > 0 && chunks_known {
            let _ = writeln!(o, "{}", headroom_line(oom));
        }
        // (A log with the Stats block alone gives what was in use, not the pool's regions: no
        // pool of 0 bytes.)
        if has_totals && a.limit > 0 && oom.pool_bytes < oom.bytes_in_use.max(1) {
            let _ = writeln!(
                o,
                "  at the failure   {} in use (limit {}); the pool's size is not in the input",
                human(oom.bytes_in_use),
                human(a.limit),
            );
        } else if has_totals && a.limit > 0 {
            let _ = writeln!(
                o,
                "  at the failure   {} in use in a pool of {} (limit {}); {} free in the pool, largest free block {}",
                human(oom.bytes_in_use),
                human(oom.pool_bytes),
                human(a.limit),
                human(oom.pool_bytes - oom.bytes_in_use.min(oom.pool_bytes)),
                if chunks_known { human(oom.largest_free_block) } else { "not in the input".to_string() },
            );
        }
    }
    // Nothing failed: what filled the memory at its peak is what the user can act on.
    let peak = d.peak.as_ref().filter(|_| d.oom.is_none());
    if let Some(p) = peak {
        let _ = writeln!(o, "{}", peak_line(p));
    }
    if imported.is_none() {
        let _ = writeln!(
            o,
            "  now              {} in use by {} allocations (peak {}), pool {} (peak {}){}",
            human(s.bytes_in_use),
            d.live_chunks().count(),
            human(s.peak_bytes_in_use),
            human(s.pool_bytes),
            human(s.peak_pool_bytes),
            // With the device's size unknown the limit is only the pool's peak: not a limit.
            if d.device.total > 0 { format!(", limit {}", human(a.limit)) } else { String::new() }
        );
    }
    if d.has(Section::Regions) && !d.regions.is_empty() && (imported.is_none() || has_totals) {
        // From the chunks: TF's own LargestFreeBlock row is always 0.
        let largest = d.regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).map(|c| c.size).max();
        let _ = writeln!(
            o,
            "  fragmentation    {:.1}% ({} free in the pool, largest free block {})",
            s.fragmentation * 100.0,
            human(s.free_bytes),
            human(largest.unwrap_or(0))
        );
    }
    device(&mut o, d);
    if !d.refusals.is_empty() {
        let sizes: Vec<String> = d.refusals.iter().map(|r| human(r.bytes)).collect();
        let got = if has_totals || imported.is_none() {
            format!("; the pool got {} of its {} limit", human(s.peak_pool_bytes), human(a.limit))
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  device refused   {} region request{} ({}){got}",
            d.stats.num_device_refusals,
            if d.stats.num_device_refusals == 1 { "" } else { "s" },
            sizes.join(", "),
        );
    }

    if let Some(p) = peak {
        if !o.ends_with("\n\n") {
            o.push('\n');
        }
        let total: u64 = p.usage_by_node.iter().map(|n| n.bytes).sum();
        let _ = writeln!(o, "Live memory by node at the peak ({} in {} nodes):", human(total), p.usage_by_node.len());
        nodes(&mut o, &p.usage_by_node, total, None);
    } else if d.has(Section::Usage) && (!d.usage_by_node.is_empty() || imported.is_none()) {
        let total = d.usage_total();
        let remaining = imported.and_then(|i| i.usage_remaining);
        let nodes = d.usage_by_node.len() as u64 + remaining.map_or(0, |r| r[0]);
        if !o.ends_with("\n\n") {
            o.push('\n');
        }
        let _ = writeln!(o, "Live memory by node ({} in {nodes} nodes):", human(total));
        self::nodes(&mut o, &d.usage_by_node, total, remaining);
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
    if let Some(imp) = imported {
        let absent: Vec<&str> = imp.absent.iter().filter(|s| **s != Section::Events).map(|s| s.describe()).collect();
        let _ = writeln!(
            o,
            "\nImported from {}{}.",
            d.source.path.as_deref().unwrap_or("a file"),
            if absent.is_empty() { String::new() } else { format!("; not in it: {}", absent.join(", ")) }
        );
    }
    o
}

/// The device's line: its size, what is free, and who holds the rest.
fn device(o: &mut String, d: &Dump) {
    let imported = d.imported.as_ref();
    if d.device.total > 0 || (imported.is_none() && d.device.model.is_empty()) {
        let _ = writeln!(
            o,
            "  device           {}: {} total, {} free{}",
            d.device.model,
            human(d.device.total),
            human(d.device.free),
            if let Some(o) = d.oom.as_ref().filter(|o| !o.processes.is_empty()) {
                // NVML said who holds what at the failure.
                let this: u64 = o.processes.iter().filter(|p| p.this).map(|p| p.bytes).sum();
                let others = o.processes.iter().filter(|p| !p.this).count();
                let mut s = format!(", this process {} in all", human(this));
                if others > 0 {
                    s += &format!(", {others} other process(es) {}", human(d.device.others));
                }
                s
            } else if d.device.others > 0 && d.device.kind == oomscope_format::DeviceKind::Cuda {
                // Read from the driver when the allocator opened the GPU: the process's own
                // CUDA context was there already, and the driver does not say whose is whose.
                format!(
                    ", {} in use before oomscope's first allocation (this process's CUDA context and libraries, \
                     other processes)",
                    human(d.device.others)
                )
            } else if d.device.others > 0 {
                format!(", {} held by other processes", human(d.device.others))
            } else {
                String::new()
            }
        );
    } else if d.device.model.starts_with("GPU (") {
        // Nothing known of the card itself.
    } else {
        let _ = writeln!(o, "  device           {}", d.device.model);
    }
}

/// The first line: the failed request, or that nothing failed.
fn first_line(o: &mut String, d: &Dump) {
    let (s, a, imported) = (&d.stats, &d.allocator, d.imported.as_ref());
    match (&d.oom, imported) {
        (Some(oom), _) => {
            let _ = writeln!(o, "OOM in {}: {}", a.name, request_line(oom));
        }
        (None, Some(imp)) if imp.from == ImportedFrom::TfLog => {
            let _ = writeln!(o, "OOM in {} (from a TensorFlow log that does not include the failed request)", a.name);
        }
        (None, _) if d.device.total == 0 => {
            let _ = writeln!(
                o,
                "No allocation failed in {}: peak {} in use; the cache peaked at {} (the GPU's size is not known).",
                a.name,
                human(s.peak_bytes_in_use),
                human(s.peak_pool_bytes)
            );
        }
        (None, _) => {
            let _ = writeln!(
                o,
                "No allocation failed in {}: peak {} in use of a {} limit ({:.1}%).",
                a.name,
                human(s.peak_bytes_in_use),
                human(a.limit),
                percent(s.peak_bytes_in_use, a.limit)
            );
        }
    }
}

/// The top nodes of `usage` (which sums to `total` with an imported log's `remaining`
/// nodes and bytes), and how many more there are.
fn nodes(o: &mut String, usage: &[NodeUsage], total: u64, remaining: Option<[u64; 2]>) {
    for n in usage.iter().take(TOP_NODES) {
        let count = if n.count > 0 { format!("{:>6} x  ", n.count) } else { String::new() };
        let _ = writeln!(o, "  {:>10}  {:>5.1}%  {count}{}", human(n.bytes), percent(n.bytes, total), n.op);
    }
    let nodes = usage.len() as u64 + remaining.map_or(0, |r| r[0]);
    let shown = usage.len().min(TOP_NODES);
    let rest: u64 = usage[shown..].iter().map(|n| n.bytes).sum::<u64>() + remaining.map_or(0, |r| r[1]);
    if nodes > shown as u64 {
        let _ = writeln!(o, "  ... {} more nodes with {}", nodes - shown as u64, human(rest));
    }
}

/// `  peak             4.46GiB in use by 310 allocations at step 0, reached by conv1/Conv2D`
fn peak_line(p: &PeakInfo) -> String {
    let step = if p.step >= 0 { format!(" at step {}", p.step) } else { String::new() };
    format!(
        "  peak             {} in use by {} allocation{}{step}, reached by {}",
        human(p.bytes_in_use),
        p.allocations,
        if p.allocations == 1 { "" } else { "s" },
        p.op
    )
}

/// `957.03MiB (rounded to 1003520000) for Conv2D, shape [10000,32,28,28] float32, step 0`
pub fn request_line(oom: &OomRecord) -> String {
    let mut s = match (oom.outside, oom.requested, oom.rounded) {
        (true, 0, _) => format!("memory outside the pool for {}", op_text(&oom.op)),
        (true, r, _) => format!("{} outside the pool for {}", human(r), op_text(&oom.op)),
        (false, 0, 0) => format!("a tensor of unknown size for {}", op_text(&oom.op)),
        (false, r, _) if oom.size_assumed => {
            format!("{} (its shape in float: the log names no type) for {}", human(r), op_text(&oom.op))
        }
        (false, r, 0) => format!("{} for {}", human(r), op_text(&oom.op)),
        (false, r, rounded) => format!("{} (rounded to {rounded}) for {}", human(r), op_text(&oom.op)),
    };
    if let Some(shape) = &oom.shape {
        let _ = write!(s, ", shape {}", oomscope_base::shape::text(shape));
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
