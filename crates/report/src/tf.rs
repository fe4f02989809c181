//! TensorFlow's OOM text, byte for byte: the warning, `BFCAllocator dump for ...`
//! (`DumpMemoryLog`), the occupancy bar (`RenderOccupancy`), and "Current usage from
//! device" (`ReportAllocsOnResourceExhausted`).
//!
//! Rendered from a [`Dump`] only, so a saved dump prints exactly what was printed at the OOM.
//! The default is TF 2.12+'s text without log prefixes; [`render_variant`] prints any of the
//! historical variants (`TfVariant`), and an imported log prints back in its own. Sections an
//! import lacked are left out, never invented.
//!
//! TF's figures are kept where they differ from oomscope's other reports: sizes are chunk
//! sizes, and the `Reserved`, `PeakReserved` and `LargestFreeBlock` rows print TF's 0 (its BFC
//! allocator never fills them in; the summary, the verdict and the JSON have the largest free
//! block). The text is TF's to the byte, for scripts and for comparing with a TF log.

use oomscope_base::bins::{bin_for_size, bin_size};
use oomscope_base::size::{Rounding, human_bytes_driver, human_with};
use oomscope_format::op_text;
use oomscope_format::{
    BinStyle, ChunkInfo, ChunkStyle, Dump, HeaderStyle, PrefixStyle, Section, StatsStyle, TfVariant, TotalsStyle,
};
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

/// The text in the dump's own variant (an import's, or TF 2.12+'s).
pub fn render(d: &Dump) -> String {
    let v = d.imported.as_ref().and_then(|i| i.variant).unwrap_or_default();
    render_variant(d, &v)
}

/// The allocator dump and the usage by node in the given variant.
pub fn render_variant(d: &Dump, v: &TfVariant) -> String {
    let rounding = rounding(v);
    let mut out = Log { text: String::new(), prefix: v.prefix, rounding };
    allocator_dump(d, v, &mut out);
    out.text.push_str(&usage_listing(d, rounding));
    out.text
}

/// TF on Windows prints with Microsoft's C runtime, which rounds halfway sizes up.
fn rounding(v: &TfVariant) -> Rounding {
    if v.windows { Rounding::Msvc } else { Rounding::Glibc }
}

/// Lines as TF logs them: a LOG statement's first line carries the prefix, the lines of a
/// multi-line message do not.
struct Log {
    text: String,
    prefix: PrefixStyle,
    rounding: Rounding,
}

impl Log {
    fn prefix(&mut self, level: char, file: &str) {
        let _ = match self.prefix {
            PrefixStyle::None => Ok(()),
            PrefixStyle::Glog => write!(self.text, "{level} tensorflow/{file}] "),
            PrefixStyle::Quoted => write!(self.text, "> {level} tensorflow/{file}] "),
            PrefixStyle::Absl => {
                write!(self.text, "2025-01-05 09:48:28.754302: {level} external/local_xla/xla/tsl/{file}] ")
            }
            PrefixStyle::Native => {
                let file = file.rsplit('/').next().unwrap_or(file);
                write!(self.text, "{level}0000 00:00:1735689600.000000   12345 {file}] ")
            }
        };
    }

    /// A size as this log's TF printed it.
    fn h(&self, n: u64) -> String {
        human_with(n, self.rounding)
    }

    /// One log statement; `message` may span lines.
    fn log(&mut self, level: char, message: &str) {
        self.prefix(level, "core/common_runtime/bfc_allocator.cc:1058");
        self.text.push_str(message);
        self.text.push('\n');
    }

    fn driver(&mut self, message: &str) {
        self.prefix('E', "stream_executor/cuda/cuda_driver.cc:936");
        self.text.push_str(message);
        self.text.push('\n');
    }
}

fn address(addr: u64, v: &TfVariant) -> String {
    match (v.chunks, v.windows) {
        (ChunkStyle::Modern, _) => format!("{addr:x}"),
        (_, true) => format!("{addr:016X}"),
        (_, false) => format!("{addr:#x}"),
    }
}

/// The device's refusals, the OOM warning, the dump and the occupancy bar.
fn allocator_dump(d: &Dump, v: &TfVariant, o: &mut Log) {
    let name = &d.allocator.name;
    for r in &d.refusals {
        o.driver(&format!(
            "failed to allocate {} ({} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
            human_bytes_driver(r.bytes),
            r.bytes
        ));
    }
    // A request outside the pool failed in the driver, not in the allocator: TF prints no
    // "ran out of memory" for it, only the driver's line (above) and, here, the state.
    let oom = d.oom.as_ref().filter(|o| !o.outside && d.has(Section::Request));
    match (v.header, oom) {
        (HeaderStyle::Modern | HeaderStyle::Repeated, Some(oom)) => {
            // No space before "requested": TF's own text; since 2.13 it says the last
            // sentence twice.
            let mut text = format!(
                "Allocator ({name}) ran out of memory trying to allocate {} (rounded to {})requested by op {}\n\
                 If the cause is memory fragmentation maybe the environment variable \
                 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n\
                 Current allocation summary follows.",
                o.h(oom.requested),
                oom.rounded,
                op_text(&oom.op)
            );
            if v.header == HeaderStyle::Repeated {
                text.push_str("\nCurrent allocation summary follows.");
            }
            o.log('W', &text);
        }
        (HeaderStyle::Rounded | HeaderStyle::Mid, Some(oom)) => {
            // TF 2.4-2.5 put the summary on its own line; 1.13-2.3 after the sentence.
            let between = if v.header == HeaderStyle::Rounded { "\n" } else { ".  " };
            o.log(
                'W',
                &format!(
                    "Allocator ({name}) ran out of memory trying to allocate {} (rounded to {}){between}Current allocation summary follows.",
                    o.h(oom.requested),
                    oom.rounded
                ),
            )
        }
        _ => {}
    }
    if matches!(v.header, HeaderStyle::Modern | HeaderStyle::Repeated | HeaderStyle::Rounded) && d.has(Section::Bins) {
        o.log('I', &format!("BFCAllocator dump for {name}"));
    }
    bins(d, v, o);
    chunk_state(d, o);
    if d.has(Section::Regions) {
        for r in &d.regions {
            if v.chunks != ChunkStyle::Old {
                o.log('I', &format!("Next region of size {}", r.size));
            }
            for c in &r.chunks {
                let next = c.next.unwrap_or(NO_NEXT);
                let at = address(c.address, v);
                let line = match v.chunks {
                    ChunkStyle::Modern => {
                        format!("{} at {at} of size {} next {next}", if c.in_use { "InUse" } else { "Free " }, c.size)
                    }
                    ChunkStyle::Mid => {
                        format!("{} at {at} next {next} of size {}", if c.in_use { "InUse" } else { "Free " }, c.size)
                    }
                    ChunkStyle::Old => {
                        format!("{} at {at} of size {}", if c.in_use { "Chunk" } else { "Free " }, c.size)
                    }
                };
                o.log('I', &line);
            }
        }
    }
    if d.has(Section::Summary) {
        o.log('I', "     Summary of in-use Chunks by size: ");
        for (size, count) in in_use_by_size(d) {
            let total = o.h(size.saturating_mul(count));
            o.log('I', &format!("{count} Chunks of size {size} totalling {total}"));
        }
    }
    totals(d, v, o);
    stats_rows(d, v, o);
    if d.has(Section::Occupancy) {
        let bar = d.imported.as_ref().and_then(|i| i.occupancy.clone()).unwrap_or_else(|| occupancy(d));
        o.log('W', &bar);
    }
    if let (HeaderStyle::Old, Some(oom)) = (v.header, oom) {
        o.log(
            'W',
            &format!("Ran out of memory trying to allocate {}.  See logs for memory state.", o.h(oom.requested)),
        );
    }
}

/// `Bin for X was Y, Chunk State:` and the free chunks of that bin with their neighbours.
fn chunk_state(d: &Dump, o: &mut Log) {
    if !d.has(Section::ChunkState) {
        return;
    }
    let imported = d.imported.as_ref();
    let for_request =
        d.oom.as_ref().filter(|oom| !oom.outside).map(|oom| (oom.rounded, bin_size(bin_for_size(oom.rounded))));
    let Some((rounded, size)) = imported.and_then(|i| i.bin_for).map(|b| (b[0], b[1])).or(for_request) else {
        return;
    };
    let (rounded_text, size_text) = (o.h(rounded), o.h(size));
    o.log('I', &format!("Bin for {rounded_text} was {size_text}, Chunk State: "));
    if let Some(lines) = imported.and_then(|i| i.chunk_state.as_ref()) {
        for line in lines {
            o.log('I', line);
        }
        return;
    }
    for s in free_chunks_of_bin_for(d, rounded) {
        let mut line = chunk_debug(s.chunk, o.rounding);
        if let Some(p) = s.prev {
            line.push_str(", prev: ");
            line.push_str(&chunk_debug(p, o.rounding));
        }
        if let Some(n) = s.next {
            line.push_str(", next: ");
            line.push_str(&chunk_debug(n, o.rounding));
        }
        o.log('I', &line);
    }
}

/// A free chunk and its neighbours in the region.
struct FreeChunkState<'a> {
    chunk: &'a ChunkInfo,
    prev: Option<&'a ChunkInfo>,
    next: Option<&'a ChunkInfo>,
}

/// Free chunks of the bin `rounded` would be served from, in search order: what TF prints
/// after `Bin for X was Y, Chunk State:`. Each comes with its neighbours.
fn free_chunks_of_bin_for(d: &Dump, rounded: u64) -> Vec<FreeChunkState<'_>> {
    let bin = bin_for_size(rounded);
    let mut out = Vec::new();
    for r in &d.regions {
        for (i, c) in r.chunks.iter().enumerate() {
            if !c.in_use && bin_for_size(c.size) == bin {
                let prev = i.checked_sub(1).map(|p| &r.chunks[p]);
                out.push(FreeChunkState { chunk: c, prev, next: r.chunks.get(i + 1) });
            }
        }
    }
    out.sort_by_key(|s| (s.chunk.size, s.chunk.address));
    out
}

/// (size, count) of in-use chunks, by size: as printed by an import, else from the chunks.
fn in_use_by_size(d: &Dump) -> Vec<(u64, u64)> {
    if let Some(rows) = d.imported.as_ref().and_then(|i| i.summary_by_size.as_ref()) {
        return rows.iter().map(|r| (r[1], r[0])).collect();
    }
    let mut by: BTreeMap<u64, u64> = BTreeMap::new();
    for c in d.live_chunks() {
        *by.entry(c.size).or_default() += 1;
    }
    by.into_iter().collect()
}

/// TF's `Chunk::DebugString` without recursion.
fn chunk_debug(c: &ChunkInfo, rounding: Rounding) -> String {
    let bin: i64 = if c.in_use { -1 } else { bin_for_size(c.size) as i64 };
    format!(
        "  Size: {} | Requested Size: {} | in_use: {} | bin_num: {bin}",
        human_with(c.size, rounding),
        human_with(c.requested, rounding),
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
        for c in &mut cells[start..=end.max(start)] {
            *c = ch;
        }
    };
    let mut region_offset = 0u64;
    for r in &d.regions {
        for c in r.chunks.iter().filter(|c| c.in_use) {
            let at = region_offset + c.address.saturating_sub(r.address);
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
/// the text looks as in a TF log: one blank line, then the listing. An imported listing is
/// printed as it was, with its own "Remaining" line.
pub fn usage_by_node(d: &Dump) -> String {
    let v = d.imported.as_ref().and_then(|i| i.variant).unwrap_or_default();
    usage_listing(d, rounding(&v))
}

fn usage_listing(d: &Dump, rounding: Rounding) -> String {
    let human = |n: u64| human_with(n, rounding);
    let mut o = String::new();
    if !d.has(Section::Usage) {
        return o;
    }
    let _ = write!(o, "\nCurrent usage from device: {}, allocator: {}\n", d.device.name, d.allocator.name);
    if let Some([nodes, bytes]) = d.imported.as_ref().and_then(|i| i.usage_remaining) {
        for n in &d.usage_by_node {
            let _ = writeln!(o, "  {} from {}", human(n.bytes), n.op);
        }
        let _ = writeln!(o, "  Remaining {nodes} nodes with {}", human(bytes));
        return o;
    }
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

fn bins(d: &Dump, v: &TfVariant, o: &mut Log) {
    if d.has(Section::Bins) {
        for b in &d.bins {
            let line = match v.bins {
                BinStyle::Modern => format!(
                    "Bin ({}): \tTotal Chunks: {}, Chunks in use: {}. {} allocated for chunks. {} in use in bin. {} client-requested in use in bin.",
                    b.size,
                    b.total_chunks,
                    b.chunks_in_use,
                    o.h(b.bytes),
                    o.h(b.bytes_in_use),
                    o.h(b.requested_in_use)
                ),
                BinStyle::Ancient => format!(
                    "Bin ({}): \tTotal Chunks: {}, Chunks in use: {} {} allocated for chunks. {} client-requested for chunks. {} in use in bin. {} client-requested in use in bin.",
                    b.size,
                    b.total_chunks,
                    b.chunks_in_use,
                    o.h(b.bytes),
                    o.h(b.requested.unwrap_or(b.requested_in_use)),
                    o.h(b.bytes_in_use),
                    o.h(b.requested_in_use)
                ),
            };
            o.log('I', &line);
        }
    }
}

fn totals(d: &Dump, v: &TfVariant, o: &mut Log) {
    if d.has(Section::Totals) {
        let sum = d.imported.as_ref().and_then(|i| i.sum_total).unwrap_or_else(|| {
            in_use_by_size(d).iter().fold(0u64, |t, (size, count)| t.saturating_add(size.saturating_mul(*count)))
        });
        let sum = o.h(sum);
        o.log('I', &format!("Sum Total of in-use chunks: {sum}"));
        let a = &d.allocator;
        let pool = d.stats.pool_bytes;
        let rest = format!(
            "memory_limit_: {} available bytes: {} curr_region_allocation_bytes_: {}",
            a.limit,
            a.limit.wrapping_sub(pool),
            a.curr_region_allocation_bytes
        );
        match v.totals {
            TotalsStyle::Size => {
                // TF's `available`: what the limit leaves, rounded down to its 256-byte unit.
                let available = a.limit.saturating_sub(pool) / 256 * 256;
                let line = format!(
                    "Total size in pool: {} memory_limit_: {} available size: {} curr_region_allocation_bytes_: {}",
                    o.h(pool),
                    o.h(a.limit),
                    o.h(available),
                    o.h(a.curr_region_allocation_bytes)
                );
                o.log('I', &line);
            }
            TotalsStyle::Pool => o.log('I', &format!("Total bytes in pool: {pool} {rest}")),
            TotalsStyle::Region => o.log('I', &format!("total_region_allocated_bytes_: {pool} {rest}")),
            TotalsStyle::None => {}
        }
    }
}

fn stats_rows(d: &Dump, v: &TfVariant, o: &mut Log) {
    if d.has(Section::Stats) {
        let s = &d.stats;
        let mut rows = vec![
            ("Limit:", s.bytes_limit),
            ("InUse:", s.bytes_in_use),
            ("MaxInUse:", s.peak_bytes_in_use),
            ("NumAllocs:", s.num_allocs),
            ("MaxAllocSize:", s.largest_alloc_size),
        ];
        let width = match v.stats {
            StatsStyle::Eight | StatsStyle::EightHuman => {
                rows.extend([
                    ("Reserved:", s.bytes_reserved),
                    ("PeakReserved:", s.peak_bytes_reserved),
                    // An import keeps the log's figure; TF's BFC allocator itself prints 0.
                    ("LargestFreeBlock:", if d.imported.is_some() { s.largest_free_block } else { 0 }),
                ]);
                18
            }
            StatsStyle::Five => 14,
        };
        // One log statement: "Stats: \n" and the rows, which end with a newline of their own.
        let mut message = String::from("Stats: \n");
        for (label, value) in rows {
            // Since TF 2.16 the sizes print as sizes; the count stays a count.
            let value =
                if v.stats == StatsStyle::EightHuman && label != "NumAllocs:" { o.h(value) } else { value.to_string() };
            let _ = writeln!(message, "{label:<width$}{value:>20}");
        }
        o.log('I', &message);
    }
}
