//! TensorFlow 2.x's OOM text, byte for byte: the warning, `BFCAllocator dump for ...`
//! (`DumpMemoryLog`), the occupancy bar (`RenderOccupancy`), and "Current usage from
//! device" (`ReportAllocsOnResourceExhausted`), without log prefixes.
//!
//! Rendered from a [`Dump`] only, so a saved dump prints exactly what was printed at the OOM.
//! TF's figures are kept where they differ from oomscope's other reports: sizes are chunk
//! sizes, `Reserved` rows stay 0; only `LargestFreeBlock`, which TF leaves at 0, is filled in.

use crate::bfc::{bin_for_size, bin_size};
use crate::dump::{ChunkInfo, Dump};
use crate::size::{human, human_bytes_driver};
use std::collections::BTreeMap;
use std::fmt::Write;

/// TF prints the chunk handle `SIZE_MAX` for "no next chunk".
const NO_NEXT: u64 = u64::MAX;
/// Lines of the "Current usage" listing before it stops (TF: more than 100).
const MAX_REPORT_NODES: usize = 100;
/// ... or once this share of the bytes is listed (TF's `float`, so compared in f32).
const MAX_REPORT_FRACTION: f32 = 0.99;
/// Cells of the occupancy bar.
const OCCUPANCY_CELLS: u64 = 100;

/// The allocator dump followed by the usage by node.
pub fn render(d: &Dump) -> String {
    let mut out = allocator_dump(d);
    out.push_str(&usage_by_node(d));
    out
}

/// The device's refusals (StreamExecutor's lines, as seed 000's log shows them), the OOM
/// warning when the dump has a failed request, and `BFCAllocator dump for ...` through the
/// occupancy bar.
pub fn allocator_dump(d: &Dump) -> String {
    let mut o = String::new();
    let name = &d.allocator.name;
    for r in &d.refusals {
        let _ = writeln!(
            o,
            "failed to allocate {} ({} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
            human_bytes_driver(r.bytes),
            r.bytes
        );
    }
    // A request outside the pool failed in the driver, not in the allocator: TF prints no
    // "ran out of memory" for it, only the driver's line (above) and, here, the state.
    if let Some(oom) = d.oom.as_ref().filter(|o| !o.outside) {
        // No space before "requested": TF's own text.
        let _ = writeln!(
            o,
            "Allocator ({name}) ran out of memory trying to allocate {} (rounded to {})requested by op {}",
            human(oom.requested),
            oom.rounded,
            oom.op
        );
        o.push_str(
            "If the cause is memory fragmentation maybe the environment variable \
             'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n",
        );
        o.push_str("Current allocation summary follows.\n");
    }
    let _ = writeln!(o, "BFCAllocator dump for {name}");
    for b in &d.bins {
        let _ = writeln!(
            o,
            "Bin ({}): \tTotal Chunks: {}, Chunks in use: {}. {} allocated for chunks. {} in use in bin. {} client-requested in use in bin.",
            b.size,
            b.total_chunks,
            b.chunks_in_use,
            human(b.bytes),
            human(b.bytes_in_use),
            human(b.requested_in_use)
        );
    }
    if let Some(oom) = d.oom.as_ref().filter(|o| !o.outside) {
        let _ = writeln!(
            o,
            "Bin for {} was {}, Chunk State: ",
            human(oom.rounded),
            human(bin_size(bin_for_size(oom.rounded)))
        );
        for s in d.free_chunks_of_bin_for(oom.rounded) {
            o.push_str(&chunk_debug(s.chunk));
            if let Some(p) = s.prev {
                o.push_str(", prev: ");
                o.push_str(&chunk_debug(p));
            }
            if let Some(n) = s.next {
                o.push_str(", next: ");
                o.push_str(&chunk_debug(n));
            }
            o.push('\n');
        }
    }
    let mut in_use_by_size: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &d.regions {
        let _ = writeln!(o, "Next region of size {}", r.size);
        for c in &r.chunks {
            if c.in_use {
                *in_use_by_size.entry(c.size).or_default() += 1;
            }
            let _ = writeln!(
                o,
                "{} at {:x} of size {} next {}",
                if c.in_use { "InUse" } else { "Free " },
                c.address,
                c.size,
                c.next.unwrap_or(NO_NEXT)
            );
        }
    }
    o.push_str("     Summary of in-use Chunks by size: \n");
    let mut total: u64 = 0;
    for (size, count) in &in_use_by_size {
        let bytes = size.saturating_mul(*count);
        let _ = writeln!(o, "{count} Chunks of size {size} totalling {}", human(bytes));
        total = total.saturating_add(bytes);
    }
    let _ = writeln!(o, "Sum Total of in-use chunks: {}", human(total));
    let pool = d.stats.pool_bytes;
    let _ = writeln!(
        o,
        "Total bytes in pool: {pool} memory_limit_: {} available bytes: {} curr_region_allocation_bytes_: {}",
        d.allocator.limit,
        d.allocator.limit.wrapping_sub(pool),
        d.allocator.curr_region_allocation_bytes
    );
    let s = &d.stats;
    o.push_str("Stats: \n");
    for (label, value) in [
        ("Limit:", s.bytes_limit),
        ("InUse:", s.bytes_in_use),
        ("MaxInUse:", s.peak_bytes_in_use),
        ("NumAllocs:", s.num_allocs),
        ("MaxAllocSize:", s.largest_alloc_size),
        ("Reserved:", s.bytes_reserved),
        ("PeakReserved:", s.peak_bytes_reserved),
        ("LargestFreeBlock:", s.largest_free_block),
    ] {
        let _ = writeln!(o, "{label:<18}{value:>20}");
    }
    o.push('\n');
    o.push_str(&occupancy(d));
    o.push('\n');
    o
}

/// TF's `Chunk::DebugString` without recursion.
fn chunk_debug(c: &ChunkInfo) -> String {
    let bin: i64 = if c.in_use { -1 } else { bin_for_size(c.size) as i64 };
    format!(
        "  Size: {} | Requested Size: {} | in_use: {} | bin_num: {bin}",
        human(c.size),
        human(c.requested),
        u8::from(c.in_use)
    )
}

/// The 100-cell bar over all regions in address order: `*` requested bytes, `x` waste,
/// `_` free. Later chunks overwrite the cells they share with earlier ones, as in TF.
pub fn occupancy(d: &Dump) -> String {
    let total: u64 = d.regions.iter().map(|r| r.size).sum();
    if total == 0 {
        return "<allocator contains no memory>".to_string();
    }
    let mut cells = [b'_'; OCCUPANCY_CELLS as usize];
    let mut paint = |offset: u64, size: u64, ch: u8| {
        let cell = |at: u64| {
            ((at as u128 * OCCUPANCY_CELLS as u128) / total as u128).min(OCCUPANCY_CELLS as u128 - 1) as usize
        };
        let (start, end) = (cell(offset), cell(offset + size - 1));
        for c in &mut cells[start..=end] {
            *c = ch;
        }
    };
    let mut region_offset = 0u64;
    for r in &d.regions {
        for c in r.chunks.iter().filter(|c| c.in_use) {
            let at = region_offset + (c.address - r.address);
            let requested = c.requested.min(c.size);
            if c.size > requested {
                paint(at + requested, c.size - requested, b'x');
            }
            if requested > 0 {
                paint(at, requested, b'*');
            }
        }
        region_offset += r.size;
    }
    String::from_utf8_lossy(&cells).into_owned()
}

/// The "Current usage from device" listing: nodes by live bytes, largest first, until more
/// than 100 lines or 99% of the bytes are listed, then `Remaining N nodes with X`.
///
/// TF's report string starts with "\n\n" because it is appended to an error message that
/// does not end its line; here it follows a finished line, so it starts with one "\n" and
/// the text looks as in a TF log: one blank line, then the listing.
pub fn usage_by_node(d: &Dump) -> String {
    let mut o = String::new();
    let _ = write!(o, "\nCurrent usage from device: {}, allocator: {}\n", d.device.name, d.allocator.name);
    let nodes: Vec<_> = d.usage_by_node.iter().filter(|n| n.bytes > 0).collect();
    let total: u64 = nodes.iter().map(|n| n.bytes).sum();
    let threshold = total as f32 * MAX_REPORT_FRACTION;
    let (mut reported_bytes, mut reported_nodes) = (0u64, 0usize);
    for n in &nodes {
        reported_bytes += n.bytes;
        reported_nodes += 1;
        let _ = writeln!(o, "  {} from {}", human(n.bytes), n.op);
        if reported_nodes > MAX_REPORT_NODES || reported_bytes as f32 >= threshold {
            break;
        }
    }
    if nodes.len() > reported_nodes {
        let _ =
            writeln!(o, "  Remaining {} nodes with {}", nodes.len() - reported_nodes, human(total - reported_bytes));
    }
    o
}
