//! TensorFlow OOM logs → dumps: every variant of `../shared/reference/tf-bfc.md`, with or
//! without log prefixes (glog, absl, a GitHub quote), Windows addresses, interleaved output.
//!
//! Each line is searched for the earliest known marker (`Bin (`, `InUse at`, `Current usage
//! from device`...), so whatever precedes it is ignored. Figures TF printed rounded
//! (`957.03MiB`) become byte counts that print the same; everything else is exact. Sections
//! the log does not have are listed as absent, never filled in.

use super::ImportError;
use oomscope_base::size::parse_human;
use oomscope_core::bfc::{bin_for_size, rounded_bytes};
use oomscope_dump::{
    AllocatorInfo, BinInfo, BinStyle, ChunkInfo, ChunkStyle, DEFAULT_DEVICE_NAME, DUMP_VERSION, DeviceInfo, Dump,
    HeaderStyle, Imported, NodeUsage, OomRecord, PrefixStyle, RegionInfo, Section, Source, StatsStyle, TfVariant,
    TotalsStyle,
};
use oomscope_dump::{DeviceKind, ImportedFrom, Refusal, SourceKind, Stats};
use std::path::Path;

/// What the log said about the failed request.
#[derive(Default)]
struct Request {
    requested: Option<u64>,
    rounded: Option<u64>,
    op: Option<String>,
}

#[derive(Default)]
struct Parsed {
    name: Option<String>,
    header: Option<HeaderStyle>,
    request: Request,
    shape: Option<Vec<i64>>,
    dtype: Option<String>,
    node: Option<String>,
    saw_dump_header: bool,
    bins: Vec<BinInfo>,
    ancient_bins: bool,
    bin_for: Option<[u64; 2]>,
    chunk_state: Option<Vec<String>>,
    regions: Vec<RegionInfo>,
    /// The region being filled has a "Next region" line (its size is known).
    region_declared: bool,
    chunk_style: Option<ChunkStyle>,
    windows: bool,
    summary: Option<Vec<[u64; 2]>>,
    sum_total: Option<u64>,
    totals: Option<(TotalsStyle, u64, u64, u64)>,
    stats: Vec<(&'static str, u64)>,
    in_stats: bool,
    occupancy: Option<String>,
    usage: Option<(String, String)>,
    nodes: Vec<NodeUsage>,
    remaining: Option<[u64; 2]>,
    in_usage: bool,
    refusals: Vec<u64>,
    cudnn_failed: bool,
    device_model: Option<String>,
    device_name: Option<String>,
    limit_mb: Option<u64>,
    device_total: Option<u64>,
    device_free: Option<u64>,
    prefix: Option<PrefixStyle>,
    lines_read: u64,
    lines_used: u64,
}

const STATS_LABELS: [&str; 8] =
    ["Limit:", "InUse:", "MaxInUse:", "NumAllocs:", "MaxAllocSize:", "Reserved:", "PeakReserved:", "LargestFreeBlock:"];

/// Markers that start the part of a line the importer reads, in no particular order: the
/// earliest one found in a line wins.
const MARKERS: &[&str] = &[
    "Allocator (",
    "Ran out of memory trying to allocate ",
    "BFCAllocator dump for ",
    "Bin for ",
    "Bin (",
    "Size: ",
    "Next region of size ",
    "InUse at ",
    "Free  at ",
    "Free at ",
    "Chunk at ",
    "Summary of in-use Chunks by size",
    "Sum Total of in-use chunks: ",
    "Total bytes in pool: ",
    "total_region_allocated_bytes_: ",
    "Stats:",
    "Current usage from device: ",
    "OOM when allocating tensor with shape",
    "[[Node: ",
    "[[{{node ",
    "[Op:",
    "failed to allocate ",
    "could not create cudnn handle",
    "CUDNN_STATUS_ALLOC_FAILED",
    "Created TensorFlow device (",
    "totalMemory: ",
    "If the cause is memory fragmentation",
    "Current allocation summary follows",
];

/// The first unsigned integer in `s`.
fn first_int(s: &str) -> Option<u64> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let digits: String = s[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

fn int_after(s: &str, pat: &str) -> Option<u64> {
    let rest = after(s, pat)?;
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The whitespace-separated word right before `pat`'s first occurrence at `from` or later.
fn word_before(s: &str, idx: usize) -> Option<&str> {
    s[..idx].split_whitespace().next_back()
}

/// The size printed right before `phrase` (` allocated for chunks`).
fn size_before(s: &str, phrase: &str) -> Option<u64> {
    let idx = s.find(phrase)?;
    parse_human(word_before(s, idx)?.trim_end_matches('.'))
}

fn prefix_style(prefix: &str) -> PrefixStyle {
    let p = prefix.trim_start();
    let p = p.trim_start_matches('*');
    if p.is_empty() {
        PrefixStyle::None
    } else if p.starts_with('>') {
        PrefixStyle::Quoted
    } else if p.starts_with(|c: char| c.is_ascii_digit()) {
        PrefixStyle::Absl
    } else {
        PrefixStyle::Glog
    }
}

impl Parsed {
    fn line(&mut self, line: &str) -> bool {
        let trimmed = line.trim().trim_start_matches('>').trim();
        if self.in_stats {
            if let Some(label) = STATS_LABELS.iter().find(|l| trimmed.starts_with(**l))
                && let Some(v) = first_int(&trimmed[label.len()..])
            {
                self.stats.push((label, v));
                return true;
            }
            self.in_stats = false;
        }
        if self.in_usage {
            if let Some(rest) = trimmed.strip_prefix("Remaining ") {
                let nodes = first_int(rest);
                let bytes = after(rest, "nodes with ").and_then(|h| parse_human(h.trim()));
                if let (Some(n), Some(b)) = (nodes, bytes) {
                    self.remaining = Some([n, b]);
                    self.in_usage = false;
                    return true;
                }
            }
            if let Some((size, op)) = trimmed.split_once(" from ")
                && let Some(bytes) = parse_human(size)
            {
                self.nodes.push(NodeUsage { op: op.trim().to_string(), bytes, requested: 0, count: 0 });
                return true;
            }
            self.in_usage = false;
        }
        if let Some(bar) = occupancy(trimmed) {
            self.occupancy = Some(bar);
            return true;
        }
        let Some((at, marker)) = MARKERS.iter().filter_map(|m| line.find(m).map(|i| (i, *m))).min_by_key(|(i, _)| *i)
        else {
            return false;
        };
        let payload = &line[at..];
        let used = self.payload(marker, payload);
        if used
            && self.prefix.is_none()
            && !matches!(marker, "[[Node: " | "[[{{node " | "[Op:" | "OOM when allocating tensor with shape")
        {
            self.prefix = Some(prefix_style(&line[..at]));
        }
        used
    }

    fn payload(&mut self, marker: &str, p: &str) -> bool {
        match marker {
            "Allocator (" => {
                let Some(rest) = p.strip_prefix("Allocator (") else { return false };
                let Some(close) = rest.find(')') else { return false };
                let Some(tail) = after(rest, "trying to allocate ") else { return false };
                self.name = Some(rest[..close].to_string());
                self.request.requested =
                    tail.split_whitespace().next().and_then(|h| parse_human(h.trim_end_matches('.')));
                self.request.rounded = int_after(tail, "(rounded to ");
                if let Some(op) = after(tail, "requested by op ") {
                    self.request.op = Some(op.trim().to_string()).filter(|o| !o.is_empty());
                    self.header = Some(HeaderStyle::Modern);
                } else if tail.contains(").") {
                    self.header = Some(HeaderStyle::Mid);
                } else {
                    self.header.get_or_insert(HeaderStyle::Modern);
                }
                true
            }
            "Ran out of memory trying to allocate " => {
                let h = p["Ran out of memory trying to allocate ".len()..].split_whitespace().next().unwrap_or("");
                self.request.requested = parse_human(h.trim_end_matches('.'));
                self.header = Some(HeaderStyle::Old);
                true
            }
            "BFCAllocator dump for " => {
                self.name = Some(p["BFCAllocator dump for ".len()..].trim().to_string());
                self.saw_dump_header = true;
                true
            }
            "Bin for " => {
                let mut parts = p["Bin for ".len()..].splitn(2, " was ");
                let req = parts.next().and_then(parse_human);
                let size = parts.next().and_then(|s| s.split(',').next()).and_then(parse_human);
                if let (Some(r), Some(s)) = (req, size) {
                    self.bin_for = Some([r, s]);
                    self.chunk_state = Some(Vec::new());
                    return true;
                }
                false
            }
            "Bin (" => self.bin(p),
            "Size: " => {
                if !p.contains(" | Requested Size: ") {
                    return false;
                }
                self.chunk_state.get_or_insert_with(Vec::new).push(format!("  {}", p.trim_end()));
                true
            }
            "Next region of size " => match first_int(p) {
                Some(size) => {
                    self.regions.push(RegionInfo { address: 0, size, chunks: Vec::new() });
                    self.region_declared = true;
                    true
                }
                None => false,
            },
            "InUse at " | "Free  at " | "Free at " | "Chunk at " => self.chunk(p),
            "Summary of in-use Chunks by size" => {
                self.summary.get_or_insert_with(Vec::new);
                true
            }
            "Sum Total of in-use chunks: " => match parse_human(p["Sum Total of in-use chunks: ".len()..].trim()) {
                Some(b) => {
                    self.sum_total = Some(b);
                    true
                }
                None => false,
            },
            "Total bytes in pool: " | "total_region_allocated_bytes_: " => {
                let style = if marker.starts_with("Total") { TotalsStyle::Pool } else { TotalsStyle::Region };
                match (first_int(p), int_after(p, "memory_limit_:"), int_after(p, "curr_region_allocation_bytes_:")) {
                    (Some(pool), Some(limit), curr) => {
                        self.totals = Some((style, pool, limit, curr.unwrap_or(0)));
                        true
                    }
                    _ => false,
                }
            }
            "Stats:" => {
                self.in_stats = true;
                self.stats.clear();
                true
            }
            "Current usage from device: " => {
                let rest = &p["Current usage from device: ".len()..];
                let (dev, alloc) = rest.split_once(", allocator: ").unwrap_or((rest, ""));
                self.usage = Some((dev.trim().to_string(), alloc.trim().to_string()));
                self.nodes.clear();
                self.in_usage = true;
                true
            }
            "OOM when allocating tensor with shape" => {
                if let Some(dims) = after(p, "[").and_then(|r| r.split(']').next()) {
                    self.shape = dims.split(',').map(|d| d.trim().parse().ok()).collect();
                }
                self.dtype = after(p, " and type ").and_then(|r| r.split_whitespace().next()).map(str::to_string);
                if let Some(dev) = after(p, " on ").and_then(|r| r.split_whitespace().next()) {
                    self.device_name.get_or_insert(dev.to_string());
                }
                if let Some(a) = after(p, "by allocator ").and_then(|r| r.split_whitespace().next()) {
                    self.name.get_or_insert(a.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_').to_string());
                }
                true
            }
            "[[Node: " | "[[{{node " | "[Op:" => {
                let rest = &p[marker.len()..];
                let end = match marker {
                    "[[Node: " => " = ",
                    "[[{{node " => "}}",
                    _ => "]",
                };
                if self.node.is_none() {
                    self.node = rest.split(end).next().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
                }
                true
            }
            "failed to allocate " => match int_after(p, "(") {
                Some(bytes) if p.contains("from device") => {
                    self.refusals.push(bytes);
                    true
                }
                _ => false,
            },
            "could not create cudnn handle" | "CUDNN_STATUS_ALLOC_FAILED" => {
                self.cudnn_failed = true;
                true
            }
            "Created TensorFlow device (" => {
                let rest = &p[marker.len()..];
                if let Some(dev) = rest.split(" with ").next() {
                    self.device_name.get_or_insert(dev.trim().to_string());
                }
                self.limit_mb = int_after(rest, " with ");
                self.device_model =
                    after(rest, "name: ").and_then(|r| r.split(',').next()).map(|s| s.trim().to_string());
                true
            }
            "totalMemory: " => {
                self.device_total =
                    after(p, "totalMemory: ").and_then(|r| r.split_whitespace().next()).and_then(parse_human);
                self.device_free =
                    after(p, "freeMemory: ").and_then(|r| r.split_whitespace().next()).and_then(parse_human);
                self.device_total.is_some()
            }
            "If the cause is memory fragmentation" | "Current allocation summary follows" => true,
            _ => false,
        }
    }

    fn bin(&mut self, p: &str) -> bool {
        let rest = &p["Bin (".len()..];
        let Some(size) = rest.split(')').next().and_then(|s| s.trim().parse::<u64>().ok()) else { return false };
        if size < 256 || !size.is_power_of_two() {
            return false;
        }
        let (Some(total), Some(in_use)) = (int_after(rest, "Total Chunks:"), int_after(rest, "Chunks in use:")) else {
            return false;
        };
        let bytes = size_before(rest, " allocated for chunks");
        let requested_in_use = size_before(rest, " client-requested in use in bin");
        // " in use in bin" not preceded by "client-requested".
        let in_use_bytes = rest.match_indices(" in use in bin").find_map(|(i, _)| {
            let w = word_before(rest, i)?;
            if w == "client-requested" { None } else { parse_human(w.trim_end_matches('.')) }
        });
        let requested_all = size_before(rest, " client-requested for chunks");
        if requested_all.is_some() {
            self.ancient_bins = true;
        }
        let (Some(bytes), Some(bytes_in_use), Some(requested_in_use)) = (bytes, in_use_bytes, requested_in_use) else {
            return false;
        };
        let index = bin_for_size(size) as u32;
        self.bins.retain(|b| b.index != index);
        self.bins.push(BinInfo {
            index,
            size,
            total_chunks: total,
            chunks_in_use: in_use,
            bytes,
            bytes_in_use,
            requested_in_use,
            requested: requested_all,
        });
        true
    }

    fn chunk(&mut self, p: &str) -> bool {
        let words: Vec<&str> = p.split_whitespace().collect();
        let in_use = matches!(words.first(), Some(&"InUse") | Some(&"Chunk"));
        let Some(addr_text) = words.get(2) else { return false };
        let hex = addr_text.trim_start_matches("0x").trim_start_matches("0X");
        let Ok(address) = u64::from_str_radix(hex, 16) else { return false };
        let size = words.windows(3).find(|w| w[0] == "of" && w[1] == "size").and_then(|w| w[2].parse::<u64>().ok());
        let Some(size) = size else { return false };
        let next_at = words.iter().position(|w| *w == "next");
        let next = next_at.and_then(|i| words.get(i + 1)).and_then(|n| n.parse::<u64>().ok());
        let size_at = words.iter().position(|w| *w == "of").unwrap_or(usize::MAX);
        let style = match next_at {
            None => ChunkStyle::Old,
            Some(i) if i < size_at => ChunkStyle::Mid,
            Some(_) => ChunkStyle::Modern,
        };
        self.chunk_style.get_or_insert(style);
        if !addr_text.starts_with("0x") && style != ChunkStyle::Modern && hex.len() == 16 {
            self.windows = true;
        }
        // A chunk that does not continue the current region starts a new one (logs without
        // region lines, and chunks pasted without their "Next region" line).
        let continues = self.regions.last().is_some_and(|r| match r.chunks.last() {
            Some(last) => last.address + last.size == address,
            None => self.region_declared,
        });
        if !continues {
            self.regions.push(RegionInfo { address, size: 0, chunks: Vec::new() });
            self.region_declared = false;
        }
        let region = self.regions.last_mut().expect("pushed above");
        if region.chunks.is_empty() {
            region.address = address;
        }
        if !self.region_declared {
            region.size += size;
        }
        region.chunks.push(ChunkInfo {
            address,
            size,
            requested: 0,
            in_use,
            next: next.filter(|&n| n != u64::MAX),
            ..ChunkInfo::default()
        });
        true
    }
}

/// An occupancy bar: 100 cells of `*`, `x`, `_` (the line's last word), or TF's empty text.
fn occupancy(trimmed: &str) -> Option<String> {
    if trimmed.ends_with("<allocator contains no memory>") {
        return Some("<allocator contains no memory>".to_string());
    }
    let word = trimmed.split_whitespace().next_back()?;
    (word.len() == 100 && word.bytes().all(|b| matches!(b, b'*' | b'x' | b'_'))).then(|| word.to_string())
}

/// Reads a TF log.
pub fn parse(path: &Path, text: &str) -> Result<Dump, ImportError> {
    let mut p = Parsed::default();
    for raw in text.split('\n') {
        p.lines_read += 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        // "N Chunks of size S totalling H" has its count before the marker.
        if let Some(i) = line.find(" Chunks of size ")
            && let (Some(count), Some(size)) =
                (word_before(line, i).and_then(|w| w.parse::<u64>().ok()), first_int(&line[i + 16..]))
        {
            p.summary.get_or_insert_with(Vec::new).push([count, size]);
            p.lines_used += 1;
            continue;
        }
        if p.line(line) {
            p.lines_used += 1;
        }
    }
    let found_anything = p.header.is_some()
        || !p.bins.is_empty()
        || !p.regions.is_empty()
        || p.usage.is_some()
        || p.shape.is_some()
        || !p.refusals.is_empty()
        || p.cudnn_failed
        || !p.stats.is_empty();
    if !found_anything {
        return Err(ImportError {
            path: path.to_path_buf(),
            line: 0,
            message: "no TensorFlow OOM report found. Looked for: \"ran out of memory trying to allocate\", \
                      \"BFCAllocator dump for\", \"Bin (...)\" lines, chunk lines (\"InUse at\", \"Chunk at\"), \"Stats:\", \
                      \"Current usage from device\", \"OOM when allocating tensor\", \"failed to allocate ... from device\", \
                      \"CUDNN_STATUS_ALLOC_FAILED\". Is this the log of the run that failed? (A PyTorch snapshot is a \
                      pickle: --from torch-snapshot)"
                .to_string(),
        });
    }
    Ok(build(path, p))
}

fn build(path: &Path, p: Parsed) -> Dump {
    let stat = |label: &str| p.stats.iter().find(|(l, _)| *l == label).map(|(_, v)| *v);
    let (totals_style, pool, limit_from_totals, curr) = match p.totals {
        Some((s, pool, limit, curr)) => (Some(s), Some(pool), Some(limit), curr),
        None => (None, None, None, 0),
    };
    let limit = limit_from_totals.or(stat("Limit:")).or(p.limit_mb.map(|mb| mb << 20)).unwrap_or(0);
    let name = p
        .name
        .clone()
        .or_else(|| p.usage.as_ref().map(|u| u.1.clone()).filter(|a| !a.is_empty()))
        .unwrap_or_else(|| "GPU_0_bfc".into());

    // The request: exact when the shape and dtype give its size and agree with the text.
    let dtype_bytes = p.dtype.as_deref().and_then(|d| match d {
        "float" | "float32" | "int32" | "uint32" => Some(4),
        "half" | "float16" | "bfloat16" | "int16" => Some(2),
        "double" | "float64" | "int64" => Some(8),
        "int8" | "uint8" | "bool" => Some(1),
        _ => None,
    });
    // The element size: the dtype's, or (TF 1.x printed no dtype) the one whose product
    // prints as the log's figure.
    let elements = p
        .shape
        .as_ref()
        .and_then(|s| s.iter().try_fold(1u64, |acc, &d| u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))));
    let exact = match (elements, dtype_bytes, p.request.requested) {
        (Some(n), Some(b), _) => n.checked_mul(b),
        (Some(n), None, Some(approx)) => [4u64, 2, 8, 1]
            .iter()
            .filter_map(|b| n.checked_mul(*b))
            .find(|&e| oomscope_base::size::human(e) == oomscope_base::size::human(approx)),
        _ => None,
    };
    let requested = match (exact, p.request.requested) {
        (Some(e), Some(approx)) if oomscope_base::size::human(e) == oomscope_base::size::human(approx) => Some(e),
        (_, Some(approx)) => Some(approx),
        (e, None) => e,
    };
    let exact_request = exact.is_some() && requested == exact;
    let has_request = p.header.is_some() || p.shape.is_some();
    let live: u64 = p.regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).sum();
    let free_largest = p.regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).map(|c| c.size).max();
    let in_use = stat("InUse:").unwrap_or(live);
    let pool_bytes = pool.unwrap_or_else(|| p.regions.iter().map(|r| r.size).sum());
    let oom = if has_request || p.cudnn_failed {
        let outside = !has_request;
        let requested = requested.unwrap_or(0);
        Some(OomRecord {
            requested,
            // TF's rounding, when the log printed it or the request is exact; else unknown (0).
            rounded: p.request.rounded.unwrap_or(if exact_request { rounded_bytes(requested) } else { 0 }),
            op: p
                .request
                .op
                .clone()
                .or_else(|| p.node.clone())
                .or_else(|| outside.then(|| "cudnn/create_handle".to_string()))
                .unwrap_or_else(|| "unknown".into()),
            shape: p.shape.clone(),
            dtype: p.dtype.clone(),
            outside,
            bytes_in_use: in_use,
            pool_bytes,
            largest_free_block: free_largest.or(stat("LargestFreeBlock:")).unwrap_or(0),
            limit_headroom: limit.saturating_sub(pool_bytes),
            device_free: 0,
            device_total: p.device_total.unwrap_or(0),
            step: -1,
            ..OomRecord::default()
        })
    } else {
        None
    };
    let free_bytes = pool_bytes.saturating_sub(in_use);
    let largest = free_largest.unwrap_or_else(|| stat("LargestFreeBlock:").unwrap_or(0));
    let stats = Stats {
        bytes_limit: stat("Limit:").unwrap_or(limit),
        bytes_in_use: in_use,
        peak_bytes_in_use: stat("MaxInUse:").unwrap_or(0),
        num_allocs: stat("NumAllocs:").unwrap_or(0),
        largest_alloc_size: stat("MaxAllocSize:").unwrap_or(0),
        pool_bytes,
        peak_pool_bytes: pool_bytes,
        bytes_reserved: stat("Reserved:").unwrap_or(0),
        peak_bytes_reserved: stat("PeakReserved:").unwrap_or(0),
        largest_free_block: stat("LargestFreeBlock:").unwrap_or(largest),
        free_bytes,
        fragmentation: if free_bytes == 0 || free_largest.is_none() {
            0.0
        } else {
            1.0 - largest as f64 / free_bytes as f64
        },
        num_ooms: u64::from(has_request),
        num_device_refusals: p.refusals.len() as u64,
        ..Stats::default()
    };

    let mut absent = Vec::new();
    for (section, present) in [
        (Section::Request, has_request || p.cudnn_failed),
        (Section::Bins, !p.bins.is_empty()),
        (Section::ChunkState, p.bin_for.is_some()),
        (Section::Regions, !p.regions.is_empty()),
        (Section::Summary, p.summary.is_some()),
        (Section::Totals, p.sum_total.is_some() || p.totals.is_some()),
        (Section::Stats, !p.stats.is_empty()),
        (Section::Occupancy, p.occupancy.is_some()),
        (Section::Usage, p.usage.is_some()),
        (Section::Events, false),
    ] {
        if !present {
            absent.push(section);
        }
    }
    let old_like = matches!(p.header, Some(HeaderStyle::Old)) || p.chunk_style == Some(ChunkStyle::Old);
    let variant = TfVariant {
        header: p.header.unwrap_or(if old_like { HeaderStyle::Old } else { HeaderStyle::Modern }),
        bins: if p.ancient_bins { BinStyle::Ancient } else { BinStyle::Modern },
        chunks: p.chunk_style.unwrap_or(match p.header {
            Some(HeaderStyle::Old) => ChunkStyle::Old,
            Some(HeaderStyle::Mid) => ChunkStyle::Mid,
            _ => ChunkStyle::Modern,
        }),
        stats: if p.stats.iter().any(|(l, _)| matches!(*l, "Reserved:" | "PeakReserved:" | "LargestFreeBlock:")) {
            StatsStyle::Eight
        } else if !p.stats.is_empty() || old_like {
            StatsStyle::Five
        } else {
            StatsStyle::Eight
        },
        totals: totals_style.unwrap_or(if old_like { TotalsStyle::None } else { TotalsStyle::Pool }),
        windows: p.windows,
        prefix: p.prefix.unwrap_or_default(),
    };
    let mut bins = p.bins;
    bins.sort_by_key(|b| b.index);
    let device_name = p
        .usage
        .as_ref()
        .map(|u| u.0.clone())
        .or(p.device_name.clone())
        .unwrap_or_else(|| DEFAULT_DEVICE_NAME.to_string());
    let total = p.device_total.unwrap_or(0);
    Dump {
        version: DUMP_VERSION,
        tool: format!("oomscope {}", env!("CARGO_PKG_VERSION")),
        source: Source {
            kind: SourceKind::TfLog,
            path: Some(path.display().to_string()),
            command: None,
            created_unix: None,
        },
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: device_name,
            model: p.device_model.unwrap_or_else(|| "GPU (from a TensorFlow log)".into()),
            total,
            free: p.device_free.unwrap_or(0),
            others: match (p.device_total, p.device_free) {
                (Some(t), Some(f)) => t.saturating_sub(f),
                _ => 0,
            },
        },
        allocator: AllocatorInfo {
            name,
            limit,
            allow_growth: false,
            garbage_collection: false,
            fragmentation_fraction: 0.0,
            max_internal_fragmentation: oomscope_core::bfc::DEFAULT_MAX_INTERNAL_FRAGMENTATION,
            curr_region_allocation_bytes: curr,
            expandable_segments: false,
        },
        stats,
        ooms: oom.iter().cloned().collect(),
        ooms_total: u64::from(oom.is_some()),
        oom,
        usage_by_node: p.nodes,
        bins,
        regions: p.regions,
        stacks: Vec::new(),
        events: Vec::new(),
        events_total: 0,
        steps: Vec::new(),
        refusals: p.refusals.iter().map(|&bytes| Refusal { seq: 0, bytes, device_free: 0, outside: false }).collect(),
        outside: Vec::new(),
        workload: None,
        verdict: None,
        imported: Some(Imported {
            from: ImportedFrom::TfLog,
            variant: Some(variant),
            absent,
            chunk_state: p.chunk_state,
            bin_for: p.bin_for,
            occupancy: p.occupancy,
            summary_by_size: p.summary,
            sum_total: p.sum_total,
            usage_remaining: p.remaining,
            lines_read: p.lines_read,
            lines_used: p.lines_used,
        }),
    }
}
