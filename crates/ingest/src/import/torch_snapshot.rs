//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, a pickle) → dumps.
//!
//! Segments become regions, blocks chunks, the innermost frame outside PyTorch names each
//! allocation (`forward (model.py:42)`), all frames become its stack, the device trace
//! becomes the event history, and the last `oom` action the failed request. One device per
//! dump: the one that ran out of memory, unless asked.

use super::snapshot::{Action, BlockState, EntryStacks, Snapshot};
use oomscope_core::caching::MIN_BLOCK_SIZE;
use oomscope_core::record::{EventKind, Kind, UNNAMED_OP};
use oomscope_format::InputError;
use oomscope_format::{
    AllocatorInfo, BinInfo, ChunkInfo, DeviceInfo, Dump, EventInfo, Imported, NodeUsage, OomRecord, RegionInfo,
    Section, Source, StackInfo,
};
use oomscope_format::{DeviceKind, ImportedFrom, SegmentPool, SourceKind, Stats};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Trace entries kept as events (the last ones).
const EVENTS_KEPT: usize = 100_000;

/// Reads a snapshot pickle; `device` picks the device (default: the one with an OOM).
pub fn parse(path: &Path, bytes: &[u8], device: Option<i64>) -> Result<Dump, InputError> {
    parse_measured(path, bytes, device).map(|(d, _)| d)
}

/// The device's segments as regions, their blocks as chunks named by their stacks
/// (`traced`: blocks the trace allocated; `framed`: whether the trace has frames), by address.
fn regions(snap: &mut Snapshot, dev: i64, traced: &HashSet<u64>, framed: bool) -> Result<Vec<RegionInfo>, InputError> {
    let mut regions = Vec::new();
    // Taken out of the snapshot: each is read once, and its stacks named through `snap`.
    let segments = std::mem::take(&mut snap.segments);
    for seg in segments.into_iter().filter(|s| s.device == dev) {
        snap.charge(size_of::<RegionInfo>() + seg.blocks.len() * size_of::<ChunkInfo>())?;
        let mut chunks = Vec::with_capacity(seg.blocks.len());
        let mut at = seg.address;
        for b in &seg.blocks {
            let in_use = b.state == BlockState::Allocated;
            let pending_free = b.state == BlockState::PendingFree;
            let named = match b.stack {
                Some(id) => Some(snap.name(id)?),
                None => None,
            };
            let op = named.as_ref().and_then(|n| n.node.clone());
            snap.charge(op.as_ref().map_or(0, String::len))?;
            let address = b.address.unwrap_or(at);
            let unframed = super::torch_frames::unframed(traced.contains(&address), framed);
            if in_use && op.is_none() {
                snap.charge(unframed.len())?;
            }
            let kind = named.as_ref().map_or(Kind::Unknown, |n| n.kind);
            chunks.push(ChunkInfo {
                address,
                size: b.size,
                requested: b.requested.unwrap_or(b.size),
                in_use,
                pending_free,
                next: None,
                op: if in_use { Some(op.unwrap_or_else(|| unframed.into())) } else { None },
                kind: (in_use && kind != Kind::Unknown).then_some(kind),
                stack: named.map(|n| n.index),
                ..ChunkInfo::default()
            });
            at = at.saturating_add(b.size);
        }
        regions.push(RegionInfo {
            address: seg.address,
            size: seg.total_size,
            chunks,
            stream: seg.stream,
            pool: seg.small.map(|small| if small { SegmentPool::Small } else { SegmentPool::Large }),
            expandable: seg.expandable,
        });
    }
    regions.sort_by_key(|r| r.address);
    Ok(regions)
}

/// What a device's trace says: its events, the failed request (size, device free, op, time,
/// kind), and the bytes allocated and reserved through it, relative to its start, with
/// their highs.
struct TraceRead {
    events: Vec<EventInfo>,
    oom: Option<(u64, u64, Option<String>, u64, Kind)>,
    live: i128,
    allocs: u64,
    live_high: i128,
    reserved: i128,
    reserved_high: i128,
}

fn trace_events(snap: &mut Snapshot, trace: &[super::snapshot::Entry]) -> Result<TraceRead, InputError> {
    // The device trace: events, the failed request, and the peak.
    snap.charge(trace.len() * size_of::<EventInfo>())?;
    let mut events = Vec::new();
    let mut oom: Option<(u64, u64, Option<String>, u64, Kind)> = None; // (size, device_free, op, time, kind)
    // Bytes allocated and reserved through the trace, relative to its start; anchored to the
    // final state below (a trace may start mid-run, with memory already held).
    let (mut live, mut allocs) = (0i128, 0u64);
    let (mut live_high, mut reserved, mut reserved_high) = (0i128, 0i128, 0i128);
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for (seq, e) in trace.iter().enumerate() {
        let addr = e.addr.unwrap_or(0);
        let size = e.size.unwrap_or(0);
        let kind = match e.action {
            Action::Alloc => {
                allocs += 1;
                // The block it takes, as the final state counts blocks: 512-byte steps.
                let block = size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE);
                live += block as i128;
                live_high = live_high.max(live);
                sizes.insert(addr, block);
                EventKind::Alloc
            }
            Action::FreeCompleted | Action::Free => {
                live -=
                    sizes.remove(&addr).unwrap_or(size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)) as i128;
                EventKind::Free
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved += size as i128;
                reserved_high = reserved_high.max(reserved);
                EventKind::Extend
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved -= size as i128;
                EventKind::RegionFree
            }
            Action::Oom => EventKind::Oom,
            Action::FreeRequested | Action::Other => continue,
        };
        let (op, what) = match e.stack {
            Some(id) => {
                let n = snap.name(id)?;
                (n.node, n.kind)
            }
            None => (None, Kind::Unknown),
        };
        snap.charge(op.as_ref().map_or(0, String::len))?;
        if kind == EventKind::Oom {
            oom = Some((size, e.device_free.unwrap_or(0), op.clone(), e.t_ns, what));
        }
        events.push(EventInfo {
            seq: seq as u64,
            t_ns: e.t_ns,
            kind,
            address: addr,
            size,
            requested: size,
            op,
            step: -1,
        });
    }
    Ok(TraceRead { events, oom, live, allocs, live_high, reserved, reserved_high })
}

/// [`parse`], and the bytes reading built, as counted against the snapshot's budget
/// ([`super::torch_frames::budget`]).
pub fn parse_measured(path: &Path, bytes: &[u8], device: Option<i64>) -> Result<(Dump, u64), InputError> {
    let mut snap = Snapshot::read(path, bytes, EntryStacks::All)?;
    if let Some(d) = device {
        snap.check_device(d)?;
    }
    let dev = device.unwrap_or_else(|| snap.default_device());
    let trace = snap.trace_of(dev);

    // Blocks without frames: allocated while recording (the trace has their `alloc`) on a
    // thread without Python, or before recording began.
    let traced: HashSet<u64> =
        trace.iter().filter(|e| e.action == Action::Alloc).map(|e| e.addr.unwrap_or(0)).collect();
    let framed = trace.iter().any(|e| e.action == Action::Alloc && e.framed);
    let regions = regions(&mut snap, dev, &traced, framed)?;

    let TraceRead { mut events, oom, live, allocs, live_high, reserved, reserved_high } =
        trace_events(&mut snap, &trace)?;
    let events_total = events.len() as u64;
    if events.len() > EVENTS_KEPT {
        events.drain(..events.len() - EVENTS_KEPT);
    }
    let stacks: Vec<StackInfo> =
        snap.take_frames().into_iter().map(|frames| StackInfo { ips: Vec::new(), frames }).collect();
    let settings = snap.settings.clone();

    let in_use: u64 = regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).sum();
    let pool: u64 = regions.iter().map(|r| r.size).sum();
    let largest_free = regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).map(|c| c.size).max().unwrap_or(0);
    let largest_alloc = regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).max().unwrap_or(0);
    let free = pool.saturating_sub(in_use);
    let device_free = oom.as_ref().map_or(0, |o| o.1);
    let limit = pool + device_free;
    // The trace's highs over what was held when it began: the final state less what the
    // trace added (a trace from the program's start begins at 0).
    let high = |end: u64, net: i128, high: i128| -> u64 {
        let start = (end as i128 - net).max(0);
        u64::try_from(start + high).unwrap_or(u64::MAX).max(end)
    };
    let stats = Stats {
        bytes_limit: limit,
        bytes_in_use: in_use,
        peak_bytes_in_use: high(in_use, live, live_high),
        num_allocs: allocs.max(regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).count() as u64),
        largest_alloc_size: largest_alloc,
        pool_bytes: pool,
        peak_pool_bytes: high(pool, reserved, reserved_high),
        largest_free_block: largest_free,
        free_bytes: free,
        fragmentation: if free == 0 { 0.0 } else { 1.0 - largest_free as f64 / free as f64 },
        num_ooms: u64::from(oom.is_some()),
        ..Stats::default()
    };
    let oom = oom.map(|(size, device_free, op, t_ns, kind)| OomRecord {
        requested: size,
        rounded: size,
        op,
        kind: (kind != Kind::Unknown).then_some(kind),
        t_ns,
        step: -1,
        bytes_in_use: in_use,
        pool_bytes: pool,
        largest_free_block: largest_free,
        limit_headroom: device_free,
        device_free,
        ..OomRecord::default()
    });
    // Read as replay reads it; nothing else of the settings is needed here.
    let expandable = settings.is_some_and(|s| s.expandable_segments);
    // Everything a BFC report shows can be computed from segments and blocks, but the failed
    // request (without an `oom` action) and the history (without a trace).
    let mut absent = Vec::new();
    if oom.is_none() {
        absent.push(Section::Request);
    }
    if trace.is_empty() {
        absent.push(Section::Events);
    }
    let built = snap.built();
    let dump = Dump {
        tool: format!("oomscope {}", env!("CARGO_PKG_VERSION")),
        source: Source {
            kind: SourceKind::TorchSnapshot,
            path: Some(path.display().to_string()),
            command: None,
            created_unix: None,
        },
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: format!("cuda:{dev}"),
            model: "GPU (from a PyTorch snapshot)".into(),
            total: 0,
            free: device_free,
            others: 0,
        },
        allocator: AllocatorInfo {
            name: if expandable {
                "pytorch_caching_allocator (expandable_segments)".into()
            } else {
                "pytorch_caching_allocator".into()
            },
            limit,
            allow_growth: true,
            expandable_segments: expandable,
            ..AllocatorInfo::default()
        },
        stats,
        ooms: oom.iter().cloned().collect(),
        ooms_total: u64::from(oom.is_some()),
        oom,
        usage_by_node: usage_from_chunks(&regions),
        bins: bins_from_chunks(&regions),
        regions,
        stacks,
        events,
        events_total,
        imported: Some(Imported { from: ImportedFrom::TorchSnapshot, absent, ..Imported::default() }),
        ..Dump::default()
    };
    Ok((dump, built))
}

/// Live bytes by op, largest first (ties in address order).
pub fn usage_from_chunks(regions: &[RegionInfo]) -> Vec<NodeUsage> {
    // Keys in the order ops first appear (address order), so ties list the first one first.
    let mut first_seen: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    let live = regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| {
        let op = c.op.as_deref().unwrap_or(UNNAMED_OP);
        let key = *first_seen.entry(op).or_insert_with(|| {
            names.push(op);
            names.len() - 1
        });
        (key, c.size, c.requested)
    });
    let live: Vec<(usize, u64, u64)> = live.collect();
    NodeUsage::rank(live, |k| names[k].to_string())
}

/// TF's bin summary computed from chunks: counted into bins by size, in use or free.
pub fn bins_from_chunks(regions: &[RegionInfo]) -> Vec<BinInfo> {
    oomscope_core::bfc::bins_of(regions.iter().flat_map(|r| &r.chunks).map(|c| (c.size, c.requested, c.in_use)))
}
