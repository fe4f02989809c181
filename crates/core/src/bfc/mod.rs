//! TensorFlow's best-fit-with-coalescing (BFC) allocator, re-implemented to behave
//! exactly like `tsl/framework/bfc_allocator.cc` (see `docs/architecture.md`).
//!
//! The allocator manages address ranges obtained from a [`Device`]; it never touches the
//! memory behind them and does no I/O. It is single-threaded: [`crate::Allocator`] puts it
//! behind a lock for processes that allocate from many threads, and trace replay uses it
//! directly.
//!
//! Data structures, as in TF:
//! - *regions*: ranges obtained from the device, sorted by address, never merged with each
//!   other (cuMemAlloc ranges cannot be);
//! - *chunks*: each region is tiled by chunks linked through `prev`/`next` handles; a chunk
//!   is in use or free; two free neighbours never stay unmerged;
//! - *bins*: free chunks by size class (see [`bins`]);
//! - chunk *handles* are indices into one arena, recycled last-in-first-out, because the dump
//!   prints them (`next 5`) and users compare dumps.
//!
//! Deliberate differences from TF, all outside what a report shows: the address -> handle
//! map covers only in-use chunks (TF keeps one entry per 256 bytes of every region, which
//! for an 80 GB card is 2.5 GB of host memory); the back-off loop stops when rounding would
//! no longer shrink the request (TF would spin forever on a device that refuses 256 bytes);
//! region-size doubling saturates instead of overflowing.

mod bins;
mod check;
mod snapshot;

use crate::device::{Device, DeviceDescription, MemInfo};
use crate::record::{Event, EventKind, History, Meta, Names, Recorder, Retag, StepMark};
use bins::Bins;
use oomscope_base::hash::FastMap;
use oomscope_format::{Refusal, Stats};
use std::fmt;

pub use snapshot::{describe, oom_record};

pub use oomscope_base::bins::{
    MIN_ALLOCATION_BITS, MIN_ALLOCATION_SIZE, NUM_BINS, bin_for_size, bin_size, rounded_bytes,
};
/// Default limit on the waste a whole (unsplit) chunk may carry: 128 MiB.
pub const DEFAULT_MAX_INTERNAL_FRAGMENTATION: u64 = 128 << 20;
/// When the device refuses a region, ask for 90% of it (computed in f32, as TF's `float`).
const BACKPEDAL_FACTOR: f32 = 0.9;
/// A region-size target of 2 MiB to start with when growing on demand (TF >= 2.5).
const GROWTH_INITIAL_REGION: u64 = 2 << 20;
/// Failed requests kept (all are counted).
const FAILURES_KEPT: usize = 100_000;
/// Device refusals kept (all are counted).
const REFUSALS_KEPT: usize = 64;

const NONE: u32 = u32::MAX;
const NO_BIN: i8 = -1;

/// TF's bin summary: chunks, as (size, requested, in use), counted into the 21 bins by size,
/// in use or free, as TF's dump counts them.
pub fn bins_of(chunks: impl IntoIterator<Item = (u64, u64, bool)>) -> Vec<oomscope_format::BinInfo> {
    let mut bins: Vec<oomscope_format::BinInfo> = (0..NUM_BINS)
        .map(|b| oomscope_format::BinInfo { index: b as u32, size: bin_size(b), ..Default::default() })
        .collect();
    for (size, requested, in_use) in chunks {
        let b = &mut bins[bin_for_size(size)];
        b.total_chunks += 1;
        b.bytes += size;
        if in_use {
            b.chunks_in_use += 1;
            b.bytes_in_use += size;
            b.requested_in_use += requested;
        }
    }
    bins
}

/// How the allocator behaves; TF's `BFCAllocator::Options` plus the memory limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Allocator name printed in reports (`GPU_0_bfc`).
    pub name: String,
    /// Device name printed in "Current usage from device" (TF's name for GPU 0 by default).
    pub device_name: String,
    /// Bytes the allocator may take from the device in all.
    pub limit: u64,
    /// Grow the pool on demand (regions of 2 MiB, doubling) instead of one region of `limit`.
    pub allow_growth: bool,
    /// On OOM, return empty regions to the device and try one larger region.
    pub garbage_collection: bool,
    /// When > 0, the unsplit-waste limit is this fraction of `limit` (instead of 128 MiB).
    pub fragmentation_fraction: f64,
    /// Events kept in the history (0: count them only).
    pub history: usize,
}

impl Options {
    /// TF's defaults for GPU 0 with the given limit: no growth, no garbage collection.
    pub fn new(limit: u64) -> Options {
        Options {
            name: "GPU_0_bfc".to_string(),
            device_name: oomscope_format::DEFAULT_DEVICE_NAME.to_string(),
            limit,
            allow_growth: false,
            garbage_collection: false,
            fragmentation_fraction: 0.0,
            history: 10_000,
        }
    }

    /// Applies TensorFlow's environment overrides, read through `var` so the allocator
    /// itself stays free of I/O: `TF_FORCE_GPU_ALLOW_GROWTH` and
    /// `TF_ENABLE_GPU_GARBAGE_COLLECTION` (`true`/`false`; other values are ignored, as TF
    /// ignores them after logging an error).
    pub fn apply_tf_env(&mut self, var: impl Fn(&str) -> Option<String>) {
        let flag = |name: &str| match var(name)?.to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        };
        if let Some(v) = flag("TF_FORCE_GPU_ALLOW_GROWTH") {
            self.allow_growth = v;
        }
        if let Some(v) = flag("TF_ENABLE_GPU_GARBAGE_COLLECTION") {
            self.garbage_collection = v;
        }
    }
}

/// A failed allocation: what was asked and what the allocator had at that moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocFailure {
    /// Position in the event history.
    pub seq: u64,
    pub requested: u64,
    pub rounded: u64,
    pub meta: Meta,
    pub bytes_in_use: u64,
    pub pool_bytes: u64,
    /// Largest free chunk in the pool.
    pub largest_free_block: u64,
    /// Bytes the allocator could still take from the device under its limit.
    pub limit_headroom: u64,
    /// What the device said was free.
    pub device: MemInfo,
    /// Region sizes the device refused while serving this request.
    pub device_refusals: Vec<u64>,
    /// The request was for memory outside the pool, straight from the device.
    pub outside: bool,
}

/// A free that could not be done; the allocator is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// The address is not the start of an in-use chunk: a double free or a foreign pointer.
    NotAllocated(u64),
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotAllocated(addr) => {
                write!(f, "free of {addr:#x}, which is not an allocation of this allocator (double free?)")
            }
        }
    }
}

impl std::error::Error for FreeError {}

#[derive(Clone, Debug, Default)]
struct Chunk {
    addr: u64,
    size: u64,
    /// What the client asked for. Like TF, not cleared on free and kept by recycled handles,
    /// so free chunks show a stale "Requested Size" in the dump.
    requested: u64,
    prev: u32,
    next: u32,
    /// Bin index while in a bin, `NO_BIN` otherwise.
    bin: i8,
    /// Allocation id while in use, 0 when free (TF: -1).
    id: u64,
    meta: Meta,
}

impl Chunk {
    #[inline]
    fn in_use(&self) -> bool {
        self.id != 0
    }
}

/// A chunk as code outside the allocator reads it (the live feed).
#[derive(Clone, Copy, Debug)]
pub struct ChunkRef<'a> {
    pub addr: u64,
    pub size: u64,
    /// The client's request (stale on free chunks, as in TF's dump).
    pub requested: u64,
    pub in_use: bool,
    pub meta: &'a Meta,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    addr: u64,
    size: u64,
    /// Handle of the chunk at `addr`; stable for the region's life, since merges keep the
    /// lower chunk and splits keep the low part.
    first: u32,
}

/// The BFC allocator (single-threaded core).
pub struct Bfc {
    opts: Options,
    device: Box<dyn Device>,
    max_internal_fragmentation: u64,
    curr_region_allocation_bytes: u64,
    chunks: Vec<Chunk>,
    /// Head of the LIFO list of recycled handles (linked through `Chunk::next`).
    free_handles: u32,
    bins: Bins,
    regions: Vec<Region>,
    /// In-use chunks by address.
    in_use: FastMap<u64, u32>,
    stats: Stats,
    next_allocation_id: u64,
    /// What is recorded beside the state: names, history, the peak, steps, failures.
    rec: Recorder,
    refusals: Vec<Refusal>,
    /// Memory taken from the device outside the pool, by address: (size, meta).
    outside: FastMap<u64, (u64, Meta)>,
}

impl fmt::Debug for Bfc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bfc").field("name", &self.opts.name).field("stats", &self.stats()).finish_non_exhaustive()
    }
}

impl Bfc {
    pub fn new(opts: Options, device: Box<dyn Device>) -> Bfc {
        let limit = opts.limit;
        let curr_region_allocation_bytes =
            if opts.allow_growth { rounded_bytes(limit.min(GROWTH_INITIAL_REGION)) } else { rounded_bytes(limit) };
        let max_internal_fragmentation = if opts.fragmentation_fraction > 0.0 {
            (opts.fragmentation_fraction * limit as f64) as u64
        } else {
            DEFAULT_MAX_INTERNAL_FRAGMENTATION
        };
        let history = History::new(opts.history);
        Bfc {
            max_internal_fragmentation,
            curr_region_allocation_bytes,
            device,
            chunks: Vec::new(),
            free_handles: NONE,
            bins: Bins::default(),
            regions: Vec::new(),
            in_use: FastMap::default(),
            stats: Stats { bytes_limit: limit, ..Stats::default() },
            next_allocation_id: 1,
            rec: Recorder::with_history(history),
            refusals: Vec::new(),
            outside: FastMap::default(),
            opts,
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The next region-size target (`curr_region_allocation_bytes_` in TF's dump).
    pub fn curr_region_allocation_bytes(&self) -> u64 {
        self.curr_region_allocation_bytes
    }

    /// Interned names; intern op names here before passing their ids in [`Meta`].
    pub fn names(&self) -> &Names {
        &self.rec.names
    }

    pub fn names_mut(&mut self) -> &mut Names {
        &mut self.rec.names
    }

    /// The step set by the last [`Bfc::mark_step`] (-1 before any).
    pub fn current_step(&self) -> i64 {
        self.rec.current_step
    }

    /// Failed requests so far (the first [`FAILURES_KEPT`] of them; all are counted in stats).
    pub fn failures(&self) -> &[AllocFailure] {
        &self.rec.failures
    }

    /// Statistics, with the derived fields (largest free block, fragmentation) computed now.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.largest_free_block = self.bins.largest();
        s.free_bytes = s.pool_bytes - s.bytes_in_use;
        s.fragmentation = if s.free_bytes == 0 { 0.0 } else { 1.0 - s.largest_free_block as f64 / s.free_bytes as f64 };
        s
    }

    pub fn device_mem_info(&self) -> MemInfo {
        self.device.mem_info()
    }

    pub fn device_description(&self) -> DeviceDescription {
        self.device.describe()
    }

    /// Allocates `num_bytes` recorded with `meta`; returns the address (0 for 0 bytes, as
    /// TF returns null). On failure the allocator is unchanged apart from regions it may
    /// have obtained or given back while trying, exactly as TF.
    pub fn allocate(&mut self, num_bytes: u64, meta: Meta) -> Result<u64, Box<AllocFailure>> {
        if num_bytes == 0 {
            return Ok(0);
        }
        let rounded = rounded_bytes(num_bytes);
        if let Some(addr) = self.find_chunk(rounded, num_bytes, &meta) {
            return Ok(addr);
        }
        let mut refused = Vec::new();
        if self.extend(rounded, &meta, &mut refused)
            && let Some(addr) = self.find_chunk(rounded, num_bytes, &meta)
        {
            return Ok(addr);
        }
        // No chunk fits and the pool cannot grow: give empty regions back so the device
        // can hand out one larger region instead.
        if self.deallocate_free_regions(rounded, &meta)
            && self.extend(rounded, &meta, &mut refused)
            && let Some(addr) = self.find_chunk(rounded, num_bytes, &meta)
        {
            return Ok(addr);
        }
        Err(Box::new(self.record_failure(num_bytes, rounded, meta, refused, false)))
    }

    /// Takes `bytes` straight from the device, outside the pool, as cuDNN, cuBLAS or the CUDA
    /// context do in a real process: the pool's size does not change, but the device's free
    /// memory does, and a refusal is reported like the allocator's own.
    pub fn allocate_outside(&mut self, bytes: u64, meta: Meta) -> Result<u64, Box<AllocFailure>> {
        if bytes == 0 {
            return Ok(0);
        }
        match self.device.alloc(bytes) {
            Ok(addr) => {
                self.outside.insert(addr, (bytes, meta));
                self.stats.outside_bytes += bytes;
                self.rec.history.push(Event {
                    seq: 0,
                    t_ns: meta.t_ns,
                    kind: EventKind::OutsideAlloc,
                    addr,
                    size: bytes,
                    requested: bytes,
                    op: meta.op,
                    step: meta.step,
                });
                Ok(addr)
            }
            Err(_) => {
                let mut refused = Vec::new();
                self.record_refusal(bytes, &meta, &mut refused, true);
                Err(Box::new(self.record_failure(bytes, bytes, meta, refused, true)))
            }
        }
    }

    /// Returns memory taken with [`Bfc::allocate_outside`].
    pub fn free_outside(&mut self, addr: u64, t_ns: u64) -> Result<u64, FreeError> {
        if addr == 0 {
            return Ok(0);
        }
        let (size, meta) = self.outside.remove(&addr).ok_or(FreeError::NotAllocated(addr))?;
        // The sim device accepts any range it handed out; a real one that refuses leaks it.
        let _ = self.device.free(addr, size);
        self.stats.outside_bytes -= size;
        self.rec.history.push(Event {
            seq: 0,
            t_ns,
            kind: EventKind::OutsideFree,
            addr,
            size,
            requested: size,
            op: meta.op,
            step: meta.step,
        });
        Ok(size)
    }

    /// Frees the allocation at `addr` (0 is ignored, like TF's null). Returns the chunk size.
    pub fn free(&mut self, addr: u64, t_ns: u64) -> Result<u64, FreeError> {
        if addr == 0 {
            return Ok(0);
        }
        let h = self.in_use.remove(&addr).ok_or(FreeError::NotAllocated(addr))?;
        let c = &mut self.chunks[h as usize];
        c.id = 0;
        let (size, requested, op, step) = (c.size, c.requested, c.meta.op, c.meta.step);
        self.stats.bytes_in_use -= size;
        self.stats.num_frees += 1;
        self.rec.peak.free(size, requested, op);
        self.rec.history.push(Event { seq: 0, t_ns, kind: EventKind::Free, addr, size, requested, op, step });
        let merged = self.try_to_coalesce(h);
        self.insert_free_chunk_into_bin(merged);
        Ok(size)
    }

    /// Marks the start of a training step: later allocations default to it, and live
    /// bytes at the boundary are kept for the growth analysis.
    pub fn mark_step(&mut self, step: i64, t_ns: u64) {
        self.rec.mark_step(StepMark {
            step,
            t_ns,
            bytes_in_use: self.stats.bytes_in_use,
            pool_bytes: self.stats.pool_bytes,
            live: self.in_use.len() as u64,
        });
    }

    /// The requested size of the live allocation at `addr`.
    pub fn requested_size(&self, addr: u64) -> Option<u64> {
        self.in_use.get(&addr).map(|&h| self.chunks[h as usize].requested)
    }

    /// Says what the live allocation at `addr` is (the program learned it after allocating:
    /// a parameter moved to the GPU, a gradient): its op, kind and shape become those given
    /// (interned ids). False when nothing is allocated there.
    pub fn retag(&mut self, addr: u64, r: Retag) -> bool {
        let Some(&h) = self.in_use.get(&addr) else { return false };
        let c = &mut self.chunks[h as usize];
        let from = r.apply(&mut c.meta);
        let (size, requested, to) = (c.size, c.requested, c.meta.op);
        self.rec.peak.rename(size, requested, from, to);
        true
    }

    /// The chunk size of the live allocation at `addr` (TF's `AllocatedSize`).
    pub fn allocated_size(&self, addr: u64) -> Option<u64> {
        self.in_use.get(&addr).map(|&h| self.chunks[h as usize].size)
    }

    /// Number of live allocations.
    pub fn live_allocations(&self) -> usize {
        self.in_use.len()
    }

    /// Regions in address order, as (address, size).
    pub fn regions(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.regions.iter().map(|r| (r.addr, r.size))
    }

    /// The chunks of region `index` in address order (none for an index out of range).
    pub fn region_chunks(&self, index: usize) -> impl Iterator<Item = ChunkRef<'_>> + '_ {
        let mut h = self.regions.get(index).map_or(NONE, |r| r.first);
        std::iter::from_fn(move || {
            if h == NONE {
                return None;
            }
            let c = &self.chunks[h as usize];
            h = c.next;
            Some(ChunkRef { addr: c.addr, size: c.size, requested: c.requested, in_use: c.in_use(), meta: &c.meta })
        })
    }

    /// Slots in the chunk table, live or deleted.
    pub fn slots(&self) -> usize {
        self.chunks.len()
    }

    /// The live chunks in slots `from..from + count`, in slot order. A deleted slot is free
    /// of an id and out of every bin (a live free chunk is always in its bin).
    pub fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(crate::SlotChunk<'_>)) {
        let end = from.saturating_add(count).min(self.chunks.len());
        for c in self.chunks.get(from..end).unwrap_or_default() {
            if !c.in_use() && c.bin == NO_BIN {
                continue;
            }
            f(crate::SlotChunk {
                addr: c.addr,
                size: c.size,
                requested: c.requested,
                in_use: c.in_use(),
                head: c.prev == NONE,
                meta: &c.meta,
            });
        }
    }

    /// The recent events.
    pub fn history(&self) -> &History {
        &self.rec.history
    }

    /// Live bytes at the recent step boundaries, oldest first.
    pub fn step_marks(&self) -> impl Iterator<Item = &StepMark> {
        self.rec.steps.iter()
    }

    // ---- allocation ----------------------------------------------------------------

    fn find_chunk(&mut self, rounded: u64, num_bytes: u64, meta: &Meta) -> Option<u64> {
        let (bin, key) = self.bins.find(rounded)?;
        let h = key.2;
        self.bins.remove(bin, &key);
        self.chunks[h as usize].bin = NO_BIN;
        let size = self.chunks[h as usize].size;
        // Split when the remainder is worth keeping: the chunk is at least twice the request,
        // or handing it out whole would waste at least `max_internal_fragmentation`.
        if size >= rounded.saturating_mul(2) || size - rounded >= self.max_internal_fragmentation {
            self.split_chunk(h, rounded);
        }
        let id = self.next_allocation_id;
        self.next_allocation_id += 1;
        let c = &mut self.chunks[h as usize];
        c.requested = num_bytes;
        c.id = id;
        c.meta = *meta;
        let (addr, size) = (c.addr, c.size);
        let s = &mut self.stats;
        s.num_allocs += 1;
        s.bytes_in_use += size;
        s.peak_bytes_in_use = s.peak_bytes_in_use.max(s.bytes_in_use);
        s.largest_alloc_size = s.largest_alloc_size.max(size);
        self.in_use.insert(addr, h);
        self.rec.peak.alloc(size, num_bytes, meta, self.rec.history.total());
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Alloc,
            addr,
            size,
            requested: num_bytes,
            op: meta.op,
            step: meta.step,
        });
        Some(addr)
    }

    /// Keeps the low `num_bytes` of chunk `h` and makes the rest a new free chunk.
    fn split_chunk(&mut self, h: u32, num_bytes: u64) {
        let new = self.new_chunk();
        let c = &mut self.chunks[h as usize];
        let (addr, size, next) = (c.addr, c.size, c.next);
        c.size = num_bytes;
        c.next = new;
        let n = &mut self.chunks[new as usize];
        n.addr = addr + num_bytes;
        n.size = size - num_bytes;
        n.id = 0;
        n.prev = h;
        n.next = next;
        if next != NONE {
            self.chunks[next as usize].prev = new;
        }
        self.insert_free_chunk_into_bin(new);
    }

    /// Obtains a new region from the device that can hold `rounded` bytes (TF's `Extend`).
    fn extend(&mut self, rounded: u64, meta: &Meta, refused: &mut Vec<u64>) -> bool {
        let available =
            (self.opts.limit.saturating_sub(self.stats.pool_bytes) / MIN_ALLOCATION_SIZE) * MIN_ALLOCATION_SIZE;
        if rounded > available {
            return false;
        }
        let mut increased = false;
        while rounded > self.curr_region_allocation_bytes {
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.saturating_mul(2);
            increased = true;
        }
        let mut bytes = self.curr_region_allocation_bytes.min(available);
        let mut result = self.device.alloc(bytes);
        while result.is_err() {
            self.record_refusal(bytes, meta, refused, false);
            let smaller = rounded_bytes((bytes as f32 * BACKPEDAL_FACTOR) as u64);
            if smaller < rounded || smaller >= bytes {
                break;
            }
            bytes = smaller;
            result = self.device.alloc(bytes);
        }
        let Ok(addr) = result else {
            return false;
        };
        if !increased {
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.saturating_mul(2);
        }
        self.stats.pool_bytes += bytes;
        self.stats.peak_pool_bytes = self.stats.peak_pool_bytes.max(self.stats.pool_bytes);
        let h = self.new_chunk();
        let c = &mut self.chunks[h as usize];
        c.addr = addr;
        c.size = bytes;
        c.id = 0;
        c.prev = NONE;
        c.next = NONE;
        let at = self.regions.partition_point(|r| r.addr < addr);
        self.regions.insert(at, Region { addr, size: bytes, first: h });
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Extend,
            addr,
            size: bytes,
            requested: rounded,
            op: meta.op,
            step: meta.step,
        });
        // A new region has no neighbours to coalesce with (regions are never merged).
        self.insert_free_chunk_into_bin(h);
        true
    }

    fn record_refusal(&mut self, bytes: u64, meta: &Meta, refused: &mut Vec<u64>, outside: bool) {
        refused.push(bytes);
        self.stats.num_device_refusals += 1;
        let seq = self.rec.history.total();
        if self.refusals.len() < REFUSALS_KEPT {
            self.refusals.push(Refusal { seq, bytes, device_free: self.device.mem_info().free, outside });
        }
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Refused,
            addr: 0,
            size: bytes,
            requested: 0,
            op: meta.op,
            step: meta.step,
        });
    }

    /// Garbage collection (TF's `DeallocateFreeRegions`): returns every region without an
    /// in-use chunk to the device, when that could make room for `rounded` bytes.
    fn deallocate_free_regions(&mut self, rounded: u64, meta: &Meta) -> bool {
        if !self.opts.garbage_collection {
            return false;
        }
        let empty: Vec<bool> = self.regions.iter().map(|r| !self.region_has_use(r)).collect();
        let total_free: u64 = self.regions.iter().zip(&empty).filter(|(_, e)| **e).map(|(r, _)| r.size).sum();
        if total_free == 0 {
            return false;
        }
        if rounded > self.opts.limit - self.stats.pool_bytes + total_free {
            return false;
        }
        // In address order, chunk by chunk, so handles are recycled in TF's order.
        for (region, _) in self.regions.clone().into_iter().zip(&empty).filter(|(_, e)| **e) {
            let mut h = region.first;
            while h != NONE {
                let next = self.chunks[h as usize].next;
                if self.chunks[h as usize].bin != NO_BIN {
                    self.remove_free_chunk_from_bin(h);
                }
                self.delete_chunk(h);
                h = next;
            }
            // The sim device cannot fail here; a real device that does leaks the range, as TF.
            let _ = self.device.free(region.addr, region.size);
            self.stats.pool_bytes -= region.size;
            self.rec.history.push(Event {
                seq: 0,
                t_ns: meta.t_ns,
                kind: EventKind::RegionFree,
                addr: region.addr,
                size: region.size,
                requested: rounded,
                op: meta.op,
                step: meta.step,
            });
        }
        let mut keep = empty.iter().map(|e| !e);
        self.regions.retain(|_| keep.next().unwrap_or(true));
        true
    }

    fn region_has_use(&self, region: &Region) -> bool {
        let mut h = region.first;
        while h != NONE {
            let c = &self.chunks[h as usize];
            if c.in_use() {
                return true;
            }
            h = c.next;
        }
        false
    }

    fn record_failure(
        &mut self,
        requested: u64,
        rounded: u64,
        meta: Meta,
        device_refusals: Vec<u64>,
        outside: bool,
    ) -> AllocFailure {
        self.stats.num_ooms += 1;
        let seq = self.rec.history.total();
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Oom,
            addr: 0,
            size: rounded,
            requested,
            op: meta.op,
            step: meta.step,
        });
        let failure = AllocFailure {
            seq,
            requested,
            rounded,
            meta,
            bytes_in_use: self.stats.bytes_in_use,
            pool_bytes: self.stats.pool_bytes,
            largest_free_block: self.bins.largest(),
            limit_headroom: self.opts.limit.saturating_sub(self.stats.pool_bytes),
            device: self.device.mem_info(),
            device_refusals,
            outside,
        };
        if self.rec.failures.len() < FAILURES_KEPT {
            self.rec.failures.push(failure.clone());
        }
        failure
    }

    // ---- free ----------------------------------------------------------------------

    /// Merges chunk `h` with its free neighbours (next first, then previous, as TF does:
    /// the order decides which handles are recycled first). Returns the surviving handle.
    fn try_to_coalesce(&mut self, h: u32) -> u32 {
        let mut coalesced = h;
        let next = self.chunks[h as usize].next;
        if next != NONE && !self.chunks[next as usize].in_use() {
            self.remove_free_chunk_from_bin(next);
            self.merge(h, next);
        }
        let prev = self.chunks[h as usize].prev;
        if prev != NONE && !self.chunks[prev as usize].in_use() {
            coalesced = prev;
            self.remove_free_chunk_from_bin(prev);
            self.merge(prev, h);
        }
        coalesced
    }

    /// Absorbs free chunk `h2` into its free predecessor `h1`.
    fn merge(&mut self, h1: u32, h2: u32) {
        let (h3, size2) = {
            let c2 = &self.chunks[h2 as usize];
            (c2.next, c2.size)
        };
        let c1 = &mut self.chunks[h1 as usize];
        c1.next = h3;
        c1.size += size2;
        if h3 != NONE {
            self.chunks[h3 as usize].prev = h1;
        }
        self.delete_chunk(h2);
    }

    // ---- bins and handles ----------------------------------------------------------

    fn insert_free_chunk_into_bin(&mut self, h: u32) {
        let c = &mut self.chunks[h as usize];
        let bin = bin_for_size(c.size);
        c.bin = bin as i8;
        let key = (c.size, c.addr, h);
        self.bins.insert(bin, key);
    }

    fn remove_free_chunk_from_bin(&mut self, h: u32) {
        let c = &mut self.chunks[h as usize];
        let key = (c.size, c.addr, h);
        let bin = c.bin;
        c.bin = NO_BIN;
        if bin >= 0 {
            self.bins.remove(bin as usize, &key);
        }
    }

    /// A handle for a new chunk: the most recently deleted one, else a fresh one.
    fn new_chunk(&mut self) -> u32 {
        if self.free_handles != NONE {
            let h = self.free_handles;
            self.free_handles = self.chunks[h as usize].next;
            return h;
        }
        // u32 handles: four billion live chunks exhaust host memory long before.
        let h = u32::try_from(self.chunks.len()).unwrap_or(NONE - 1);
        self.chunks.push(Chunk { prev: NONE, next: NONE, bin: NO_BIN, ..Chunk::default() });
        h
    }

    fn delete_chunk(&mut self, h: u32) {
        let c = &mut self.chunks[h as usize];
        c.id = 0;
        c.bin = NO_BIN;
        c.next = self.free_handles;
        self.free_handles = h;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_follow_the_power_of_two_rule() {
        assert_eq!(bin_for_size(0), 0);
        assert_eq!(bin_for_size(256), 0);
        assert_eq!(bin_for_size(511), 0);
        assert_eq!(bin_for_size(512), 1);
        assert_eq!(bin_for_size(256 << 20), 20);
        assert_eq!(bin_for_size(u64::MAX), 20);
        for b in 0..NUM_BINS {
            assert_eq!(bin_for_size(bin_size(b)), b);
            assert_eq!(bin_for_size(bin_size(b) * 2 - 1), b);
            if b + 1 < NUM_BINS {
                assert_ne!(bin_for_size(bin_size(b) * 2), b);
            }
        }
    }

    #[test]
    fn rounding_is_to_256_bytes() {
        assert_eq!(rounded_bytes(1), 256);
        assert_eq!(rounded_bytes(256), 256);
        assert_eq!(rounded_bytes(257), 512);
        assert_eq!(rounded_bytes(u64::MAX), u64::MAX);
    }

    #[test]
    fn env_overrides_follow_tf() {
        let mut o = Options::new(1 << 30);
        o.apply_tf_env(|k| (k == "TF_FORCE_GPU_ALLOW_GROWTH").then(|| "TRUE".to_string()));
        assert!(o.allow_growth);
        o.apply_tf_env(|k| (k == "TF_FORCE_GPU_ALLOW_GROWTH").then(|| "yes".to_string()));
        assert!(o.allow_growth, "invalid values are ignored");
        o.apply_tf_env(|k| (k == "TF_ENABLE_GPU_GARBAGE_COLLECTION").then(|| "true".to_string()));
        assert!(o.garbage_collection);
    }
}
