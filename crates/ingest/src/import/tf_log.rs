//! TensorFlow OOM logs → dumps: every variant TensorFlow has printed since 1.0 (and XLA/JAX,
//! which print the same allocator dump), with or without log prefixes (glog, absl, the C++
//! logger's own with thread ids, a GitHub quote), Windows addresses and rounding, other
//! output interleaved, and several OOMs in one log.
//!
//! Each line is searched for the earliest known marker (`Bin (`, `InUse at`, `Current usage
//! from device`...), so whatever precedes it is ignored. A log holds one report per failed
//! allocation: lines are routed to reports by the logging thread when the prefix names it
//! (parallel ops fail at the same time and their dumps interleave), and a new report starts
//! at each `ran out of memory` header or new allocator dump. Every report is kept (`ooms`);
//! the first is the one the dump describes.
//!
//! Figures TF printed rounded (`957.03MiB`) become byte counts that print the same, unless
//! the log has them exactly elsewhere: in-use bytes and the pool come from the chunk and
//! region lines when there are some. Sections the log does not have are listed as absent,
//! never filled in.

use oomscope_base::size::{Rounding, human, human_with, parse_human};
use oomscope_core::bfc::{bin_for_size, rounded_bytes};
use oomscope_format::InputError;
use oomscope_format::{
    AllocatorInfo, BinInfo, BinStyle, ChunkInfo, ChunkStyle, DEFAULT_DEVICE_NAME, DeviceInfo, DeviceKind, Dump,
    HeaderStyle, Imported, ImportedFrom, NodeUsage, OomRecord, PrefixStyle, Refusal, RegionInfo, Section, Source,
    SourceKind, Stats, StatsStyle, TfVariant, TotalsStyle,
};
use std::collections::HashMap;
use std::path::Path;

const STATS_LABELS: [&str; 8] =
    ["Limit:", "InUse:", "MaxInUse:", "NumAllocs:", "MaxAllocSize:", "Reserved:", "PeakReserved:", "LargestFreeBlock:"];

/// Markers that start the part of a line the importer reads: the earliest one found in a
/// line wins.
/// XLA's exact figure for a failed request.
const XLA_REQUEST: &str = "Out of memory while trying to allocate ";
/// "N Chunks of size S totalling H".
const CHUNK_COUNTS: &str = " Chunks of size ";

const MARKERS: &[&str] = &[
    "Allocator (",
    // Intel's TensorFlow extension's BFC allocator names no allocator: `E itex/core/devices/
    // bfc_allocator.cc:101] Allocator ran out of memory trying to allocate 10529419660 Bytes
    // (rounded to 10529419776 Bytes)`.
    "Allocator ran out of memory trying to allocate ",
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
    "Total size in pool: ",
    "Total bytes in pool: ",
    "total_region_allocated_bytes_: ",
    "Stats:",
    "Current usage from device: ",
    "OOM when allocating tensor",
    "[[Node: ",
    "{{node ",
    "[[node ",
    "[Op:",
    "failed to allocate ",
    "could not create cudnn handle",
    "CUDNN_STATUS_ALLOC_FAILED",
    "Created TensorFlow device (",
    "Found device ",
    "totalMemory: ",
    "If the cause is memory fragmentation",
    "Current allocation summary follows",
];

/// TF's warning when an allocation that may fail did (a cache, a faster algorithm's
/// workspace): not an OOM.
const NOT_A_FAILURE: &str = "The caller indicates that this is not a failure";

// ---- small text helpers ---------------------------------------------------------------

/// The first unsigned integer in `s`.
fn first_int(s: &str) -> Option<u64> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let digits: String = s[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

/// The whitespace-separated word right before byte `idx` of `s`.
fn word_before(s: &str, idx: usize) -> Option<&str> {
    s[..idx].split_whitespace().next_back()
}

/// A size as a log prints it: bytes (`268435456`, exact) or TF's human form (`256.00MiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Figure {
    bytes: u64,
    exact: bool,
}

fn figure(word: &str) -> Option<Figure> {
    let w = word.trim().trim_end_matches(['.', ',']);
    if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
        return w.parse().ok().map(|bytes| Figure { bytes, exact: true });
    }
    parse_human(w).map(|bytes| Figure { bytes, exact: w == "0B" })
}

/// The figure in the word after `label`.
fn figure_after(s: &str, label: &str) -> Option<Figure> {
    figure(after(s, label)?.split_whitespace().next()?)
}

/// The size printed right before `phrase` (` allocated for chunks`), as printed.
fn text_before<'a>(s: &'a str, phrase: &str) -> Option<&'a str> {
    let idx = s.find(phrase)?;
    Some(word_before(s, idx)?.trim_end_matches('.'))
}

// ---- log prefixes ----------------------------------------------------------------------

/// What a line's log prefix says.
#[derive(Clone, Copy, Debug, Default)]
struct Prefix {
    style: Option<PrefixStyle>,
    /// 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (the numbers of `TF_CPP_MIN_LOG_LEVEL`).
    severity: Option<u8>,
    /// The logging thread, where the prefix names it (glog with a time, the C++ logger).
    thread: Option<u64>,
    /// The source path has Windows separators: TF built with MSVC.
    windows: bool,
    /// The date of a dated prefix: (year, month).
    date: Option<(u32, u32)>,
}

fn level(c: u8) -> bool {
    matches!(c, b'I' | b'W' | b'E' | b'F')
}

fn severity_of(c: u8) -> Option<u8> {
    b"IWEF".iter().position(|&l| l == c).map(|i| i as u8)
}

/// `I0923 10:53:31.254120  2567 bfc_allocator.cc:1058] ` (glog) and
/// `I0000 00:00:1795433278.865093   23376 bfc_allocator.cc:1049] ` (absl's own).
fn native_prefix(s: &str) -> Option<(u64, &str)> {
    let b = s.as_bytes();
    if b.len() < 7 || !level(b[0]) || !b[1..5].iter().all(u8::is_ascii_digit) || b[5] != b' ' {
        return None;
    }
    let mut words = s[6..].split_whitespace();
    let time = words.next()?;
    if !time.contains(':') || !time.bytes().all(|c| c.is_ascii_digit() || c == b':' || c == b'.') {
        return None;
    }
    let thread: u64 = words.next()?.parse().ok()?;
    let file = words.next()?;
    file.ends_with(']').then_some((thread, file))
}

/// `2025-01-05 09:48:28.754302: I tensorflow/core/...cc:1058] ` (TF's Python-era absl).
fn dated_prefix(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let date = b.len() > 30
        && b[..10].iter().enumerate().all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() });
    if !date {
        return None;
    }
    let rest = after(s, ": ")?;
    let rb = rest.as_bytes();
    (rb.len() > 2 && level(rb[0]) && rb[1] == b' ').then(|| rest[2..].split(']').next().unwrap_or(""))
}

/// `I tensorflow/core/common_runtime/bfc_allocator.cc:643] ` (glog without a time).
fn short_prefix(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if b.len() < 4 || !level(b[0]) || b[1] != b' ' {
        return None;
    }
    let file = s[2..].split_whitespace().next()?;
    (file.ends_with(']') && file.contains(".cc:")).then_some(file)
}

fn prefix(line: &str) -> Prefix {
    let s = line.trim_start();
    let (quoted, s) = match s.strip_prefix('>') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, s),
    };
    let s = s.trim_start_matches('*');
    let (style, thread, file, severity) = if let Some((thread, file)) = native_prefix(s) {
        (PrefixStyle::Native, Some(thread), file, severity_of(s.as_bytes()[0]))
    } else if let Some(file) = dated_prefix(s) {
        let level = after(s, ": ").and_then(|r| r.bytes().next()).and_then(severity_of);
        (PrefixStyle::Absl, None, file, level)
    } else if let Some(file) = short_prefix(s) {
        (PrefixStyle::Glog, None, file, severity_of(s.as_bytes()[0]))
    } else {
        return Prefix::default();
    };
    let date =
        (style == PrefixStyle::Absl).then(|| Some((s.get(..4)?.parse().ok()?, s.get(5..7)?.parse().ok()?))).flatten();
    Prefix {
        style: Some(if quoted { PrefixStyle::Quoted } else { style }),
        severity,
        thread,
        windows: file.contains('\\'),
        date,
    }
}

// ---- the era of a log without the allocator's report ------------------------------------

/// The month each of [`TfVariant::PRESETS`] (same order, newest first) began with its first
/// release: a log dated earlier cannot have been printed by it.
const PRESET_RELEASED: [(u32, u32); 9] =
    [(2024, 3), (2023, 7), (2023, 3), (2021, 8), (2020, 12), (2020, 7), (2019, 2), (2017, 8), (2017, 2)];

/// The index in [`TfVariant::PRESETS`] of `v`.
fn preset_index(v: TfVariant) -> usize {
    TfVariant::PRESETS.iter().position(|(_, p)| *p == v).unwrap_or(0)
}

/// The newest preset released by `date`; the oldest for a date before them all (TF 0.x
/// printed as 1.0 did).
fn newest_by(date: (u32, u32)) -> usize {
    PRESET_RELEASED.iter().position(|&r| r <= date).unwrap_or(PRESET_RELEASED.len() - 1)
}

/// The severity a TensorFlow / XLA log line's prefix gives it: 0 INFO, 1 WARNING, 2 ERROR,
/// 3 FATAL, as `TF_CPP_MIN_LOG_LEVEL` counts them. `None`: no log prefix (a continuation
/// of a multi-line message, or other output).
pub fn severity(line: &str) -> Option<u8> {
    prefix(line).severity
}

/// A `ran out of memory trying to allocate` line that starts an OOM report (not the
/// warning TF gives when an allocation that may fail did).
pub fn is_oom_header(line: &str) -> bool {
    line.contains("ran out of memory trying to allocate") && !not_a_failure(line)
}

/// TF's warning that an allocation allowed to fail did: its words, or its `with
/// freed_by_count=` clause, which only that warning prints (a paste may cut the words).
fn not_a_failure(line: &str) -> bool {
    line.contains(NOT_A_FAILURE) || line.contains(" with freed_")
}

/// True when the text holds TensorFlow's (or XLA's BFC) allocator report, its `OOM when
/// allocating tensor` error, its usage listing or the driver refusing its regions: what this
/// module reads, rather than another framework's message.
pub fn has_report(text: &str) -> bool {
    let (mut before, mut last) = ("", "");
    // (Looked for once, only when a `Stats:` block asks.)
    let bar_alone = std::cell::OnceCell::new();
    text.lines().any(|l| {
        // A `Stats:` block pasted alone, without its `Stats:` line: its limit, then what was
        // in use. With its `Stats:` line, the allocator's state without the header that names
        // the request (a paste from `Stats:` to the bar, then TF's `RESOURCE_EXHAUSTED: failed
        // to allocate memory`), unless XLA's message names it.
        let stats = last.trim().trim_matches(['>', '*', '`', ' ']).starts_with("Limit:")
            && l.trim().trim_matches(['>', '*', '`', ' ']).starts_with("InUse:")
            && (!before.contains("Stats:")
                || *bar_alone.get_or_init(|| !text.contains(XLA_REQUEST) && text.lines().any(is_occupancy)));
        (before, last) = (last, l);
        stats
            || is_oom_header(l)
            || l.contains("BFCAllocator dump for")
            || l.contains("OOM when allocating tensor")
            || l.contains("Current usage from device")
            || l.contains("See logs for memory state")
            || (l.contains("failed to allocate") && l.contains("from device"))
            || (l.contains("CUDNN_STATUS_ALLOC_FAILED") && prefix(l).style.is_some())
    })
}

/// The occupancy bar: the last line of a BFC allocator's dump.
pub fn is_occupancy(line: &str) -> bool {
    occupancy(line.trim().trim_start_matches('>').trim()).is_some()
}

/// A line that continues a multi-line TF log statement (the OOM warning, the `Stats:`
/// block, the CPU-feature notice, a kernel's error with its node and hint): hidden with
/// its statement.
pub fn is_continuation(line: &str) -> bool {
    let t = line.trim();
    t.is_empty()
        || t.starts_with("If the cause is memory fragmentation")
        || t.starts_with("Current allocation summary follows")
        || t.starts_with("To enable the following instructions")
        || t.starts_with("[[{{")
        || t.starts_with("[[node ")
        || t.starts_with("Hint: If you want to see a list of allocated tensors")
        || STATS_LABELS.iter().any(|l| t.starts_with(l))
}

// ---- one OOM report --------------------------------------------------------------------

/// What the log said about one failed allocation.
#[derive(Debug, Default)]
struct Report {
    name: Option<String>,
    header: Option<HeaderStyle>,
    /// "Current allocation summary follows." lines after a modern header.
    summary_follows: u32,
    requested: Option<Figure>,
    rounded: Option<u64>,
    op: Option<String>,
    /// The tensor (and node) the failure was for, matched after parsing.
    tensor: Option<usize>,
    dump_header: bool,
    bins: Vec<BinInfo>,
    /// Bins' sizes as printed: (bytes, bytes in use), to tell glibc's rounding from MSVC's.
    bin_texts: Vec<(u32, String, String)>,
    ancient_bins: bool,
    bin_for: Option<[u64; 2]>,
    chunk_state: Option<Vec<String>>,
    regions: Vec<RegionInfo>,
    /// The region being filled has a "Next region" line (its size is known).
    region_declared: bool,
    /// Every region had a "Next region" line: the pool's size is exact.
    regions_declared: bool,
    chunk_style: Option<ChunkStyle>,
    windows_addresses: bool,
    summary: Option<Vec<[u64; 2]>>,
    /// "N Chunks of size S totalling H": (N × S, H as printed).
    summary_texts: Vec<(u64, String)>,
    sum_total: Option<Figure>,
    totals: Option<Totals>,
    stats: Vec<(&'static str, Figure)>,
    in_stats: bool,
    occupancy: Option<String>,
}

#[derive(Clone, Copy, Debug)]
struct Totals {
    style: TotalsStyle,
    pool: Figure,
    limit: Figure,
    available: Option<Figure>,
    curr: Option<Figure>,
}

impl Report {
    fn has_dump(&self) -> bool {
        self.dump_header
            || !self.bins.is_empty()
            || !self.regions.is_empty()
            || !self.stats.is_empty()
            || self.totals.is_some()
            || self.summary.is_some()
    }

    fn is_empty(&self) -> bool {
        self.header.is_none() && !self.has_dump() && self.occupancy.is_none() && self.bin_for.is_none()
    }

    fn stat(&self, label: &str) -> Option<Figure> {
        self.stats.iter().find(|(l, _)| *l == label).map(|(_, v)| *v)
    }

    /// In-use bytes, exact from the chunk lines when the log has them.
    fn live_exact(&self) -> Option<u64> {
        (!self.regions.is_empty())
            .then(|| self.regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).sum())
    }

    /// The pool, exact from the "Next region" lines when every region has one.
    fn pool_exact(&self) -> Option<u64> {
        (self.regions_declared && !self.regions.is_empty()).then(|| self.regions.iter().map(|r| r.size).sum())
    }

    fn bin(&mut self, p: &str) -> bool {
        let rest = &p["Bin (".len()..];
        let Some(size) = rest.split(')').next().and_then(|s| s.trim().parse::<u64>().ok()) else { return false };
        if size < 256 || !size.is_power_of_two() {
            return false;
        }
        let int_after = |pat: &str| after(rest, pat).and_then(first_int);
        let (Some(total), Some(in_use)) = (int_after("Total Chunks:"), int_after("Chunks in use:")) else {
            return false;
        };
        let bytes = text_before(rest, " allocated for chunks");
        let requested_in_use = text_before(rest, " client-requested in use in bin");
        // " in use in bin" not preceded by "client-requested".
        let in_use_bytes = rest.match_indices(" in use in bin").find_map(|(i, _)| {
            let w = word_before(rest, i)?;
            (w != "client-requested").then(|| w.trim_end_matches('.'))
        });
        let requested_all = text_before(rest, " client-requested for chunks").and_then(parse_human);
        if requested_all.is_some() {
            self.ancient_bins = true;
        }
        let (Some(bytes), Some(bytes_in_use), Some(requested_in_use)) = (bytes, in_use_bytes, requested_in_use) else {
            return false;
        };
        let (Some(b), Some(bu), Some(ru)) =
            (parse_human(bytes), parse_human(bytes_in_use), parse_human(requested_in_use))
        else {
            return false;
        };
        let index = bin_for_size(size) as u32;
        self.bins.retain(|b| b.index != index);
        self.bin_texts.retain(|t| t.0 != index);
        self.bin_texts.push((index, bytes.to_string(), bytes_in_use.to_string()));
        self.bins.push(BinInfo {
            index,
            size,
            total_chunks: total,
            chunks_in_use: in_use,
            bytes: b,
            bytes_in_use: bu,
            requested_in_use: ru,
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
            self.windows_addresses = true;
        }
        // A chunk that does not continue the current region starts a new one (logs without
        // region lines, and chunks pasted without their "Next region" line).
        let continues = self.regions.last().is_some_and(|r| match r.chunks.last() {
            Some(last) => last.address + last.size == address,
            None => self.region_declared,
        });
        if !continues {
            self.regions.push(RegionInfo { address, size: 0, chunks: Vec::new(), ..RegionInfo::default() });
            self.region_declared = false;
            self.regions_declared = false;
        }
        let region = self.regions.last_mut().expect("a region was pushed above when there was none");
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

    /// MSVC's rounding shows where an exact figure prints as TF on Windows printed it and not
    /// as glibc would. `None`: no figure tells.
    fn rounding_evidence(&self) -> Option<Rounding> {
        let mut exact: Vec<(u64, &str)> = self.summary_texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
        // A bin's bytes are its chunks' sizes, when every chunk is listed.
        if self.pool_exact().is_some() {
            let chunks: Vec<&ChunkInfo> = self.regions.iter().flat_map(|r| &r.chunks).collect();
            for (index, bytes, in_use) in &self.bin_texts {
                let of_bin = chunks.iter().filter(|c| bin_for_size(c.size) as u32 == *index);
                let (all, used) = of_bin.fold((0, 0), |(a, u), c| (a + c.size, u + if c.in_use { c.size } else { 0 }));
                exact.push((all, bytes));
                exact.push((used, in_use));
            }
        }
        for (value, text) in exact {
            let (glibc, msvc) = (human(value) == text, human_with(value, Rounding::Msvc) == text);
            if glibc != msvc {
                return Some(if msvc { Rounding::Msvc } else { Rounding::Glibc });
            }
        }
        None
    }
}

// ---- the whole log ---------------------------------------------------------------------

/// A tensor the log says could not be allocated (`OOM when allocating tensor with shape...`).
#[derive(Debug, Default)]
struct Tensor {
    shape: Option<Vec<i64>>,
    dtype: Option<String>,
    device: Option<String>,
    allocator: Option<String>,
    /// The node or op that asked for it (`[[{{node X}}]]`, `[[Node: X = ...`, `[Op:X]`).
    node: Option<String>,
    /// Read from an `OOM when allocating tensor` line (not a node line alone).
    said_oom: bool,
}

impl Tensor {
    fn elements(&self) -> Option<u64> {
        self.shape.as_ref()?.iter().try_fold(1u64, |acc, &d| u64::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
    }

    fn bytes(&self) -> Option<u64> {
        self.elements()?.checked_mul(dtype_bytes(self.dtype.as_deref()?)?)
    }
}

/// The shape in `OOM when allocating tensor with shape[10000,32,28,28]`, `… of shape
/// [4096]` (TF ≤ 1.0) or `… with shapedim { size: 10000 } dim { size: 14 }` (TF 0.x).
fn tensor_shape(p: &str) -> Option<Vec<i64>> {
    let rest = after(p, "OOM when allocating tensor")?;
    let rest = after(rest, "shape")?.trim_start();
    if let Some(dims) = rest.strip_prefix('[') {
        let dims = dims.split(']').next()?;
        return dims.split(',').map(|d| d.trim().parse().ok()).collect();
    }
    let dims: Vec<i64> = rest
        .split("size:")
        .skip(1)
        .map_while(|d| d.trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    (!dims.is_empty()).then_some(dims)
}

fn dtype_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "float" | "float32" | "int32" | "uint32" => Some(4),
        "half" | "float16" | "bfloat16" | "int16" | "uint16" => Some(2),
        "double" | "float64" | "int64" | "uint64" | "complex64" => Some(8),
        "int8" | "uint8" | "bool" | "qint8" | "quint8" => Some(1),
        "complex128" => Some(16),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Log {
    /// The markers the text holds somewhere: only these are looked for on each line.
    markers: Vec<&'static str>,
    /// The text holds XLA's request line, a summary's chunk counts.
    has_xla_request: bool,
    has_chunk_counts: bool,
    reports: Vec<Report>,
    /// XLA's exact figure for a failed request, after its BFC report: `Out of memory while
    /// trying to allocate 92198188384 bytes`.
    xla_requests: Vec<u64>,
    /// The report each logging thread is writing (`None`: lines whose prefix names none).
    current: HashMap<Option<u64>, usize>,
    /// The thread of the last prefixed line: a line without a prefix continues its message.
    thread: Option<u64>,
    tensors: Vec<Tensor>,
    /// "Current usage from device": (device, allocator), the nodes, "Remaining".
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
    /// `Found device N with properties:` just above a `totalMemory:` line: whose figures
    /// they are; and the device TF first created its GPU:0 on (`physical GPU (device: N`).
    found_device: Option<u64>,
    /// The line (as counted in `lines_read`) of the last `OOM when allocating tensor`.
    tensor_line: Option<u64>,
    device_memory: Vec<(Option<u64>, Option<u64>, Option<u64>)>,
    created_device: Option<u64>,
    prefix: Option<PrefixStyle>,
    windows_paths: bool,
    /// The newest preset (an index in [`TfVariant::PRESETS`]) the lines outside the
    /// allocator's report allow: their dates, and wording that later releases changed.
    newest: Option<usize>,
    lines_read: u64,
    lines_used: u64,
}

impl Log {
    /// The device figures of the device TF ran on: where the log lists several devices'
    /// (`Found device 1 with properties:` ... `totalMemory: 12.00GiB freeMemory: 11.51GiB`),
    /// those of the device its GPU:0 was created on; none when only another device's are in
    /// the paste (a log cut so that device 1's block is what is left).
    fn pick_device_memory(&mut self) {
        let Some(created) = self.created_device else { return };
        let named: Vec<_> = self.device_memory.iter().filter(|m| m.0.is_some()).collect();
        if named.is_empty() {
            return;
        }
        let own = named.iter().find(|m| m.0 == Some(created)).map(|m| (m.1, m.2));
        (self.device_total, self.device_free) = own.unwrap_or((None, None));
    }

    /// The report the current thread is writing, started when there is none.
    fn report(&mut self) -> &mut Report {
        let idx = match self.current.get(&self.thread) {
            Some(&i) => i,
            None => self.start(),
        };
        &mut self.reports[idx]
    }

    /// Starts a new report for the current thread.
    fn start(&mut self) -> usize {
        self.reports.push(Report { regions_declared: true, ..Report::default() });
        let idx = self.reports.len() - 1;
        self.current.insert(self.thread, idx);
        idx
    }

    /// The current thread's report, or a new one when `done` says the current one is over.
    fn report_unless(&mut self, done: impl Fn(&Report) -> bool) -> &mut Report {
        if self.current.get(&self.thread).is_some_and(|&i| done(&self.reports[i])) {
            self.start();
        }
        self.report()
    }

    fn line(&mut self, line: &str) -> bool {
        if self.has_xla_request
            && let Some(n) = after(line, XLA_REQUEST).and_then(first_int)
        {
            self.xla_requests.push(n);
            return true;
        }
        let pre = prefix(line);
        if pre.style.is_some() {
            self.thread = pre.thread;
            self.windows_paths |= pre.windows;
        }
        if let Some(date) = pre.date {
            self.at_most(newest_by(date));
        }
        // "N Chunks of size S totalling H" has its count before the marker.
        if self.has_chunk_counts
            && let Some(i) = line.find(CHUNK_COUNTS)
            && let (Some(count), Some(size)) =
                (word_before(line, i).and_then(|w| w.parse::<u64>().ok()), first_int(&line[i + CHUNK_COUNTS.len()..]))
        {
            let r = self.report();
            r.summary.get_or_insert_with(Vec::new).push([count, size]);
            if let Some(total) = after(line, " totalling ").and_then(|t| t.split_whitespace().next()) {
                r.summary_texts.push((count.saturating_mul(size), total.to_string()));
            }
            return true;
        }
        // The tensor's message broken before its shape (`... OOM when allocating tensor wit` /
        // `h shape[3,3,512,1024] and type float on ...`, a console's wrap the repair could not
        // join): the shape, type and device from the line after.
        if self.tensor_line == Some(self.lines_read.saturating_sub(1))
            && !line.contains("OOM when allocating")
            && let Some(t) = self.tensors.last_mut().filter(|t| t.shape.is_none())
            && let Some(shape) = tensor_shape(&format!("OOM when allocating tensor {line}"))
        {
            t.shape = Some(shape);
            t.dtype = t
                .dtype
                .take()
                .or(after(line, " and type ").and_then(|r| r.split_whitespace().next()).map(str::to_string));
            t.device =
                t.device.take().or(after(line, " on ").and_then(|r| r.split_whitespace().next()).map(str::to_string));
            return true;
        }
        let trimmed = line.trim().trim_start_matches('>').trim();
        // A `Stats:` line as pasted into markdown (`**Limit:   3157432729**`, `` `InUse: 9984` ``).
        let stat = trimmed.trim_matches(|c| c == '*' || c == '`').trim();
        if let Some(&i) = self.current.get(&self.thread)
            && self.reports[i].in_stats
        {
            if let Some(label) = STATS_LABELS.iter().find(|l| stat.starts_with(**l))
                && let Some(v) = figure(stat[label.len()..].trim().trim_end_matches(['*', '`']).trim())
            {
                self.reports[i].stats.push((label, v));
                return true;
            }
            self.reports[i].in_stats = false;
        }
        // The block pasted without its `Stats:` line (or its log prefix): it starts with the limit.
        if let Some(v) = stat.strip_prefix("Limit:").and_then(|v| figure(v.trim().trim_end_matches(['*', '`']).trim()))
        {
            let r = self.report_unless(|r| !r.stats.is_empty());
            r.in_stats = true;
            r.stats.clear();
            r.stats.push(("Limit:", v));
            return true;
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
            self.report().occupancy = Some(bar);
            return true;
        }
        let Some((at, marker)) =
            self.markers.iter().filter_map(|m| line.find(m).map(|i| (i, *m))).min_by_key(|(i, _)| *i)
        else {
            return false;
        };
        let used = self.payload(marker, &line[at..]);
        if used && self.prefix.is_none() && !matches!(marker, "[[Node: " | "{{node " | "[[node " | "[Op:") {
            self.prefix = Some(pre.style.unwrap_or(PrefixStyle::None));
        }
        used
    }

    fn payload(&mut self, marker: &str, p: &str) -> bool {
        match marker {
            "Allocator (" => self.allocator_header(p),
            "Allocator ran out of memory trying to allocate " => {
                self.allocator_header(&p.replacen("Allocator ran out", "Allocator (BFC allocator) ran out", 1))
            }
            "Current allocation summary follows" => {
                let r = self.report();
                r.summary_follows += 1;
                if r.summary_follows >= 2 && r.header == Some(HeaderStyle::Modern) {
                    r.header = Some(HeaderStyle::Repeated);
                }
                true
            }
            "If the cause is memory fragmentation" => true,
            // (Not TF 1.x's warning in the same words that an allocation allowed to fail did: `Ran
            // out of memory trying to allocate 1.33GiB. The caller indicates that this is not a
            // failure`. It is no request of the report's.)
            "Ran out of memory trying to allocate " if not_a_failure(p) => false,
            "Ran out of memory trying to allocate " => {
                let h = p["Ran out of memory trying to allocate ".len()..].split_whitespace().next().unwrap_or("");
                // TF <= 1.12 says it after the dump: it belongs to the dump just printed.
                let r = self.report_unless(|r| r.header.is_some());
                r.requested = figure(h);
                r.header = Some(HeaderStyle::Old);
                true
            }
            "BFCAllocator dump for " => {
                let r = self.report_unless(Report::has_dump);
                r.name = Some(p["BFCAllocator dump for ".len()..].trim().to_string());
                r.dump_header = true;
                true
            }
            "Bin for " => {
                let mut parts = p["Bin for ".len()..].splitn(2, " was ");
                let req = parts.next().and_then(parse_human);
                let size = parts.next().and_then(|s| s.split(',').next()).and_then(parse_human);
                if let (Some(r), Some(s)) = (req, size) {
                    let report = self.report();
                    report.bin_for = Some([r, s]);
                    report.chunk_state = Some(Vec::new());
                    return true;
                }
                false
            }
            "Bin (" => {
                // The first bin again: a dump without its own header line (TF <= 1.12).
                let index = p["Bin (".len()..].split(')').next().and_then(|s| s.trim().parse::<u64>().ok());
                let again = |r: &Report| index.is_some_and(|s| s >= 256 && r.bins.iter().any(|b| b.size == s));
                self.report_unless(again).bin(p)
            }
            "Size: " => {
                if !p.contains(" | Requested Size: ") {
                    return false;
                }
                self.report().chunk_state.get_or_insert_with(Vec::new).push(format!("  {}", p.trim_end()));
                true
            }
            "Next region of size " => match first_int(p) {
                Some(size) => {
                    let r = self.report();
                    r.regions.push(RegionInfo { address: 0, size, chunks: Vec::new(), ..RegionInfo::default() });
                    r.region_declared = true;
                    true
                }
                None => false,
            },
            "InUse at " | "Free  at " | "Free at " | "Chunk at " => self.report().chunk(p),
            "Summary of in-use Chunks by size" => {
                self.report().summary.get_or_insert_with(Vec::new);
                true
            }
            "Sum Total of in-use chunks: " => match figure(&p["Sum Total of in-use chunks: ".len()..]) {
                Some(b) => {
                    self.report().sum_total = Some(b);
                    true
                }
                None => false,
            },
            "Total size in pool: " | "Total bytes in pool: " | "total_region_allocated_bytes_: " => {
                self.totals_line(marker, p)
            }
            "Stats:" => {
                let r = self.report();
                r.in_stats = true;
                r.stats.clear();
                // XLA's cudaMallocAsync allocator logs the block's first figure on this line.
                if let Some(v) = after(p, "Limit:").and_then(|v| figure(v.split_whitespace().next().unwrap_or(""))) {
                    r.stats.push(("Limit:", v));
                }
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
            "OOM when allocating tensor" => {
                let mut t = Tensor { said_oom: true, ..Tensor::default() };
                t.shape = tensor_shape(p);
                t.dtype = after(p, " and type ").and_then(|r| r.split_whitespace().next()).map(str::to_string);
                t.device = after(p, " on ").and_then(|r| r.split_whitespace().next()).map(str::to_string);
                t.allocator = after(p, "by allocator ")
                    .and_then(|r| r.split_whitespace().next())
                    .map(|a| a.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_').to_string());
                // Eager mode names the op on the same line: `... [Op:Conv2D]`.
                t.node = after(p, "[Op:").and_then(|r| r.split(']').next()).map(|s| s.trim().to_string());
                self.tensors.push(t);
                self.tensor_line = Some(self.lines_read);
                true
            }
            "[[Node: " | "{{node " | "[[node " | "[Op:" => self.node_line(marker, p),
            // `failed to allocate 1.51G (1617277696 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`;
            // ROCm's build prints no bytes, and its error's code in brackets (`failed to
            // allocate 8.00G from device: hipError_t(1002)`): the size as TF wrote it then.
            "failed to allocate " => match after(p, "(")
                .filter(|r| r.trim_start_matches(|c: char| c.is_ascii_digit()).starts_with(" bytes"))
                .and_then(first_int)
                .or_else(|| {
                    after(p, "failed to allocate ").and_then(|r| r.split_whitespace().next()).and_then(parse_human)
                }) {
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
            "Found device " => {
                self.found_device =
                    after(p, "Found device ").and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok());
                self.found_device.is_some()
            }
            "Created TensorFlow device (" => {
                let rest = &p[marker.len()..];
                if self.created_device.is_none() {
                    self.created_device = after(rest, "(device: ").and_then(first_int);
                }
                if let Some(dev) = rest.split(" with ").next() {
                    self.device_name.get_or_insert(dev.trim().to_string());
                }
                self.limit_mb = after(rest, " with ").and_then(first_int);
                self.device_model =
                    after(rest, "name: ").and_then(|r| r.split(',').next()).map(|s| s.trim().to_string());
                true
            }
            "totalMemory: " => {
                // TF 2.1 began to print `deviceMemorySize:` instead.
                self.at_most(preset_index(TfVariant::TF_1_13));
                self.device_total =
                    after(p, "totalMemory: ").and_then(|r| r.split_whitespace().next()).and_then(parse_human);
                self.device_free =
                    after(p, "freeMemory: ").and_then(|r| r.split_whitespace().next()).and_then(parse_human);
                self.device_memory.push((self.found_device.take(), self.device_total, self.device_free));
                self.device_total.is_some()
            }
            _ => false,
        }
    }

    fn allocator_header(&mut self, p: &str) -> bool {
        let Some(rest) = p.strip_prefix("Allocator (") else { return false };
        let Some(close) = rest.find(')') else { return false };
        let Some(tail) = after(rest, "trying to allocate ") else { return false };
        if not_a_failure(p) {
            return false;
        }
        let header = if after(tail, "requested by op").is_some() {
            HeaderStyle::Modern
        } else if tail.contains(").") {
            HeaderStyle::Mid
        } else if tail.contains("(rounded to ") {
            HeaderStyle::Rounded
        } else {
            HeaderStyle::Modern
        };
        let r = self.report_unless(|r| !r.is_empty());
        r.name = Some(rest[..close].to_string());
        r.requested = tail.split_whitespace().next().and_then(figure);
        r.rounded = after(tail, "(rounded to ").and_then(first_int);
        r.op = after(tail, "requested by op ").map(|op| op.trim().to_string()).filter(|o| !o.is_empty());
        r.header = Some(header);
        true
    }

    fn totals_line(&mut self, marker: &str, p: &str) -> bool {
        let style = match marker {
            "Total size in pool: " => TotalsStyle::Size,
            "Total bytes in pool: " => TotalsStyle::Pool,
            _ => TotalsStyle::Region,
        };
        let (Some(pool), Some(limit)) = (figure_after(p, marker), figure_after(p, "memory_limit_:")) else {
            return false;
        };
        let available = figure_after(p, "available size:").or_else(|| figure_after(p, "available bytes:"));
        let curr = figure_after(p, "curr_region_allocation_bytes_:");
        self.report().totals = Some(Totals { style, pool, limit, available, curr });
        true
    }

    fn node_line(&mut self, marker: &str, p: &str) -> bool {
        let rest = &p[marker.len()..];
        let node = match marker {
            "[[Node: " => rest.split(" = ").next(),
            "{{node " => rest.split("}}").next(),
            // TF 2.0-2.4: `[[node model/conv/Conv2D (defined at train.py:12) ]]`.
            "[[node " => rest.split([' ', ']']).next(),
            _ => rest.split(']').next(),
        };
        let node = node.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        if marker == "[[Node: " {
            // `[[Node: X = ...` is TF 1.x before 1.13; later releases print `{{node X}}`.
            self.at_most(preset_index(TfVariant::TF_1_3));
        }
        // The node line follows its tensor's line; a lone one (a paste that kept
        // only it) stands for a tensor of its own.
        match self.tensors.last_mut() {
            Some(t) if t.node.is_none() => t.node = node,
            Some(_) => {}
            None => self.tensors.push(Tensor { node, ..Tensor::default() }),
        }
        true
    }

    /// The log was printed by the preset at `index` of [`TfVariant::PRESETS`] or an older one.
    fn at_most(&mut self, index: usize) {
        self.newest = Some(self.newest.map_or(index, |n| n.max(index)));
    }

    /// The variant the lines outside the allocator's report point to, when they point to one
    /// older than the default (the format of TF 2.12): a guess for a log without the report,
    /// whose own lines would otherwise say which.
    fn era(&self) -> Option<TfVariant> {
        let default = preset_index(TfVariant::TF_2_12);
        self.newest.filter(|&n| n > default).and_then(|n| TfVariant::PRESETS.get(n)).map(|(_, v)| *v)
    }

    /// Each tensor to the report it was the failure of: the one whose request is its size,
    /// else (logs that print the request rounded, or not at all) the last one still
    /// without a tensor.
    fn match_tensors(&mut self) {
        for (ti, t) in self.tensors.iter().enumerate() {
            let free = |r: &Report| r.tensor.is_none() && r.header.is_some();
            let by_size = t.bytes().and_then(|bytes| {
                self.reports.iter().position(|r| {
                    free(r)
                        && r.requested
                            .is_some_and(|q| if q.exact { q.bytes == bytes } else { human(q.bytes) == human(bytes) })
                })
            });
            let target = by_size.or_else(|| self.reports.iter().rposition(free));
            match target {
                Some(i) => self.reports[i].tensor = Some(ti),
                // The tensor's line without any allocator report (a paste of the exception
                // alone): it is the failure.
                None if (t.shape.is_some() || t.said_oom)
                    && self.reports.iter().all(|r| r.header.is_none() && r.tensor.is_none()) =>
                {
                    // A paste that kept the allocator's state (its occupancy bar, its Stats)
                    // but not the line before it: that state is this failure's.
                    match self.reports.iter().position(|r| !r.is_empty()) {
                        Some(i) => self.reports[i].tensor = Some(ti),
                        None => self.reports.insert(0, Report { tensor: Some(ti), ..Report::default() }),
                    }
                }
                None => {}
            }
        }
        // The same failure is often said twice (the kernel's warning, then the exception with
        // the node): a matched tensor without a node takes the node of an unmatched twin.
        let matched: Vec<usize> = self.reports.iter().filter_map(|r| r.tensor).collect();
        for ti in 0..self.tensors.len() {
            if matched.contains(&ti) || self.tensors[ti].node.is_none() {
                continue;
            }
            let twin = matched.iter().copied().find(|&m| {
                let (a, b) = (&self.tensors[m], &self.tensors[ti]);
                a.node.is_none() && a.shape == b.shape && a.dtype == b.dtype
            });
            if let Some(m) = twin {
                self.tensors[m].node = self.tensors[ti].node.clone();
            }
        }
    }
}

/// An occupancy bar: 100 cells of `*`, `x`, `_` (the line's last word), or TF's empty text.
fn occupancy(trimmed: &str) -> Option<String> {
    if trimmed.ends_with("<allocator contains no memory>") {
        return Some("<allocator contains no memory>".to_string());
    }
    let word = trimmed.split_whitespace().next_back()?;
    // (A paste may glue the bar to its logger's prefix, `bfc_allocator.cc:474]****__`, and
    // lose a cell or two of it.)
    let word = match word.rsplit_once(']') {
        Some((head, bar)) if head.contains("allocator.cc:") => bar,
        _ => word,
    };
    let cells = if word.len() == 100 {
        100
    } else if word.len() >= 95 && word != trimmed.trim() {
        word.len()
    } else {
        0
    };
    (cells > 0 && word.bytes().all(|b| matches!(b, b'*' | b'x' | b'_'))).then(|| word.to_string())
}

/// The text with TF's "not a failure" warning whole on its header's line where a paste
/// wrapped it (`... trying to allocate 2.59GiB. The` / ` caller indicates that this is not a
/// failure, ...`): the header is then the warning it is, not an OOM.
fn not_a_failure_joined(text: &str) -> std::borrow::Cow<'_, str> {
    const TAIL: &str = "caller indicates that this is not a failure";
    if !text.contains(TAIL) || !text.contains("trying to allocate") {
        return std::borrow::Cow::Borrowed(text);
    }
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let wrapped = |i: usize| {
        let (l, n) = (lines[i], lines.get(i + 1).map_or("", |n| n.trim_start()));
        l.contains("trying to allocate")
            && !l.contains(NOT_A_FAILURE)
            && (n.starts_with(TAIL) || (n.starts_with("The ") && n[4..].starts_with(TAIL)))
    };
    if !(0..lines.len()).any(wrapped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < lines.len() {
        out.push_str(lines[i].trim_end_matches('\r'));
        if wrapped(i) {
            // (Its line count changes: lines after it are one earlier in what is read.)
            out.push(' ');
            out.push_str(lines[i + 1].trim());
            i += 1;
        }
        out.push('\n');
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// Reads a TF log.
pub fn parse(path: &Path, text: &str) -> Result<Dump, InputError> {
    let text = &*not_a_failure_joined(text);
    let mut log = Log {
        markers: MARKERS.iter().copied().filter(|m| text.contains(m)).collect(),
        has_xla_request: text.contains(XLA_REQUEST),
        has_chunk_counts: text.contains(CHUNK_COUNTS),
        ..Log::default()
    };
    // Lines as `wc -l` and an editor count them: a final newline ends the last line rather
    // than starting an empty one.
    for raw in text.split_terminator('\n') {
        log.lines_read += 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if log.line(line) {
            log.lines_used += 1;
        }
    }
    log.match_tensors();
    log.pick_device_memory();
    log.reports.retain(|r| !r.is_empty() || r.tensor.is_some());
    let found_anything = !log.reports.is_empty() || log.usage.is_some() || !log.refusals.is_empty() || log.cudnn_failed;
    if !found_anything {
        return Err(InputError {
            path: path.to_path_buf(),
            line: 0,
            message: "no out-of-memory error found. Looked for PyTorch's \"CUDA out of memory. Tried to allocate\" (and \
                      its MPS, ROCm and cudaMallocAsync forms), XLA's \"Out of memory while trying to allocate\" and \
                      \"Ran out of memory in memory space hbm\", cuBLAS/cuDNN/CUDA allocation failures, and TensorFlow's \
                      allocator report (\"ran out of memory trying to allocate\", \"BFCAllocator dump for\", \"Bin (...)\" \
                      lines, \"Stats:\", \"Current usage from device\", \"OOM when allocating tensor\", \"failed to \
                      allocate ... from device\"). Is this the output of the run that failed? (A PyTorch snapshot is a \
                      pickle: --from torch-snapshot)"
                .to_string(),
        });
    }
    Ok(build(path, log))
}

/// The figures of one report, exact where the log allows.
struct Figures {
    limit: u64,
    in_use: u64,
    pool: u64,
    largest_free: Option<u64>,
}

/// A figure as printed, made exact by `exact` when that prints the same (a partial paste
/// may lack chunks, so the sum of those it has is taken only when it agrees).
fn refine(printed: Option<Figure>, exact: Option<u64>) -> Option<u64> {
    match (printed, exact) {
        (Some(p), _) if p.exact => Some(p.bytes),
        (Some(p), Some(e)) if [human(e), human_with(e, Rounding::Msvc)].contains(&human(p.bytes)) => Some(e),
        (Some(p), _) => Some(p.bytes),
        (None, e) => e,
    }
}

fn figures(r: &Report, log: &Log) -> Figures {
    let pool_exact = r.pool_exact();
    let pool =
        refine(r.totals.map(|t| t.pool), pool_exact).unwrap_or_else(|| r.regions.iter().map(|reg| reg.size).sum());
    let limit_text = r.totals.map(|t| t.limit).or(r.stat("Limit:"));
    let limit = match (limit_text, r.totals.and_then(|t| t.available)) {
        (Some(l), _) if l.exact => l.bytes,
        // A rounded limit with nothing available beyond the pool is the pool (to 256 bytes).
        (Some(l), Some(avail)) if avail.bytes == 0 && human(l.bytes) == human(pool) => pool,
        (Some(l), _) => l.bytes,
        (None, _) => log.limit_mb.map(|mb| mb << 20).unwrap_or(0),
    };
    let in_use = refine(r.stat("InUse:"), r.live_exact()).or_else(|| refine(r.sum_total, None)).unwrap_or(0);
    let largest_free = r.regions.iter().flat_map(|reg| &reg.chunks).filter(|c| !c.in_use).map(|c| c.size).max();
    Figures { limit, in_use, pool, largest_free }
}

/// The failed request of a report.
fn oom_record(r: &Report, log: &Log, f: &Figures) -> OomRecord {
    let tensor = r.tensor.and_then(|t| log.tensors.get(t));
    let tensor_bytes = tensor.and_then(Tensor::bytes);
    // TF 1.x printed no dtype: the element size whose product prints as the log's figure.
    let inferred = || {
        let elements = tensor?.elements()?;
        let approx = r.requested?;
        [4u64, 2, 8, 1].iter().filter_map(|b| elements.checked_mul(*b)).find(|&e| human(e) == human(approx.bytes))
    };
    // XLA says the exact request after its report: the one that prints as the report's figure.
    let xla = || {
        let q = r.requested?;
        log.xla_requests.iter().copied().find(|&n| human(n) == human(q.bytes) && r.rounded.is_none_or(|ro| n <= ro))
    };
    // Nothing printed the size: the shape's, in the element size TF prints when it names no
    // type (float).
    let shaped = || r.requested.is_none().then(|| tensor?.elements()?.checked_mul(4)).flatten();
    let size_assumed = tensor_bytes.is_none() && inferred().is_none() && xla().is_none() && shaped().is_some();
    let exact = tensor_bytes.or_else(inferred).or_else(xla).or_else(shaped);
    let requested = match (exact, r.requested) {
        (_, Some(q)) if q.exact => Some(q.bytes),
        (Some(e), Some(q)) if human(e) == human(q.bytes) => Some(e),
        (_, Some(q)) => Some(q.bytes),
        (e, None) => e,
    };
    let exact_request = exact.is_some() && requested == exact;
    let outside = r.header.is_none() && tensor.is_none();
    let requested = requested.unwrap_or(0);
    OomRecord {
        requested,
        // TF's rounding, when the log printed it or the request is exact; else unknown (0).
        rounded: r.rounded.unwrap_or(if exact_request { rounded_bytes(requested) } else { 0 }),
        op: r
            .op
            .clone()
            .or_else(|| tensor.and_then(|t| t.node.clone()))
            .or_else(|| outside.then(|| "cudnn/create_handle".to_string())),
        shape: tensor.and_then(|t| t.shape.clone()),
        dtype: tensor.and_then(|t| t.dtype.clone()),
        outside,
        size_assumed,
        bytes_in_use: f.in_use,
        pool_bytes: f.pool,
        largest_free_block: f.largest_free.or(r.stat("LargestFreeBlock:").map(|s| s.bytes)).unwrap_or(0),
        limit_headroom: f.limit.saturating_sub(f.pool),
        // A TF log does not say what the device had free; what TF's allocator could still
        // take is its `available`, the limit less the pool, unless the driver refused it.
        device_free: if log.refusals.is_empty() { f.limit.saturating_sub(f.pool) } else { 0 },
        device_total: log.device_total.unwrap_or(0),
        step: -1,
        ..OomRecord::default()
    }
}

/// The sections of TF's report the log does not hold.
fn absent_sections(r: &Report, log: &Log, has_request: bool) -> Vec<Section> {
    let mut absent = Vec::new();
    for (section, present) in [
        (Section::Request, has_request || log.cudnn_failed),
        (Section::Bins, !r.bins.is_empty()),
        (Section::ChunkState, r.bin_for.is_some()),
        (Section::Regions, !r.regions.is_empty()),
        (Section::Summary, r.summary.is_some()),
        (Section::Totals, r.sum_total.is_some() || r.totals.is_some()),
        (Section::Stats, !r.stats.is_empty()),
        (Section::Occupancy, r.occupancy.is_some()),
        (Section::Usage, log.usage.is_some()),
        (Section::Events, false),
    ] {
        if !present {
            absent.push(section);
        }
    }
    absent
}

/// How the TF that wrote the log prints its report: from its own lines, else from what the
/// log's other lines say of its era.
fn variant_of(r: &Report, log: &Log) -> TfVariant {
    let old_like = matches!(r.header, Some(HeaderStyle::Old)) || r.chunk_style == Some(ChunkStyle::Old);
    let human_stats = r.stats.iter().any(|(l, v)| *l != "NumAllocs:" && !v.exact);
    let mut variant = TfVariant {
        header: r.header.unwrap_or(if old_like { HeaderStyle::Old } else { HeaderStyle::Modern }),
        bins: if r.ancient_bins { BinStyle::Ancient } else { BinStyle::Modern },
        chunks: r.chunk_style.unwrap_or(match r.header {
            Some(HeaderStyle::Old) => ChunkStyle::Old,
            Some(HeaderStyle::Mid) => ChunkStyle::Mid,
            _ => ChunkStyle::Modern,
        }),
        stats: if human_stats {
            StatsStyle::EightHuman
        } else if r.stats.iter().any(|(l, _)| matches!(*l, "Reserved:" | "PeakReserved:" | "LargestFreeBlock:")) {
            StatsStyle::Eight
        } else if !r.stats.is_empty() || old_like {
            StatsStyle::Five
        } else {
            StatsStyle::Eight
        },
        totals: r.totals.map(|t| t.style).unwrap_or(if old_like { TotalsStyle::None } else { TotalsStyle::Pool }),
        windows: r.windows_addresses || log.windows_paths || r.rounding_evidence() == Some(Rounding::Msvc),
        prefix: log.prefix.unwrap_or_default(),
    };
    // Without the header or chunk lines nothing above dates the log: what its other lines
    // say does, for the parts the log lacks (a log of TF 1.8 is not TF 2.12's).
    if r.header.is_none()
        && r.chunk_style.is_none()
        && let Some(era) = log.era()
    {
        variant.header = era.header;
        variant.chunks = era.chunks;
        if r.bins.is_empty() {
            variant.bins = era.bins;
        }
        if r.stats.is_empty() {
            variant.stats = era.stats;
        }
        if r.totals.is_none() {
            variant.totals = era.totals;
        }
    }
    variant
}

fn build(path: &Path, log: Log) -> Dump {
    let empty = Report::default();
    // The dump describes the first failure; every one is in `ooms`.
    let primary = log.reports.first().unwrap_or(&empty);
    let r = primary;
    let f = figures(r, &log);
    let has_request = r.header.is_some() || r.tensor.is_some();
    let oom = (has_request || log.cudnn_failed).then(|| oom_record(r, &log, &f));
    let mut ooms: Vec<OomRecord> = oom.iter().cloned().collect();
    for other in log.reports.iter().skip(1).filter(|o| o.header.is_some() || o.tensor.is_some()) {
        ooms.push(oom_record(other, &log, &figures(other, &log)));
    }
    let name = r
        .name
        .clone()
        .or_else(|| r.tensor.and_then(|t| log.tensors.get(t)).and_then(|t| t.allocator.clone()))
        .or_else(|| log.usage.as_ref().map(|u| u.1.clone()).filter(|a| !a.is_empty()))
        .unwrap_or_else(|| "GPU_0_bfc".into());
    let stat = |label: &str| r.stat(label).map(|s| s.bytes);
    let free_bytes = f.pool.saturating_sub(f.in_use);
    let largest = f.largest_free.unwrap_or_else(|| stat("LargestFreeBlock:").unwrap_or(0));
    let stats = Stats {
        bytes_limit: if r.stat("Limit:").is_some_and(|l| !l.exact) {
            f.limit
        } else {
            stat("Limit:").unwrap_or(f.limit)
        },
        bytes_in_use: f.in_use,
        peak_bytes_in_use: stat("MaxInUse:").unwrap_or(0),
        num_allocs: stat("NumAllocs:").unwrap_or(0),
        largest_alloc_size: stat("MaxAllocSize:").unwrap_or(0),
        pool_bytes: f.pool,
        peak_pool_bytes: f.pool,
        bytes_reserved: stat("Reserved:").unwrap_or(0),
        peak_bytes_reserved: stat("PeakReserved:").unwrap_or(0),
        largest_free_block: stat("LargestFreeBlock:").unwrap_or(largest),
        free_bytes,
        fragmentation: if free_bytes == 0 || f.largest_free.is_none() {
            0.0
        } else {
            1.0 - largest as f64 / free_bytes as f64
        },
        num_ooms: ooms.iter().filter(|o| !o.outside).count() as u64,
        num_device_refusals: log.refusals.len() as u64,
        ..Stats::default()
    };

    let absent = absent_sections(r, &log, has_request);
    let variant = variant_of(r, &log);
    let mut bins = r.bins.clone();
    bins.sort_by_key(|b| b.index);
    let tensor = r.tensor.and_then(|t| log.tensors.get(t));
    let device_name = log
        .usage
        .as_ref()
        .map(|u| u.0.clone())
        .or_else(|| tensor.and_then(|t| t.device.clone()))
        .or(log.device_name.clone())
        .unwrap_or_else(|| DEFAULT_DEVICE_NAME.to_string());
    let curr = r.totals.and_then(|t| t.curr).map_or(0, |c| c.bytes);
    Dump {
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
            model: log.device_model.clone().unwrap_or_else(|| "GPU (from a TensorFlow log)".into()),
            total: log.device_total.unwrap_or(0),
            free: log.device_free.unwrap_or(0),
            others: match (log.device_total, log.device_free) {
                (Some(t), Some(f)) => t.saturating_sub(f),
                _ => 0,
            },
        },
        allocator: AllocatorInfo {
            name,
            limit: f.limit,
            allow_growth: false,
            garbage_collection: false,
            fragmentation_fraction: 0.0,
            max_internal_fragmentation: oomscope_core::bfc::DEFAULT_MAX_INTERNAL_FRAGMENTATION,
            curr_region_allocation_bytes: curr,
            ..AllocatorInfo::default()
        },
        stats,
        ooms_total: ooms.len() as u64,
        oom,
        ooms,
        usage_by_node: log.nodes.clone(),
        bins,
        regions: r.regions.clone(),
        refusals: log.refusals.iter().map(|&bytes| Refusal { seq: 0, bytes, device_free: 0, outside: false }).collect(),
        imported: Some(Imported {
            from: ImportedFrom::TfLog,
            variant: Some(variant),
            absent,
            chunk_state: r.chunk_state.clone(),
            bin_for: r.bin_for,
            occupancy: r.occupancy.clone(),
            summary_by_size: r.summary.clone(),
            sum_total: refine(r.sum_total, r.live_exact()),
            usage_remaining: log.remaining,
            message: None,
            lines_read: log.lines_read,
            lines_used: log.lines_used,
            pasted: Vec::new(),
        }),
        ..Dump::default()
    }
}
