//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, a pickle) → dumps.
//!
//! Segments become regions, blocks chunks, the innermost frame outside PyTorch names each
//! allocation (`forward (model.py:42)`), all frames become its stack, the device trace
//! becomes the event history, and the last `oom` action the failed request. One device per
//! dump: the one that ran out of memory, unless asked.

use super::torch_frames::Stacks;
use crate::pickle::{self, Value};
use oomscope_core::record::{EventKind, Kind, UNNAMED_OP};
use oomscope_format::InputError;
use oomscope_format::{
    AllocatorInfo, BinInfo, ChunkInfo, DUMP_VERSION, DeviceInfo, Dump, EventInfo, Imported, NodeUsage, OomRecord,
    RegionInfo, Section, Source, StackInfo,
};
use oomscope_format::{DeviceKind, ImportedFrom, Refusal, SegmentPool, SourceKind, Stats};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Blocks, frames and trace entries visited before a snapshot is called too large: a pickle
/// that shares one list many times must not make the walk explode. A frames list shared by
/// many blocks is read, and counted, once.
const VISIT_BUDGET: u64 = 50_000_000;
/// Trace entries kept as events (the last ones).
const EVENTS_KEPT: usize = 100_000;

struct Walk<'p> {
    path: &'p Path,
    visits: u64,
    frames: Stacks,
    /// By stack number (from `frames`): the op it names and its index in `stacks`.
    named: Vec<Option<(Option<String>, u32, Kind)>>,
    stacks: Vec<StackInfo>,
}

impl Walk<'_> {
    fn err(&self, message: impl Into<String>) -> InputError {
        InputError { path: self.path.to_path_buf(), line: 0, message: message.into() }
    }

    fn visit(&mut self, n: usize) -> Result<(), InputError> {
        self.visits += n as u64;
        if self.visits > VISIT_BUDGET {
            return Err(self.err(format!("the snapshot has more than {VISIT_BUDGET} blocks, frames and events together; it is damaged, or too large to import")));
        }
        Ok(())
    }

    /// Counts what is built against the snapshot's budget.
    fn charge(&mut self, bytes: usize) -> Result<(), InputError> {
        self.frames.charge(bytes).map_err(|e| self.err(e.message()))
    }

    /// The op name and stack index for a list of frames. Each distinct stack is copied and
    /// named once; blocks that share it get its op name, charged.
    fn frames(&mut self, frames: Option<Value>) -> Result<(Option<String>, Option<u32>, Kind), InputError> {
        let read = self.frames.frames_read();
        let id = frames.and_then(|f| self.frames.stack(&f));
        self.visit((self.frames.frames_read() - read) as usize)?;
        let Some(id) = id else {
            return Ok((None, None, Kind::Unknown));
        };
        let i = id as usize;
        if self.named.len() <= i {
            self.named.resize(i + 1, None);
        }
        let (op, idx, kind) = match &self.named[i] {
            Some(named) => named.clone(),
            None => {
                let parsed = self.frames.frames(id).map_err(|e| self.err(e.message()))?;
                let op = super::torch_frames::node(&parsed);
                let kind = super::torch_frames::kind(&parsed);
                let idx = self.stacks.len() as u32;
                self.stacks.push(StackInfo { ips: Vec::new(), frames: parsed });
                self.named[i] = Some((op.clone(), idx, kind));
                (op, idx, kind)
            }
        };
        self.charge(op.as_ref().map_or(0, String::len))?;
        Ok((op, Some(idx), kind))
    }
}

fn int(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64())
}

/// Reads a snapshot pickle; `device` picks the device (default: the one with an OOM).
pub fn parse(path: &Path, bytes: &[u8], device: Option<i64>) -> Result<Dump, InputError> {
    parse_measured(path, bytes, device).map(|(d, _)| d)
}

/// [`parse`], and the bytes reading built, as counted against the snapshot's budget
/// ([`super::torch_frames::budget`]).
pub fn parse_measured(path: &Path, bytes: &[u8], device: Option<i64>) -> Result<(Dump, u64), InputError> {
    let top = pickle::read(bytes).map_err(|e| InputError {
        path: path.to_path_buf(),
        line: 0,
        message: format!(
            "not a readable pickle ({e}); a PyTorch snapshot is what torch.cuda.memory._dump_snapshot writes"
        ),
    })?;
    let mut w = Walk { path, visits: 0, frames: Stacks::new(bytes.len()), named: Vec::new(), stacks: Vec::new() };
    let (segments, traces, settings) = match &top {
        Value::List(_) => (top.items().unwrap_or_default(), Vec::new(), None),
        Value::Dict(_) => (
            top.get("segments").and_then(|s| s.items()).ok_or_else(|| {
                w.err("a pickled dict without \"segments\": not a PyTorch memory snapshot (expected segments, device_traces)")
            })?,
            top.get("device_traces").and_then(|t| t.items()).unwrap_or_default(),
            top.get("allocator_settings"),
        ),
        _ => return Err(w.err("the pickle holds no dict or list: not a PyTorch memory snapshot")),
    };
    w.visit(segments.len() + traces.len())?;
    if segments.iter().any(|s| !s.is_dict()) {
        return Err(w.err("\"segments\" holds something other than dicts: not a PyTorch memory snapshot"));
    }
    let trace_of = |d: usize| traces.get(d).and_then(|t| t.items()).unwrap_or_default();
    // The first device whose trace has an `oom`; a trace the pickle shares between devices
    // is searched once.
    let mut searched = HashSet::new();
    let mut oom_device = None;
    for (d, t) in traces.iter().enumerate() {
        if t.identity().is_some_and(|id| !searched.insert(id)) {
            continue;
        }
        let entries = t.items().unwrap_or_default();
        w.visit(entries.len())?;
        if entries.iter().any(|e| e.get("action").as_ref().and_then(Value::as_str) == Some("oom")) {
            oom_device = Some(d);
            break;
        }
    }
    let dev = device
        .or(oom_device.map(|d| d as i64))
        .or_else(|| segments.first().and_then(|s| s.get("device")).and_then(|d| d.as_i128()).map(|d| d as i64))
        .unwrap_or(0);

    // Blocks without frames: allocated while recording (the trace has their `alloc`) on a
    // thread without Python, or before recording began.
    let trace = trace_of(dev.max(0) as usize);
    w.visit(trace.len())?;
    let mut traced: HashSet<u64> = HashSet::new();
    let mut framed = false;
    for e in &trace {
        if e.get("action").as_ref().and_then(Value::as_str) == Some("alloc") {
            traced.insert(int(e, "addr").unwrap_or(0));
            framed |= e.get("frames").and_then(|f| f.item_count()).is_some_and(|n| n > 0);
        }
    }
    let mut regions = Vec::new();
    for seg in segments.iter().filter(|s| s.get("device").and_then(|d| d.as_i128()).unwrap_or(0) == dev as i128) {
        let (Some(address), Some(total)) = (int(seg, "address"), int(seg, "total_size")) else {
            return Err(w.err("a segment without \"address\" or \"total_size\": not a PyTorch memory snapshot"));
        };
        let blocks = seg.get("blocks").and_then(|b| b.items()).unwrap_or_default();
        w.visit(blocks.len())?;
        w.charge(size_of::<RegionInfo>() + blocks.len() * size_of::<ChunkInfo>())?;
        let mut chunks = Vec::with_capacity(blocks.len());
        let mut at = address;
        for b in &blocks {
            let size = int(b, "size").ok_or_else(|| w.err("a block without \"size\""))?;
            let state = b.get("state");
            let state = state.as_ref().and_then(Value::as_str).unwrap_or("");
            let in_use = state == "active_allocated";
            let pending_free = state == "active_pending_free";
            // Older snapshots keep the frames in the block's history.
            let frames =
                b.get("frames").or_else(|| b.get("history").and_then(|h| h.item(0)).and_then(|e| e.get("frames")));
            let (op, stack, kind) =
                if in_use || pending_free { w.frames(frames)? } else { (None, None, Kind::Unknown) };
            let address = int(b, "address").unwrap_or(at);
            let unframed = super::torch_frames::unframed(traced.contains(&address), framed);
            if in_use && op.is_none() {
                w.charge(unframed.len())?;
            }
            chunks.push(ChunkInfo {
                address,
                size,
                requested: int(b, "requested_size").unwrap_or(size),
                in_use,
                pending_free,
                next: None,
                op: if in_use { Some(op.unwrap_or_else(|| unframed.into())) } else { None },
                kind: (in_use && kind != Kind::Unknown).then_some(kind),
                stack,
                ..ChunkInfo::default()
            });
            at = at.saturating_add(size);
        }
        let pool = match seg.get("segment_type").as_ref().and_then(Value::as_str) {
            Some("small") => Some(SegmentPool::Small),
            Some("large") => Some(SegmentPool::Large),
            _ => None,
        };
        regions.push(RegionInfo {
            address,
            size: total,
            chunks,
            stream: int(seg, "stream"),
            pool,
            expandable: seg.get("is_expandable").and_then(|v| v.as_bool()).unwrap_or(false),
        });
    }
    regions.sort_by_key(|r| r.address);

    // The device trace: events, the failed request, and the peak.
    w.charge(trace.len() * size_of::<EventInfo>())?;
    let mut events = Vec::new();
    let mut oom: Option<(u64, u64, Option<String>, u64, Kind)> = None; // (size, device_free, op, time, kind)
    let (mut live, mut peak, mut allocs) = (0i128, 0i128, 0u64);
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for (seq, e) in trace.iter().enumerate() {
        let action = e.get("action");
        let action = action.as_ref().and_then(Value::as_str).unwrap_or("");
        let addr = int(e, "addr").unwrap_or(0);
        let size = int(e, "size").unwrap_or(0);
        let t_ns = e.get("time_us").and_then(|t| t.as_f64()).map_or(0, |t| (t.max(0.0) * 1000.0) as u64);
        let kind = match action {
            "alloc" => {
                allocs += 1;
                live += size as i128;
                peak = peak.max(live);
                sizes.insert(addr, size);
                EventKind::Alloc
            }
            "free_completed" | "free" => {
                live -= sizes.remove(&addr).unwrap_or(size) as i128;
                EventKind::Free
            }
            "segment_alloc" | "segment_map" => EventKind::Extend,
            "segment_free" | "segment_unmap" => EventKind::RegionFree,
            "oom" => EventKind::Oom,
            _ => continue,
        };
        let (op, _, what) = w.frames(e.get("frames"))?;
        if kind == EventKind::Oom {
            oom = Some((size, int(e, "device_free").unwrap_or(0), op.clone(), t_ns, what));
        }
        events.push(EventInfo { seq: seq as u64, t_ns, kind, address: addr, size, requested: size, op, step: -1 });
    }
    let events_total = events.len() as u64;
    if events.len() > EVENTS_KEPT {
        events.drain(..events.len() - EVENTS_KEPT);
    }

    let in_use: u64 = regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).sum();
    let pool: u64 = regions.iter().map(|r| r.size).sum();
    let largest_free = regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).map(|c| c.size).max().unwrap_or(0);
    let largest_alloc = regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| c.size).max().unwrap_or(0);
    let free = pool.saturating_sub(in_use);
    let device_free = oom.as_ref().map_or(0, |o| o.1);
    let limit = pool + device_free;
    let stats = Stats {
        bytes_limit: limit,
        bytes_in_use: in_use,
        peak_bytes_in_use: (peak.max(0) as u64).max(in_use),
        num_allocs: allocs.max(regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).count() as u64),
        largest_alloc_size: largest_alloc,
        pool_bytes: pool,
        peak_pool_bytes: pool,
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
    let expandable = settings.and_then(|s| s.get("expandable_segments")).and_then(|v| v.as_bool()).unwrap_or(false);
    // Everything a BFC report shows can be computed from segments and blocks, but the failed
    // request (without an `oom` action) and the history (without a trace).
    let mut absent = Vec::new();
    if oom.is_none() {
        absent.push(Section::Request);
    }
    if trace.is_empty() {
        absent.push(Section::Events);
    }
    let built = w.frames.used();
    let dump = Dump {
        version: DUMP_VERSION,
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
        peak: None,
        bins: bins_from_chunks(&regions),
        regions,
        stacks: w.stacks,
        events,
        events_total,
        steps: Vec::new(),
        refusals: Vec::<Refusal>::new(),
        outside: Vec::new(),
        workload: None,
        verdict: None,
        replay: None,
        what_ifs: None,
        process: None,
        imported: Some(Imported { from: ImportedFrom::TorchSnapshot, absent, ..Imported::default() }),
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
