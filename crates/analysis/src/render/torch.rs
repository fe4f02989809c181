//! The report of PyTorch's caching allocator in PyTorch's words: the OOM message PyTorch
//! prints (2.2 and later), the counters of `torch.cuda.memory_summary()`, the segments
//! with their blocks (active, pending free, inactive), and the usage by op.

use oomscope_base::size::torch as size;
use oomscope_dump::{Dump, SegmentPool};
use std::fmt::Write;

/// Segments listed one by one (the rest summed).
const SEGMENTS_SHOWN: usize = 20;
/// Ops listed.
const OPS_SHOWN: usize = 15;

/// PyTorch's OOM message (2.2 and later) for the dump's OOM, figures from the allocator at
/// the failure.
pub fn oom_message(d: &Dump) -> Option<String> {
    let o = d.oom.as_ref()?;
    let c = d.allocator.caching.as_deref().copied().unwrap_or_default();
    let tried = o.segment_request.unwrap_or(o.rounded);
    let allowed = c.allowed.map(|a| format!("{} allowed; ", size(a))).unwrap_or_default();
    let gpu = d.device.name.trim_start_matches("cuda:");
    // A replayed snapshot knows what the device had free, not its size.
    let capacity = if o.device_total == 0 {
        format!("GPU {gpu} had {} free (its total capacity is not in the snapshot).", size(o.device_free))
    } else {
        format!("GPU {gpu} has a total capacity of {} of which {} is free.", size(o.device_total), size(o.device_free))
    };
    Some(format!(
        "CUDA out of memory. Tried to allocate {}. {capacity} {allowed}Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        size(tried),
        size(o.bytes_in_use),
        size(o.pool_bytes.saturating_sub(o.bytes_in_use)),
    ))
}

/// The report of a dump made by the caching allocator.
pub fn render(d: &Dump) -> String {
    let mut s = String::new();
    let c = d.allocator.caching.as_deref().copied().unwrap_or_default();
    if let Some(message) = oom_message(d) {
        let _ = writeln!(s, "torch.OutOfMemoryError: {message}");
        if let Some(o) = &d.oom {
            let _ = writeln!(s, "  the request: {} bytes by {}", o.requested, o.op);
        }
        s.push('\n');
    }
    let settings = d.allocator.settings.as_deref().filter(|t| !t.is_empty()).unwrap_or("defaults");
    let _ = writeln!(s, "PyTorch caching allocator on {} (PYTORCH_CUDA_ALLOC_CONF: {settings})", d.device.name);
    let _ = writeln!(s, "  {:<28} {:>12} {:>12}", "", "current", "peak");
    for (name, v) in [
        ("Allocated memory", c.allocated),
        ("Active memory", c.active),
        ("Requested memory", c.requested),
        ("GPU reserved memory", c.reserved),
        ("Non-releasable memory", c.inactive_split),
    ] {
        let _ = writeln!(s, "  {name:<28} {:>12} {:>12}", size(v.current), size(v.peak));
    }
    for (name, v) in [("Allocations", c.allocations), ("GPU reserved segments", c.segments)] {
        let _ = writeln!(s, "  {name:<28} {:>12} {:>12}", v.current, v.peak);
    }
    let _ = writeln!(
        s,
        "  cudaMalloc retries {}, device allocations {}, device frees {}, OOMs {}",
        c.alloc_retries, c.device_allocs, c.device_frees, c.ooms
    );
    s.push('\n');
    let _ = writeln!(s, "Segments ({}), largest first:", d.regions.len());
    let mut regions: Vec<_> = d.regions.iter().collect();
    regions.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    for r in regions.iter().take(SEGMENTS_SHOWN) {
        let active = r.chunks.iter().filter(|c| c.in_use).count();
        let pending = r.chunks.iter().filter(|c| c.pending_free).count();
        let inactive = r.chunks.len() - active - pending;
        let allocated: u64 = r.chunks.iter().filter(|c| c.in_use).map(|c| c.size).sum();
        let pool = match r.pool {
            Some(SegmentPool::Small) => "small pool",
            Some(SegmentPool::Large) | None => "large pool",
        };
        let _ = write!(
            s,
            "  {:#x} {:>12} {pool}, stream {}{}: {} allocated; {active} active",
            r.address,
            size(r.size),
            r.stream.unwrap_or(0),
            if r.expandable { ", expandable" } else { "" },
            size(allocated)
        );
        if pending > 0 {
            let _ = write!(s, ", {pending} pending free");
        }
        let _ = writeln!(s, ", {inactive} inactive");
    }
    if regions.len() > SEGMENTS_SHOWN {
        let rest: u64 = regions[SEGMENTS_SHOWN..].iter().map(|r| r.size).sum();
        let _ = writeln!(s, "  ... {} more segments, {}", regions.len() - SEGMENTS_SHOWN, size(rest));
    }
    s.push('\n');
    let _ = writeln!(s, "Allocated memory by op:");
    for n in d.usage_by_node.iter().take(OPS_SHOWN) {
        let _ = writeln!(s, "  {:>12} in {:>5} blocks  {}", size(n.bytes), n.count, n.op);
    }
    if d.usage_by_node.len() > OPS_SHOWN {
        let rest: u64 = d.usage_by_node[OPS_SHOWN..].iter().map(|n| n.bytes).sum();
        let _ = writeln!(s, "  {:>12} in the other {} ops", size(rest), d.usage_by_node.len() - OPS_SHOWN);
    }
    s
}
