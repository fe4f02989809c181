//! The report of PyTorch's caching allocator in PyTorch's words: the OOM message PyTorch
//! prints (2.2 and later), the counters of `torch.cuda.memory_summary()`, the segments
//! with their blocks (active, pending free, inactive), and the usage by op.

use oomscope_base::size::torch as size;
use oomscope_format::op_text;
use oomscope_format::{Dump, SegmentPool};
use std::fmt::Write;

/// Segments listed one by one (the rest summed).
const SEGMENTS_SHOWN: usize = 20;
/// Ops listed.
const OPS_SHOWN: usize = 15;

/// PyTorch's OOM message for the dump's OOM, figures from the allocator at the failure, in
/// the words of the PyTorch the program ran (2.2 and later when not known).
pub fn oom_message(d: &Dump) -> Option<String> {
    let o = d.oom.as_ref()?;
    let c = d.allocator.caching.as_deref().copied().unwrap_or_default();
    let tried = size(o.segment_request.unwrap_or(o.rounded));
    let gpu = d.device.name.trim_start_matches("cuda:");
    let (allocated, unallocated) = (size(o.bytes_in_use), size(o.pool_bytes.saturating_sub(o.bytes_in_use)));
    // PyTorch prints the cap only when a fraction below the whole device was set.
    let allowed = c.allowed.filter(|&a| o.device_total == 0 || a < o.device_total);
    let version = d.allocator.torch_version.as_deref().and_then(minor_version);
    if version.is_some_and(|v| v < (2, 1)) {
        // 1.10 to 2.0.
        let allowed = allowed.map(|a| format!("{} allowed; ", size(a))).unwrap_or_default();
        return Some(format!(
            "CUDA out of memory. Tried to allocate {tried} (GPU {gpu}; {} total capacity; {allocated} already allocated; {} free; {allowed}{} reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
            size(o.device_total),
            size(o.device_free),
            size(o.pool_bytes),
        ));
    }
    // A replayed snapshot knows what the device had free, not its size.
    let capacity = match (o.device_total, version) {
        (0, _) => format!("GPU {gpu} had {} free (its total capacity is not in the snapshot).", size(o.device_free)),
        // 2.1 spelled it so.
        (t, Some((2, 1))) => {
            format!("GPU {gpu} has a total capacty of {} of which {} is free.", size(t), size(o.device_free))
        }
        (t, _) => format!("GPU {gpu} has a total capacity of {} of which {} is free.", size(t), size(o.device_free)),
    };
    let allowed = allowed.map(|a| format!("{} allowed; ", size(a))).unwrap_or_default();
    // NVML's account of the GPU's processes, as PyTorch reports it (none without NVML).
    let processes: String = o
        .processes
        .iter()
        .map(|p| {
            if p.this {
                format!("Including non-PyTorch memory, this process has {} memory in use. ", size(p.bytes))
            } else {
                format!("Process {} has {} memory in use. ", p.pid, size(p.bytes))
            }
        })
        .collect();
    let hint = match version {
        Some((2, 1)) => {
            "If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
        }
        Some(v) if v >= (2, 11) => {
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
        }
        _ => {
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        }
    };
    // 2.1 computed the cap but did not print it.
    let allowed = if version == Some((2, 1)) { String::new() } else { allowed };
    Some(format!(
        "CUDA out of memory. Tried to allocate {tried}. {capacity} {processes}{allowed}Of the allocated memory {allocated} is allocated by PyTorch, and {unallocated} is reserved by PyTorch but unallocated. {hint}"
    ))
}

/// `2.11.0+cu130` → (2, 11).
fn minor_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split(['.', '+', 'a', 'b', 'r']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The report of a dump made by the caching allocator.
pub fn render(d: &Dump) -> String {
    let mut s = String::new();
    let c = d.allocator.caching.as_deref().copied().unwrap_or_default();
    if let Some(message) = oom_message(d) {
        let _ = writeln!(s, "torch.OutOfMemoryError: {message}");
        if let Some(o) = &d.oom {
            let _ = writeln!(s, "  the request: {} bytes by {}", o.requested, op_text(&o.op));
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

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_core::caching::{Caching, CachingOptions, Settings};
    use oomscope_core::device::SimDevice;
    use oomscope_core::record::Meta;
    use oomscope_format::Source;

    const MIB: u64 = 1 << 20;

    /// 7 MiB tensors until a 1 GiB device with a 512 MiB fraction refuses.
    fn failed(version: Option<&str>) -> Dump {
        let mut c = Caching::new(Settings::default(), CachingOptions::new(0), Box::new(SimDevice::new(1 << 30, 0)));
        c.set_memory_fraction(0.5);
        while c.allocate(7 * MIB, 0, Meta::default()).is_ok() {}
        let mut d = c.snapshot(Source::default());
        d.allocator.torch_version = version.map(str::to_string);
        d
    }

    /// Each era's words, and each reads back, through oomscope's own importer, into the
    /// figures the allocator had.
    #[test]
    fn the_message_is_worded_as_the_programs_pytorch_words_it() {
        let cases = [
            (
                Some("2.11.0+cu130"),
                "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            ),
            (Some("2.4.1"), "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
            (None, "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
            (Some("2.1.2"), "total capacty of 1024.00 MiB"),
            (Some("2.0.1"), "(GPU 0; 1024.00 MiB total capacity;"),
        ];
        for (version, words) in cases {
            let d = failed(version);
            let m = oom_message(&d).expect("an OOM");
            assert!(m.starts_with("CUDA out of memory. Tried to allocate 20.00 MiB"), "{m}");
            assert!(m.contains(words), "{version:?}: {m}");
            // The cap shows where that version shows it.
            assert_eq!(m.contains("512.00 MiB allowed"), version != Some("2.1.2"), "{version:?}: {m}");
            let o = d.oom.as_ref().expect("an OOM");
            let read = oomscope_ingest::import::import(std::path::Path::new("m.txt"), m.as_bytes(), None, None)
                .unwrap_or_else(|e| panic!("{version:?}: {e}"));
            let msg = read.imported.as_ref().and_then(|i| i.message.as_ref()).expect("a message");
            assert_eq!(msg.allocated.map(|a| a / MIB), Some(o.bytes_in_use / MIB), "{version:?}");
        }
        // No fraction below the device: no cap in the words, as PyTorch after
        // set_per_process_memory_fraction(1.0).
        let mut d = failed(Some("2.11.0"));
        if let Some(c) = d.allocator.caching.as_mut() {
            c.allowed = Some(1 << 30);
        }
        if let Some(o) = d.oom.as_mut() {
            o.device_total = 1 << 30;
        }
        assert!(!oom_message(&d).expect("an OOM").contains("allowed"));

        // NVML's processes, as PyTorch lists them; the importer reads them back.
        let mut d = failed(Some("2.11.0"));
        if let Some(o) = d.oom.as_mut() {
            o.processes = vec![
                oomscope_format::ProcessMemory { pid: 4242, bytes: 600 * MIB, this: true },
                oomscope_format::ProcessMemory { pid: 77, bytes: 300 * MIB, this: false },
            ];
        }
        let m = oom_message(&d).expect("an OOM");
        assert!(
            m.contains(
                "is free. Including non-PyTorch memory, this process has 600.00 MiB memory in use. Process 77 has \
                 300.00 MiB memory in use. 512.00 MiB allowed; Of the allocated"
            ),
            "{m}"
        );
        let read =
            oomscope_ingest::import::import(std::path::Path::new("m.txt"), m.as_bytes(), None, None).expect("read");
        let msg = read.imported.as_ref().and_then(|i| i.message.as_ref()).expect("a message");
        assert_eq!(msg.others(), Some(300 * MIB));
    }
}
