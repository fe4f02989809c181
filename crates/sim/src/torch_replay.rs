//! PyTorch snapshots replayed through oomscope's re-implementation of PyTorch's caching
//! allocator.
//!
//! - **As recorded** ([`replay`]): the trace's requests (`alloc`, `free_requested`,
//!   `free_completed`, on their streams, sizes as requested) go through the allocator with
//!   the snapshot's settings, and its segment events are taken as facts about the device:
//!   a `segment_alloc`/`segment_map` gives the address the device hands out next, a
//!   `segment_free`/`segment_unmap` releases that segment where the real allocator did (in
//!   an out-of-memory retry or `empty_cache`). A trace that starts from an empty allocator
//!   ends in the snapshot's final state; one that starts mid-run starts from the state
//!   rebuilt from the final snapshot, and the report counts how many allocations landed
//!   where PyTorch put them.
//! - **What if** ([`what_if`]): the same requests under other settings on a device of a
//!   given size, the allocator making every choice itself: does the OOM still happen, and
//!   what are peak reserved and peak allocated.

use oomscope_base::hash::FastMap;
use oomscope_core::caching::{
    Caching, CachingOptions, PoolKind, RestoredBlock, RestoredSegment, SMALL_BUFFER, SMALL_SIZE, Settings,
};
use oomscope_core::device::{Device, DeviceDescription, DeviceError, MemInfo};
use oomscope_core::record::{Kind, Meta};
use oomscope_format::InputError;
use oomscope_format::{DeviceKind, Dump, Replayed, SettingChange, Source, SourceKind, WhatIf};
use oomscope_ingest::import::snapshot::{self as read, BlockState, EntryStacks, RecordedSettings, Snapshot};
use oomscope_ingest::import::torch_frames;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What a trace entry did (`action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
}

/// One trace entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub action: Action,
    /// The address (for `oom`: the device's free bytes, as PyTorch records it).
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub t_ns: u64,
    /// The aten op and user line its frames name: an index into [`SnapshotTrace::ops`]
    /// (0, 1, 2: the nodes of blocks without frames, [`torch_frames::unframed`]).
    pub op: u32,
}

/// A block of the final state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalBlock {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    /// `active_allocated`.
    pub allocated: bool,
    /// `active_pending_free`.
    pub pending_free: bool,
    pub op: Option<String>,
    /// What its frames say it is for.
    pub kind: Kind,
}

/// A segment of the final state.
#[derive(Clone, Debug)]
pub struct FinalSegment {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub expandable: bool,
    pub blocks: Vec<FinalBlock>,
}

/// Where the settings came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingsFrom {
    /// The snapshot's `allocator_settings` (PyTorch 2.4 and later).
    Recorded,
    /// Read from what the snapshot shows (expandable segments by their flag).
    Inferred,
}

/// One device of a snapshot: its final state, its trace, its allocator's settings.
#[derive(Clone, Debug)]
pub struct SnapshotTrace {
    pub path: String,
    pub device: i64,
    pub segments: Vec<FinalSegment>,
    pub entries: Vec<Entry>,
    /// The entries' op names, each once; the first is for entries without frames.
    pub ops: Vec<String>,
    /// What each op's frames say it is for, by op number.
    pub kinds: Vec<Kind>,
    pub settings: Settings,
    pub settings_from: SettingsFrom,
}

/// Op names, each kept once: 0 names blocks live before the trace, 1 and 2 entries without
/// frames (see [`torch_frames::unframed`]).
struct Ops {
    names: Vec<String>,
    /// What the frames of each op's entries say it is for.
    kinds: Vec<Kind>,
    index: HashMap<String, u32>,
}

/// The op number of an entry without frames, when other entries have some.
const NO_PYTHON_FRAMES: u32 = 1;
/// The op number of an entry without frames, when no entry has any.
const NO_FRAMES: u32 = 2;

impl Ops {
    fn new() -> Ops {
        let names = [torch_frames::BEFORE_RECORDING, torch_frames::NO_PYTHON_FRAMES, torch_frames::NO_FRAMES];
        Ops { names: names.map(str::to_string).to_vec(), kinds: vec![Kind::Unknown; 3], index: HashMap::new() }
    }

    /// The number of a named node; an entry with none gets [`NO_PYTHON_FRAMES`] (the
    /// caller changes it when no entry has frames).
    fn id(&mut self, op: Option<String>, kind: Kind) -> u32 {
        let Some(op) = op else { return NO_PYTHON_FRAMES };
        if let Some(&id) = self.index.get(&op) {
            return id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(op.clone());
        self.kinds.push(kind);
        self.index.insert(op, id);
        id
    }
}

/// Settings from `allocator_settings` (max_split_size −1 is unset; divisions keyed by the
/// interval's start in MiB).
fn recorded_settings(r: &RecordedSettings) -> Settings {
    let mut out = Settings::default();
    if let Some(m) = r.max_split_size
        && m > 0
        && m < i128::from(u64::MAX >> 1)
    {
        out.max_split_size = Some(m as u64);
    }
    if let Some(t) = r.garbage_collection_threshold {
        out.garbage_collection_threshold = t;
    }
    out.expandable_segments = r.expandable_segments;
    for (k, n) in &r.roundup_power2_divisions {
        let Ok(mib) = k.parse::<u64>() else { continue };
        if mib.is_power_of_two() {
            let i = mib.trailing_zeros() as usize;
            if let Some(slot) = out.roundup_power2_divisions.get_mut(i) {
                *slot = *n;
            }
        }
    }
    out.text = out.to_conf();
    out
}

impl SnapshotTrace {
    /// Reads device `gpu` of a snapshot pickle (default: [`Snapshot::default_device`]).
    pub fn read(path: &Path, bytes: &[u8], gpu: Option<i64>) -> Result<SnapshotTrace, InputError> {
        let mut snap = Snapshot::read(path, bytes, EntryStacks::Allocations)?;
        if snap.list_form {
            return Err(InputError {
                path: path.to_path_buf(),
                line: 0,
                message: "not a PyTorch 2.x snapshot (a dict with segments and device_traces): this one has no trace to replay"
                    .into(),
            });
        }
        if let Some(d) = gpu {
            snap.check_device(d)?;
        }
        let device = gpu.unwrap_or_else(|| snap.default_device());
        let trace = snap.trace_of(device);
        let mut ops = Ops::new();
        let mut op_of: HashMap<u32, u32> = HashMap::new();
        let mut finals = Vec::new();
        let mut any_expandable = false;
        // Taken out of the snapshot: each is read once, and its stacks named through `snap`.
        let segments = std::mem::take(&mut snap.segments);
        for seg in segments.into_iter().filter(|s| s.device == device) {
            let pool = match seg.small {
                Some(true) => PoolKind::Small,
                Some(false) => PoolKind::Large,
                None if seg.total_size == SMALL_BUFFER => PoolKind::Small,
                None => PoolKind::Large,
            };
            any_expandable |= seg.expandable;
            snap.charge(size_of::<FinalSegment>() + seg.blocks.len() * size_of::<FinalBlock>())?;
            let mut blocks = Vec::with_capacity(seg.blocks.len());
            let mut at = seg.address;
            for b in &seg.blocks {
                let (op, kind) = match b.stack {
                    Some(id) => {
                        let n = snap.name(id)?;
                        (n.node, n.kind)
                    }
                    None => (None, Kind::Unknown),
                };
                snap.charge(op.as_ref().map_or(0, String::len))?;
                blocks.push(FinalBlock {
                    addr: b.address.unwrap_or(at),
                    size: b.size,
                    requested: b.requested.unwrap_or(b.size),
                    allocated: b.state == BlockState::Allocated,
                    pending_free: b.state == BlockState::PendingFree,
                    op,
                    kind,
                });
                at = at.saturating_add(b.size);
            }
            finals.push(FinalSegment {
                addr: seg.address,
                size: seg.total_size,
                stream: seg.stream.unwrap_or(0),
                pool,
                expandable: seg.expandable,
                blocks,
            });
        }
        finals.sort_by_key(|s| s.addr);
        snap.charge(trace.len() * size_of::<Entry>())?;
        let mut entries = Vec::with_capacity(trace.len());
        let mut framed = false;
        for e in trace.iter() {
            let action = match e.action {
                read::Action::Alloc => Action::Alloc,
                read::Action::FreeRequested => Action::FreeRequested,
                read::Action::FreeCompleted => Action::FreeCompleted,
                read::Action::SegmentAlloc => Action::SegmentAlloc,
                read::Action::SegmentFree => Action::SegmentFree,
                read::Action::SegmentMap => Action::SegmentMap,
                read::Action::SegmentUnmap => Action::SegmentUnmap,
                read::Action::Oom => Action::Oom,
                // Before PyTorch 2.1 a free was one entry; the caching allocator's replay reads
                // 2.1's requested and completed frees.
                read::Action::Free | read::Action::Other => continue,
            };
            any_expandable |= matches!(action, Action::SegmentMap | Action::SegmentUnmap);
            framed |= action == Action::Alloc && e.framed;
            let op = match (action, e.stack) {
                (Action::Alloc | Action::Oom, Some(id)) => match op_of.get(&id) {
                    Some(&op) => op,
                    None => {
                        let n = snap.name(id)?;
                        let op = ops.id(n.node, n.kind);
                        op_of.insert(id, op);
                        op
                    }
                },
                (Action::Alloc | Action::Oom, None) => NO_PYTHON_FRAMES,
                _ => 0,
            };
            entries.push(Entry {
                action,
                addr: if action == Action::Oom { e.device_free } else { e.addr }.unwrap_or(0),
                size: e.size.unwrap_or(0),
                stream: e.stream.unwrap_or(0),
                t_ns: e.t_ns,
                op,
            });
        }
        if !framed {
            for e in entries.iter_mut().filter(|e| e.op == NO_PYTHON_FRAMES) {
                e.op = NO_FRAMES;
            }
        }
        let (settings, settings_from) = match &snap.settings {
            Some(r) => (recorded_settings(r), SettingsFrom::Recorded),
            None => {
                let mut s = Settings::default();
                s.expandable_segments = any_expandable;
                s.text = s.to_conf();
                (s, SettingsFrom::Inferred)
            }
        };
        Ok(SnapshotTrace {
            path: path.display().to_string(),
            device,
            segments: finals,
            entries,
            ops: ops.names,
            kinds: ops.kinds,
            settings,
            settings_from,
        })
    }

    /// True when the trace starts from an empty allocator: everything it frees it
    /// allocated, and everything in the final state it made.
    pub fn starts_empty(&self) -> bool {
        if self.entries.is_empty() {
            return false;
        }
        let mut live: FastMap<u64, ()> = FastMap::default();
        let mut segs: Vec<(u64, u64)> = Vec::new();
        for e in &self.entries {
            match e.action {
                Action::Alloc => {
                    live.insert(e.addr, ());
                }
                Action::FreeRequested | Action::FreeCompleted => {
                    if !live.contains_key(&e.addr) {
                        return false;
                    }
                    if e.action == Action::FreeCompleted {
                        live.remove(&e.addr);
                    }
                }
                Action::SegmentAlloc | Action::SegmentMap => segs.push((e.addr, e.size)),
                Action::SegmentFree | Action::SegmentUnmap => {
                    if !segs.iter().any(|&(a, s)| a <= e.addr && e.addr < a + s) {
                        return false;
                    }
                }
                Action::Oom => {}
            }
        }
        self.segments.iter().all(|s| segs.iter().any(|&(a, sz)| a <= s.addr && s.addr < a + sz))
            && self
                .segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.allocated || b.pending_free)
                .all(|b| live.contains_key(&b.addr))
    }
}

/// What the device did in the recorded run, handed to the replayed allocator in order.
#[derive(Debug, Default)]
struct Script {
    /// Segment events since the last request: (address, bytes).
    next: VecDeque<(u64, u64)>,
    /// Refuse everything: the recorded run ran out of memory here.
    refuse: bool,
    /// What the device said was free at that OOM.
    free_at_oom: u64,
}

/// A device that hands out the recorded addresses; addresses it was not told of come from
/// a range of their own, far from real ones.
///
/// As recorded, the trace's segment events say which address comes next. In a what-if the
/// allocator asks for segments of its own choosing: one of a size the recorded run also got
/// gets the address the run got for it (in the run's order, where it overlaps no segment
/// held now), so that ties between equal free blocks, which PyTorch breaks by address, go
/// as they went in the run.
#[derive(Debug)]
struct ScriptedDevice {
    total: u64,
    used: u64,
    fresh: u64,
    script: Arc<Mutex<Script>>,
    /// What-ifs: the run's segment addresses by size, in the run's order.
    recorded: HashMap<u64, VecDeque<u64>>,
    /// Segments handed out now: address, bytes.
    live: BTreeMap<u64, u64>,
}

const FRESH_BASE: u64 = 0x5000_0000_0000;

impl ScriptedDevice {
    fn take(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        let script = Arc::clone(&self.script);
        let mut s = script.lock().map_err(|_| DeviceError::Other("script poisoned".into()))?;
        if s.refuse || bytes > self.total.saturating_sub(self.used) {
            return Err(DeviceError::OutOfMemory { requested: bytes, free: self.total.saturating_sub(self.used) });
        }
        self.used += bytes;
        let addr = match s.next.front() {
            Some(&(addr, size)) if size == bytes => {
                s.next.pop_front();
                addr
            }
            _ => match self.recorded_address(bytes) {
                Some(a) => a,
                None => {
                    let a = self.fresh;
                    self.fresh = self.fresh.saturating_add(bytes.next_multiple_of(SMALL_BUFFER));
                    a
                }
            },
        };
        self.live.insert(addr, bytes);
        Ok(addr)
    }

    /// The next address the recorded run got for a segment of `bytes` that overlaps none
    /// held now.
    fn recorded_address(&mut self, bytes: u64) -> Option<u64> {
        let queue = self.recorded.get_mut(&bytes)?;
        while let Some(a) = queue.pop_front() {
            let end = a.saturating_add(bytes);
            let clear = self.live.range(..end).next_back().is_none_or(|(&at, &n)| at.saturating_add(n) <= a);
            if clear {
                return Some(a);
            }
        }
        None
    }
}

impl Device for ScriptedDevice {
    fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        self.take(bytes)
    }

    fn free(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError> {
        self.used = self.used.saturating_sub(bytes);
        self.live.remove(&addr);
        Ok(())
    }

    fn mem_info(&self) -> MemInfo {
        let s = self.script.lock().ok();
        match s {
            Some(s) if s.refuse => MemInfo { free: s.free_at_oom, total: self.total },
            _ => MemInfo { free: self.total.saturating_sub(self.used), total: self.total },
        }
    }

    fn describe(&self) -> DeviceDescription {
        DeviceDescription { kind: DeviceKind::Sim, model: "the snapshot's GPU, replayed".into(), others: 0 }
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        // A reservation starts where the recorded run's first mapping of it was.
        let s = self.script.lock().map_err(|_| DeviceError::Other("script poisoned".into()))?;
        let exhausted = || DeviceError::Other(format!("no address space left to reserve {bytes} bytes"));
        let a = match s.next.front() {
            Some(&(addr, _)) => addr,
            None => {
                // Each reservation spans 9/8 of the device: thousands of streams on a device
                // of unknown size run out of 64-bit addresses, as a GPU's 48-bit space would.
                let a = self.fresh;
                self.fresh = bytes
                    .checked_next_multiple_of(SMALL_BUFFER)
                    .and_then(|b| self.fresh.checked_add(b))
                    .ok_or_else(exhausted)?;
                a
            }
        };
        a.checked_add(bytes).ok_or_else(exhausted)?;
        Ok(a)
    }

    fn map(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError> {
        self.map_pages(addr, bytes, 1)
    }

    fn map_pages(&mut self, addr: u64, page: u64, count: u64) -> Result<(), DeviceError> {
        let mut s = self.script.lock().map_err(|_| DeviceError::Other("script poisoned".into()))?;
        let bytes = page.saturating_mul(count);
        let free = self.total.saturating_sub(self.used);
        if s.refuse || bytes > free {
            return Err(DeviceError::OutOfMemory { requested: page.min(bytes), free });
        }
        self.used += bytes;
        // The recorded mappings these pages cover are used up: one may cover several
        // pages, a run several mappings.
        let end = addr.saturating_add(bytes);
        while let Some(front) = s.next.front_mut()
            && front.0 >= addr
            && front.0 < end
            && (front.0 - addr).is_multiple_of(page.max(1))
        {
            let covered = (end - front.0).min(front.1);
            if front.1 > covered {
                front.0 += covered;
                front.1 -= covered;
            } else {
                s.next.pop_front();
            }
        }
        Ok(())
    }

    fn unmap(&mut self, _addr: u64, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }
}

/// How a replay went.
#[derive(Debug)]
pub struct Outcome {
    /// The state at the first OOM (the replay goes on after it, as the program did), else at
    /// the end.
    pub dump: Dump,
    /// `dump` is the state at the first OOM.
    pub at_first_oom: bool,
    /// With `keep_going`, the state at the first OOM (`dump` is the end's).
    pub first_oom: Option<Dump>,
    /// As recorded: the entries that begin a release the program asked for (`empty_cache`),
    /// not the allocator (see [`program_release`]).
    pub program_releases: Vec<usize>,
    /// The trace started from an empty allocator (else the start was rebuilt).
    pub starts_empty: bool,
    /// Allocations replayed, and those placed at the address PyTorch gave them.
    pub allocs: u64,
    pub placed: u64,
    /// Segments and live blocks put back at the start of a mid-run trace.
    pub restored_segments: u64,
    pub restored_blocks: u64,
    /// Allocations that failed in the replay (as recorded: the trace's own OOMs).
    pub ooms: u64,
    /// Segments of the final state, and those reproduced block for block.
    pub final_segments: u64,
    pub final_segments_equal: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    pub settings: Settings,
}

/// Replay options.
#[derive(Clone, Debug)]
pub struct Options {
    pub settings: Settings,
    /// The device's capacity (`None`: as large as needed).
    pub device: Option<u64>,
    /// A memory fraction's cap on what the allocator may reserve, in bytes.
    pub allowed: Option<u64>,
    /// Follow the recorded segment events (as recorded) or let the allocator decide.
    pub as_recorded: bool,
    /// Show the state at the end, every OOM in it, rather than the state at the first OOM.
    pub keep_going: bool,
}

impl Options {
    /// The replay on the memory `limit` describes (`None`: as large as needed).
    pub fn on(settings: Settings, limit: Option<Limit>, as_recorded: bool) -> Options {
        let (device, allowed) = match limit {
            Some(Limit::Fraction(b)) => (None, Some(b)),
            Some(l) => (Some(l.bytes()), None),
            None => (None, None),
        };
        Options { settings, device, allowed, as_recorded, keep_going: false }
    }

    /// The same, showing the state at the end (`--keep-going`).
    pub fn going_on(mut self, keep_going: bool) -> Options {
        self.keep_going = keep_going;
        self
    }
}

/// The memory a recorded run could have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The device's size, as the user gave it.
    Device(u64),
    /// At a recorded OOM the device refused: what PyTorch held plus what it had free.
    DeviceAtOom(u64),
    /// At a recorded OOM the device had room for the segment PyTorch wanted, so a memory
    /// fraction refused it: the cap, between the most the run reserved and what that
    /// request needed, taken as the roundest figure there (a fraction of 2 GiB shows as
    /// 2 GiB exactly).
    Fraction(u64),
    /// The run gave segments back with no OOM recorded: the most it reserved.
    PeakReserved(u64),
}

impl Limit {
    pub fn bytes(self) -> u64 {
        match self {
            Limit::Device(b) | Limit::DeviceAtOom(b) | Limit::Fraction(b) | Limit::PeakReserved(b) => b,
        }
    }

    /// As a dump records it.
    pub fn to_dump(self) -> oomscope_format::ReplayLimit {
        use oomscope_format::LimitKind;
        let kind = match self {
            Limit::Device(_) => LimitKind::Device,
            Limit::DeviceAtOom(_) => LimitKind::DeviceAtOom,
            Limit::Fraction(_) => LimitKind::Fraction,
            Limit::PeakReserved(_) => LimitKind::PeakReserved,
        };
        oomscope_format::ReplayLimit { kind, bytes: self.bytes() }
    }
}

const UNLIMITED: u64 = oomscope_base::size::MAX_DEVICE_BYTES;
/// The stream a pending free waits on: one the program never allocates on.
const PENDING_STREAM: u64 = u64::MAX - 1;

/// The state at the first entry of a mid-run trace, rebuilt from the final snapshot:
/// segments the trace did not create existed; blocks it frees without allocating them, and
/// live blocks it never allocated, were live (a large block keeps the tail of at most 1 MiB
/// PyTorch would not have split off); the rest was free.
fn initial_state(t: &SnapshotTrace, settings: &Settings) -> Vec<RestoredSegment> {
    let mut first_seg: HashMap<u64, Action> = HashMap::new();
    let mut freed_segs: Vec<(u64, u64, u64)> = Vec::new();
    let mut first_block: HashMap<u64, Action> = HashMap::new();
    let mut freed_blocks: Vec<(u64, u64, u64, Option<String>)> = Vec::new();
    for e in &t.entries {
        match e.action {
            Action::SegmentAlloc | Action::SegmentFree => {
                if let std::collections::hash_map::Entry::Vacant(v) = first_seg.entry(e.addr) {
                    v.insert(e.action);
                    if e.action == Action::SegmentFree {
                        freed_segs.push((e.addr, e.size, e.stream));
                    }
                }
            }
            Action::Alloc | Action::FreeRequested => {
                if let std::collections::hash_map::Entry::Vacant(v) = first_block.entry(e.addr) {
                    v.insert(e.action);
                    if e.action == Action::FreeRequested {
                        freed_blocks.push((e.addr, e.size, e.stream, None));
                    }
                }
            }
            _ => {}
        }
    }
    let mut segs: Vec<(u64, u64, u64, PoolKind)> = t
        .segments
        .iter()
        .filter(|s| !s.expandable && !first_seg.contains_key(&s.addr))
        .map(|s| (s.addr, s.size, s.stream, s.pool))
        .collect();
    segs.extend(
        freed_segs
            .iter()
            .map(|&(a, s, st)| (a, s, st, if s == SMALL_BUFFER { PoolKind::Small } else { PoolKind::Large })),
    );
    segs.sort_by_key(|s| s.0);
    // Live blocks at the start: (address, size if known, requested).
    let mut live: Vec<(u64, Option<u64>, u64, Option<String>)> = t
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| (b.allocated || b.pending_free) && !first_block.contains_key(&b.addr))
        .map(|b| (b.addr, Some(b.size), b.requested, b.op.clone()))
        .collect();
    live.extend(freed_blocks.into_iter().map(|(a, r, _, op)| (a, None, r, op)));
    live.sort_by_key(|b| b.0);
    // A free block keeps the stale request of its last use; one the trace never touches
    // shows it in the final state.
    let stale: HashMap<u64, u64> = t
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| !b.allocated && !b.pending_free)
        .map(|b| (b.addr, b.requested))
        .collect();
    let free = |addr: u64, size: u64| RestoredBlock {
        addr,
        size,
        requested: stale.get(&addr).copied().unwrap_or(0),
        ..RestoredBlock::default()
    };
    let mut out = Vec::new();
    for (addr, size, stream, pool) in segs {
        let end = addr + size;
        let inside: Vec<_> = live.iter().filter(|b| b.0 >= addr && b.0 < end).collect();
        let mut blocks = Vec::new();
        let mut at = addr;
        for (i, b) in inside.iter().enumerate() {
            if b.0 < at {
                continue;
            }
            let next_start = inside.get(i + 1).map_or(end, |n| n.0);
            let mut bsize = b.1.unwrap_or_else(|| settings.round_size(b.2));
            if b.1.is_none() && pool == PoolKind::Large {
                let gap = next_start.saturating_sub(b.0 + bsize);
                if gap > 0 && gap <= SMALL_SIZE {
                    bsize += gap;
                }
            }
            let bsize = bsize.min(next_start - b.0);
            if b.0 > at {
                blocks.push(free(at, b.0 - at));
            }
            blocks.push(RestoredBlock {
                addr: b.0,
                size: bsize,
                requested: b.2,
                allocated: true,
                // Live before the trace's first event: before any step it knows of.
                meta: Meta { step: -1, ..Meta::default() },
            });
            at = b.0 + bsize;
        }
        if at < end {
            blocks.push(free(at, end - at));
        }
        out.push(RestoredSegment { addr, size, stream, pool, blocks });
    }
    out
}

/// The device's size is not in a snapshot: a dump says what the run is known to have had.
fn unsized_device(dump: &mut Dump, limit: u64) {
    dump.device.total = 0;
    dump.device.free = 0;
    dump.device.model = "the snapshot's GPU (its size is not in the snapshot)".into();
    dump.allocator.limit = limit;
    dump.stats.bytes_limit = limit;
    for o in dump.oom.iter_mut().chain(dump.ooms.iter_mut()) {
        o.device_total = 0;
    }
}

/// Replays `t` with `opts`; `progress` is called with entries done.
pub fn run(t: &SnapshotTrace, opts: &Options, mut progress: impl FnMut(usize)) -> Outcome {
    replay_trace(t, opts, &mut progress)
}

/// For a what-if (not as recorded): the addresses the recorded run got for each segment size,
/// and the releases the program itself asked for (`empty_cache`), which happen again where
/// they happened; the allocator's own (an OOM retry, garbage collection) are its to decide.
fn as_recorded(t: &SnapshotTrace, opts: &Options) -> (HashMap<u64, VecDeque<u64>>, HashSet<usize>) {
    let mut recorded: HashMap<u64, VecDeque<u64>> = HashMap::new();
    let mut program_releases: HashSet<usize> = HashSet::new();
    if !opts.as_recorded {
        for e in t.entries.iter().filter(|e| e.action == Action::SegmentAlloc) {
            recorded.entry(e.size).or_default().push_back(e.addr);
        }
        let as_recorded = Options::on(t.settings.clone(), None, true);
        program_releases = replay_trace(t, &as_recorded, &mut |_| {}).program_releases.into_iter().collect();
    }
    (recorded, program_releases)
}

/// The caching allocator of the replay, with its settings and limit, on `device`.
fn caching_on(t: &SnapshotTrace, opts: &Options, device: ScriptedDevice) -> Caching {
    let mut copts = CachingOptions::new(i32::try_from(t.device).unwrap_or(0));
    copts.history = 10_000;
    let mut c = Caching::new(opts.settings.clone(), copts, Box::new(device));
    if let Some(a) = opts.allowed {
        c.set_allowed(a);
    }
    c
}

fn replay_trace(t: &SnapshotTrace, opts: &Options, progress: &mut dyn FnMut(usize)) -> Outcome {
    let starts_empty = t.starts_empty();
    let initial = if starts_empty { Vec::new() } else { initial_state(t, &opts.settings) };
    // Segments held before the trace count against the device.
    let held: u64 = initial.iter().map(|s| s.size).sum();
    let script = Arc::new(Mutex::new(Script::default()));
    let (recorded, program_releases) = as_recorded(t, opts);
    let mut releases_found = Vec::new();
    let device = ScriptedDevice {
        total: opts.device.unwrap_or(UNLIMITED),
        used: held,
        fresh: FRESH_BASE,
        script: script.clone(),
        recorded,
        live: initial.iter().map(|s| (s.addr, s.size)).collect(),
    };
    let mut c = caching_on(t, opts, device);
    // Ops of blocks live before the trace, by address.
    let mut start_ops: HashMap<u64, u32> = HashMap::new();
    let (restored_segments, restored_blocks) =
        if starts_empty { (0, 0) } else { restore(t, &mut c, initial, &mut start_ops) };
    let mut addr_map: FastMap<u64, u64> = FastMap::default();
    for (&a, _) in start_ops.iter() {
        addr_map.insert(a, a);
    }
    let mut pending: FastMap<u64, u64> = FastMap::default();
    let (mut allocs, mut placed, mut ooms) = (0u64, 0u64, 0u64);
    // Op names interned once, not per request.
    let op_ids: Vec<u32> = t.ops.iter().map(|o| c.names_mut().ops.intern(o.as_str())).collect();
    let mut scripted = false;
    let mut failed_first: Option<Dump> = None;
    let n = t.entries.len();
    for (i, e) in t.entries.iter().enumerate() {
        if i % 4096 == 0 {
            progress(i);
        }
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                if opts.as_recorded
                    && let Ok(mut s) = script.lock()
                {
                    s.next.push_back((e.addr, e.size));
                    scripted = true;
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                if opts.as_recorded {
                    if starts_release(t, i) && program_release(t, i, &c) {
                        releases_found.push(i);
                    }
                    c.release_at(e.addr, e.t_ns);
                } else if program_releases.contains(&i) {
                    c.empty_cache(e.t_ns);
                }
            }
            Action::Alloc | Action::Oom => {
                let op = op_ids.get(e.op as usize).copied().unwrap_or(0);
                let kind = t.kinds.get(e.op as usize).copied().unwrap_or_default();
                let meta = Meta { op, step: -1, t_ns: e.t_ns, kind, ..Meta::default() };
                let recorded_oom = e.action == Action::Oom;
                if recorded_oom
                    && opts.as_recorded
                    && let Ok(mut s) = script.lock()
                {
                    s.refuse = true;
                    s.free_at_oom = e.addr;
                    scripted = true;
                }
                match c.allocate(e.size, e.stream, meta) {
                    Ok(a) if !recorded_oom => {
                        allocs += 1;
                        placed += u64::from(a == e.addr);
                        addr_map.insert(e.addr, a);
                    }
                    Ok(a) => {
                        // A request the run could not serve and the program caught: the
                        // program never had the memory, so it is given back at once.
                        let _ = c.free(a, e.t_ns);
                    }
                    Err(_) => {
                        ooms += 1;
                        if failed_first.is_none() {
                            failed_first = Some(c.snapshot(source(t)));
                        }
                    }
                }
                // The script is touched only around segment events and recorded OOMs: most
                // requests need no lock.
                if scripted && let Ok(mut s) = script.lock() {
                    s.refuse = false;
                    s.next.clear();
                    scripted = false;
                }
            }
            Action::FreeRequested => {
                let Some(a) = addr_map.remove(&e.addr) else { continue };
                let completes_now =
                    t.entries.get(i + 1).is_some_and(|n| n.action == Action::FreeCompleted && n.addr == e.addr);
                if !completes_now {
                    c.record_stream(a, PENDING_STREAM);
                }
                if c.free(a, e.t_ns).is_ok() && !completes_now {
                    pending.insert(e.addr, a);
                }
            }
            Action::FreeCompleted => {
                if let Some(a) = pending.remove(&e.addr) {
                    c.event_completed(a, e.t_ns);
                }
            }
        }
    }
    progress(n);
    let stats = c.caching_stats();
    let mut dump = c.snapshot(source(t));
    let equal = final_segments_equal(t, &dump);
    let at_first_oom = failed_first.is_some() && !opts.keep_going;
    let mut first_oom = None;
    match failed_first {
        Some(first) if opts.keep_going => first_oom = Some(first),
        Some(first) => dump = first,
        None => {}
    }
    if opts.device.is_none() {
        for d in std::iter::once(&mut dump).chain(first_oom.as_mut()) {
            unsized_device(d, opts.allowed.unwrap_or(stats.reserved.peak));
        }
    }
    Outcome {
        dump,
        first_oom,
        at_first_oom,
        program_releases: releases_found,
        starts_empty,
        allocs,
        placed,
        restored_segments,
        restored_blocks,
        ooms,
        final_segments: t.segments.len() as u64,
        final_segments_equal: equal,
        peak_reserved: stats.reserved.peak,
        peak_allocated: stats.allocated.peak,
        settings: c.settings().clone(),
    }
}

fn source(t: &SnapshotTrace) -> Source {
    Source { kind: SourceKind::TorchSnapshot, path: Some(t.path.clone()), command: None, created_unix: None }
}

/// The trace's requests replayed with the allocator deciding everything on the memory
/// `limit` describes, under `settings` and with `set` on top: what a fragmentation verdict
/// quotes. `None` when `set` is not a valid change of `settings`.
pub fn what_if(t: &SnapshotTrace, settings: &Settings, set: SettingChange, limit: Limit) -> Option<WhatIf> {
    let changed = settings.with(&set.to_string()).ok()?;
    let capacity = limit.bytes();
    let run = |s: &Settings| run(t, &Options::on(s.clone(), Some(limit), false), |_| {});
    let replayed = |o: &Outcome| Replayed {
        out_of_memory: o.ooms > 0,
        peak_reserved: o.peak_reserved,
        peak_allocated: o.peak_allocated,
    };
    let as_run = run(settings);
    Some(WhatIf {
        set: set.to_string(),
        settings: settings.text.clone(),
        capacity,
        requests: as_run.allocs + as_run.ooms,
        as_run: replayed(&as_run),
        changed: replayed(&run(&changed)),
    })
}

/// True when entry `i` begins a run of segment releases.
fn starts_release(t: &SnapshotTrace, i: usize) -> bool {
    let release = |e: &Entry| matches!(e.action, Action::SegmentFree | Action::SegmentUnmap);
    release(&t.entries[i]) && (i == 0 || !release(&t.entries[i - 1]))
}

/// Whether the run of releases beginning at entry `i` was the program's (`empty_cache`),
/// told from the allocator's state `c` just before it. The allocator releases segments
/// itself only inside a request it cannot serve from its cache (an OOM retry, garbage
/// collection), and then the request's new segment (or its OOM) follows the releases.
/// A run followed by anything else, or by a request the cache could have served, is the
/// program's.
fn program_release(t: &SnapshotTrace, i: usize, c: &Caching) -> bool {
    let rest = &t.entries[i..];
    let Some(after) = rest.iter().position(|e| !matches!(e.action, Action::SegmentFree | Action::SegmentUnmap)) else {
        return true;
    };
    if !matches!(rest[after].action, Action::SegmentAlloc | Action::SegmentMap | Action::Oom) {
        return true;
    }
    rest[after..]
        .iter()
        .find(|e| matches!(e.action, Action::Alloc | Action::Oom))
        .is_none_or(|r| c.serves_from_cache(r.size, r.stream))
}

/// The memory the recorded run could have, read from its first OOM: what PyTorch held
/// plus what the device had free when the device refused; a memory fraction's cap when the
/// device had room for the segment PyTorch wanted. `None` without an OOM.
pub fn limit_at_oom(t: &SnapshotTrace) -> Option<Limit> {
    let first_oom = t.entries.iter().position(|e| e.action == Action::Oom)?;
    // Reserved bytes along the trace, from the recorded segment events and the segments
    // that existed before the trace.
    let created: HashSet<u64> = t.entries.iter().filter(|e| e.action == Action::SegmentAlloc).map(|e| e.addr).collect();
    let mut first_free: HashSet<u64> = HashSet::new();
    // Expandable segments' pages are mapped and unmapped by the trace's own events.
    let mut reserved: u64 = if t.starts_empty() {
        0
    } else {
        t.segments.iter().filter(|s| !s.expandable && !created.contains(&s.addr)).map(|s| s.size).sum()
    };
    // The cap lies in [most reserved, reserved at an OOM + the segment it needed).
    let (mut lo, mut hi) = (reserved, u64::MAX);
    let mut at_first = None;
    for (i, e) in t.entries.iter().enumerate() {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved += e.size;
                lo = lo.max(reserved);
            }
            Action::SegmentUnmap => reserved = reserved.saturating_sub(e.size),
            Action::SegmentFree if created.contains(&e.addr) || !first_free.insert(e.addr) => {
                reserved = reserved.saturating_sub(e.size);
            }
            Action::Oom => {
                // `size` is the rounded request; `addr` what the device had free.
                let need = growth_for(e.size, &t.settings);
                let device_refused = e.addr < need;
                if i == first_oom {
                    at_first = Some((device_refused, reserved, e.addr));
                }
                if !device_refused {
                    hi = hi.min(reserved + need);
                }
            }
            _ => {}
        }
    }
    let (device_refused, reserved, free) = at_first?;
    if device_refused {
        return Some(Limit::DeviceAtOom(reserved + free));
    }
    (lo < hi).then(|| Limit::Fraction(roundest(lo, hi)))
}

/// What the allocator must obtain to serve a rounded request: its segment, or (expandable
/// segments) its pages.
fn growth_for(size: u64, settings: &Settings) -> u64 {
    if settings.expandable_segments {
        let page = if size <= SMALL_SIZE { SMALL_BUFFER } else { 20 << 20 };
        size.div_ceil(page) * page
    } else {
        Caching::allocation_size(size)
    }
}

/// The number in `[lo, hi)` with the most trailing zero bits (`lo` when `hi <= lo + 1`).
fn roundest(lo: u64, hi: u64) -> u64 {
    (0..64).rev().find_map(|k| lo.div_ceil(1 << k).checked_mul(1 << k).filter(|&c| c < hi)).unwrap_or(lo)
}

/// The segments live before the trace, restored into `c` with the ops the final state names
/// for their blocks (`start_ops`, by address): how many segments and blocks were.
fn restore(
    t: &SnapshotTrace,
    c: &mut Caching,
    initial: Vec<RestoredSegment>,
    start_ops: &mut HashMap<u64, u32>,
) -> (u64, u64) {
    let (mut restored_segments, mut restored_blocks) = (0, 0);
    // The final state names the blocks that lived through the trace.
    let final_ops: HashMap<u64, (&str, Kind)> =
        t.segments.iter().flat_map(|s| &s.blocks).filter_map(|b| Some((b.addr, (b.op.as_deref()?, b.kind)))).collect();
    for mut seg in initial {
        for b in seg.blocks.iter_mut().filter(|b| b.allocated) {
            let (name, kind) =
                final_ops.get(&b.addr).copied().unwrap_or((torch_frames::BEFORE_RECORDING, Kind::Unknown));
            b.meta.op = c.names_mut().ops.intern(name);
            b.meta.kind = kind;
            start_ops.insert(b.addr, b.meta.op);
        }
        if c.restore_segment(&seg) {
            restored_segments += 1;
            restored_blocks += seg.blocks.iter().filter(|b| b.allocated).count() as u64;
        }
    }
    // The reserved bytes at the start are not a peak the trace reached.
    (restored_segments, restored_blocks)
}

/// The final state's segments that the replay's dump holds exactly, block for block.
fn final_segments_equal(t: &SnapshotTrace, dump: &Dump) -> u64 {
    let mut equal = 0;
    for f in &t.segments {
        let same = dump.regions.iter().any(|r| {
            r.address == f.addr
                && r.size == f.size
                && r.chunks.len() == f.blocks.len()
                && r.chunks.iter().zip(&f.blocks).all(|(c, b)| {
                    c.address == b.addr
                        && c.size == b.size
                        && c.requested == b.requested
                        && c.in_use == b.allocated
                        && c.pending_free == b.pending_free
                })
        });
        equal += u64::from(same);
    }
    equal
}
