//! PyTorch's CUDA caching allocator (`DeviceCachingAllocator` in
//! `c10/cuda/CUDACachingAllocator.cpp`), re-implemented to make the same choices: the same
//! block for every request, the same segments asked of the device, the same releases when
//! the device says no. Like [`crate::bfc`] it is single-threaded and does no I/O; the device
//! behind it is a [`Device`].
//!
//! The rules, with PyTorch's names (the invariants the code keeps are stated where kept):
//! - sizes are rounded to 512 bytes (or to a power-of-two division,
//!   `roundup_power2_divisions`); requests of at most 1 MiB go to the *small pool*, whose
//!   segments are 2 MiB; larger ones to the *large pool*: 20 MiB segments under 10 MiB,
//!   else the size rounded up to 2 MiB;
//! - each pool's free blocks are ordered by (stream, size, address): a request takes the
//!   smallest free block of its stream that holds it, the lowest address among equals;
//! - oversize rules with `max_split_size_mb`: a smaller request never takes an oversize
//!   block, an oversize request never takes one 20 MiB larger than itself;
//! - split: small pool (or expandable segments) when 512 bytes or more remain; large pool
//!   when the request is under `max_split_size` and more than 1 MiB remains — a smaller
//!   tail stays in the block;
//! - a free returns the block at once, unless `record_stream` put it in use on other
//!   streams: then it is *pending free* until those streams pass their events;
//! - free neighbours in a segment are merged at once (merged blocks keep their stale
//!   requested size, as PyTorch's snapshots show);
//! - when no free block fits: garbage collection (with a memory fraction and a threshold),
//!   a new segment from the device, then the release of oversize cached segments
//!   (`max_split_size`), then every whole cached segment (`empty_cache`), one last try, and
//!   the OOM;
//! - expandable segments: one address-space reservation per (stream, pool), pages (2 MiB
//!   small, 20 MiB large) mapped as needed and unmapped on release.

mod pages;
mod set;
pub mod settings;
mod snapshot;

use crate::bfc::{AllocFailure, FreeError};
use crate::device::{Device, DeviceDescription, MemInfo};
use crate::record::{Event, EventKind, History, Meta, Names, Recorder, Retag, StepMark};
use oomscope_base::hash::FastMap;
use pages::PageRuns;
use set::{FreeSet, OrderedSet};
pub use settings::{
    LARGE_BUFFER, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE, Settings, SettingsError,
};
pub use snapshot::{RestoredBlock, RestoredSegment};
use std::fmt;

const NONE: u32 = u32::MAX;
/// Failed requests kept (all are counted).
const FAILURES_KEPT: usize = 100_000;

/// The two pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    fn index(self) -> usize {
        match self {
            PoolKind::Small => 0,
            PoolKind::Large => 1,
        }
    }
}

/// A statistic as PyTorch keeps it: current, peak, and totals in and out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
    pub allocated: u64,
    pub freed: u64,
}

impl Stat {
    fn increase(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
        self.allocated += n;
    }

    fn decrease(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
        self.freed += n;
    }
}

/// A statistic for all memory, the small pool and the large pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub all: Stat,
    pub small: Stat,
    pub large: Stat,
}

impl PoolStats {
    fn increase(&mut self, pool: PoolKind, n: u64) {
        self.all.increase(n);
        self.of(pool).increase(n);
    }

    fn decrease(&mut self, pool: PoolKind, n: u64) {
        self.all.decrease(n);
        self.of(pool).decrease(n);
    }

    fn of(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        }
    }
}

/// PyTorch's `DeviceStats` (`torch.cuda.memory_stats()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Blocks handed out and their bytes (block sizes, unsplit tails included).
    pub allocation: PoolStats,
    pub allocated_bytes: PoolStats,
    /// Handed out or pending free.
    pub active: PoolStats,
    pub active_bytes: PoolStats,
    /// What the program asked for.
    pub requested_bytes: PoolStats,
    /// Segments obtained from the device, and their bytes.
    pub segment: PoolStats,
    pub reserved_bytes: PoolStats,
    /// Free blocks inside split segments: memory the cache cannot give back.
    pub inactive_split: PoolStats,
    pub inactive_split_bytes: PoolStats,
    pub oversize_allocations: Stat,
    pub oversize_segments: Stat,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_sync_all_streams: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
}

/// One block: a range of a segment, handed out, pending free, free, or (in an expandable
/// segment) not mapped. What every search, split and merge reads, in one cache line; what
/// only an allocation's own calls touch is in its [`Cold`] half, at the same handle.
#[derive(Clone, Debug, Default)]
struct Block {
    addr: u64,
    size: u64,
    /// The request it was last handed out for (stale once free, as in PyTorch).
    requested: u64,
    stream: u64,
    /// `get_free_blocks_call_count` when it last entered the pool (its age for GC).
    gc_base: u64,
    prev: u32,
    next: u32,
    /// The expandable segment it belongs to (`NONE`: a segment of its own).
    expandable: u32,
    /// Events still to pass before a pending free completes.
    event_count: u32,
    small: bool,
    allocated: bool,
    /// False for address space of an expandable segment with no memory behind it.
    mapped: bool,
}

/// What a block carries while handed out.
#[derive(Clone, Debug, Default)]
struct Cold {
    /// Streams it was used on besides its own (`record_stream`). Empty unless the block is
    /// allocated: a free clears it (the events stand for the streams then).
    stream_uses: Vec<u64>,
    id: u64,
    meta: Meta,
}

impl Block {
    fn pool(&self) -> PoolKind {
        if self.small { PoolKind::Small } else { PoolKind::Large }
    }

    fn is_split(&self) -> bool {
        self.prev != NONE || self.next != NONE
    }
}

/// What a new block is made with; the rest starts empty (free, nothing recorded).
struct NewBlock {
    addr: u64,
    size: u64,
    stream: u64,
    small: bool,
    prev: u32,
    next: u32,
    mapped: bool,
    expandable: u32,
}

/// A free-block set entry: ordered by (stream, size, address), as `BlockComparatorSize`.
type FreeKey = (u64, u64, u64, u32);
/// An unmapped-block set entry: ordered by (stream, address), as `BlockComparatorAddress`.
type UnmappedKey = (u64, u64, u32);

#[derive(Clone, Debug, Default)]
struct Pool {
    blocks: FreeSet,
    unmapped: OrderedSet<UnmappedKey>,
    get_free_blocks_call_count: u64,
    /// A release went through the free set and nothing entered it since: another release
    /// would find nothing (a block becomes releasable only by entering the set), so it is
    /// skipped. A program failing in a loop over thousands of split blocks made every OOM
    /// walk them all.
    released: bool,
}

/// An expandable segment: reserved address space, mapped page by page.
#[derive(Clone, Debug)]
struct Expandable {
    base: u64,
    size: u64,
    page: u64,
    /// Pages with memory behind them.
    mapped: PageRuns,
    released: bool,
}

/// How the allocator reports itself.
#[derive(Clone, Debug, PartialEq)]
pub struct CachingOptions {
    /// Name in reports.
    pub name: String,
    /// Device name in "Current usage from device" and dumps.
    pub device_name: String,
    /// Device index (`GPU 0` in PyTorch's message).
    pub device_index: i32,
    /// Events kept in the history.
    pub history: usize,
}

impl CachingOptions {
    pub fn new(device_index: i32) -> CachingOptions {
        CachingOptions {
            name: "pytorch_caching_allocator".into(),
            device_name: format!("cuda:{device_index}"),
            device_index,
            history: 10_000,
        }
    }
}

/// A block as code outside the allocator reads it.
#[derive(Clone, Copy, Debug)]
pub struct BlockRef<'a> {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub allocated: bool,
    /// Freed by the program but still in use on another stream.
    pub pending_free: bool,
    pub mapped: bool,
    pub meta: &'a Meta,
}

/// A segment as code outside the allocator reads it: a range obtained from the device (or
/// a contiguous mapped range of an expandable segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentRef {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub expandable: bool,
    /// Handle of its first block.
    first: u32,
}

/// What a failed request saw, for PyTorch's message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OomFigures {
    /// The segment size it would have needed (`Tried to allocate`).
    pub alloc_size: u64,
    pub device_free: u64,
    pub device_total: u64,
    pub allocated: u64,
    pub reserved: u64,
    pub allowed: Option<u64>,
}

/// PyTorch's caching allocator for one device.
pub struct Caching {
    settings: Settings,
    opts: CachingOptions,
    device: Box<dyn Device>,
    blocks: Vec<Block>,
    /// By handle, beside `blocks`.
    cold: Vec<Cold>,
    free_handles: Vec<u32>,
    pools: [Pool; 2],
    /// Freed blocks waiting for other streams (`event_count > 0`).
    pending: usize,
    /// Handed-out and pending-free blocks by address.
    active: FastMap<u64, u32>,
    expandable: Vec<Expandable>,
    /// Bytes obtained from the device (PyTorch's `total_allocated_memory`).
    total_allocated_memory: u64,
    /// `set_per_process_memory_fraction`'s limit.
    allowed_memory_maximum: Option<u64>,
    stats: DeviceStats,
    next_id: u64,
    /// What is recorded beside the state: names, history, the peak, steps, failures.
    rec: Recorder,
    oom_figures: Vec<OomFigures>,
    /// Largest block ever handed out.
    largest_alloc: u64,
}

impl fmt::Debug for Caching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caching").field("settings", &self.settings.text).finish_non_exhaustive()
    }
}

/// The request being served (PyTorch's `AllocParams`).
struct Params {
    size: u64,
    alloc_size: u64,
    stream: u64,
    pool: PoolKind,
}

impl Caching {
    pub fn new(settings: Settings, opts: CachingOptions, device: Box<dyn Device>) -> Caching {
        let mut c = Caching {
            rec: Recorder::new(opts.history),
            settings,
            opts,
            device,
            blocks: Vec::new(),
            cold: Vec::new(),
            free_handles: Vec::new(),
            pools: [Pool::default(), Pool::default()],
            pending: 0,
            active: FastMap::default(),
            expandable: Vec::new(),
            total_allocated_memory: 0,
            allowed_memory_maximum: None,
            stats: DeviceStats::default(),
            next_id: 1,
            oom_figures: Vec::new(),
            largest_alloc: 0,
        };
        if let Some(f) = c.settings.memory_fraction {
            c.set_memory_fraction(f);
        }
        c
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn options(&self) -> &CachingOptions {
        &self.opts
    }

    /// `torch.cuda.set_per_process_memory_fraction`: the allocator may hold at most
    /// `int(fraction × total)` bytes.
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        let total = self.device.mem_info().total;
        self.allowed_memory_maximum = Some((fraction * total as f64) as u64);
    }

    /// A limit in bytes, as a memory fraction sets one (for `--limit`).
    pub fn set_allowed(&mut self, bytes: u64) {
        self.allowed_memory_maximum = Some(bytes);
    }

    /// The limit a memory fraction set.
    pub fn allowed(&self) -> Option<u64> {
        self.allowed_memory_maximum
    }

    pub fn device_stats(&self) -> &DeviceStats {
        &self.stats
    }

    pub fn names(&self) -> &Names {
        &self.rec.names
    }

    pub fn names_mut(&mut self) -> &mut Names {
        &mut self.rec.names
    }

    pub fn history(&self) -> &History {
        &self.rec.history
    }

    pub fn current_step(&self) -> i64 {
        self.rec.current_step
    }

    pub fn step_marks(&self) -> impl Iterator<Item = &StepMark> {
        self.rec.steps.iter()
    }

    pub fn failures(&self) -> &[AllocFailure] {
        &self.rec.failures
    }

    /// PyTorch's figures at each failure (parallel to [`Caching::failures`]).
    pub fn oom_figures(&self) -> &[OomFigures] {
        &self.oom_figures
    }

    pub fn device_mem_info(&self) -> MemInfo {
        self.device.mem_info()
    }

    pub fn device_description(&self) -> DeviceDescription {
        self.device.describe()
    }

    /// Handed-out and pending-free blocks.
    pub fn live_allocations(&self) -> usize {
        self.active.len()
    }

    pub fn largest_alloc(&self) -> u64 {
        self.largest_alloc
    }

    /// Says what the live allocation at `addr` is (see [`crate::bfc::Bfc::retag`]). False
    /// when nothing is allocated there.
    pub fn retag(&mut self, addr: u64, r: Retag) -> bool {
        if !self.is_allocated(addr) {
            return false;
        }
        let h = self.active[&addr] as usize;
        let (size, requested) = (self.blocks[h].size, self.blocks[h].requested);
        let meta = &mut self.cold[h].meta;
        let from = r.apply(meta);
        let to = meta.op;
        self.rec.peak.rename(size, requested, from, to);
        true
    }

    /// The block size of the live allocation at `addr`.
    pub fn allocated_size(&self, addr: u64) -> Option<u64> {
        self.active.get(&addr).map(|&h| self.blocks[h as usize].size).filter(|_| self.is_allocated(addr))
    }

    /// What the program asked for at `addr`.
    pub fn requested_size(&self, addr: u64) -> Option<u64> {
        self.active.get(&addr).map(|&h| self.blocks[h as usize].requested)
    }

    fn is_allocated(&self, addr: u64) -> bool {
        self.active.get(&addr).is_some_and(|&h| self.blocks[h as usize].allocated)
    }

    /// The largest free mapped block.
    pub fn largest_free_block(&self) -> u64 {
        self.pools.iter().map(|p| p.blocks.largest()).max().unwrap_or(0)
    }

    // ---- blocks ----------------------------------------------------------------------

    /// A new free block. A handle given back is reused in place: its fields are written one
    /// by one (moving a whole `Block` in was a `memmove` call on every split), and the
    /// `stream_uses` it had keeps its capacity.
    fn new_block(&mut self, n: NewBlock) -> u32 {
        match self.free_handles.pop() {
            Some(h) => {
                let b = &mut self.blocks[h as usize];
                b.addr = n.addr;
                b.size = n.size;
                b.requested = 0;
                b.stream = n.stream;
                b.small = n.small;
                b.prev = n.prev;
                b.next = n.next;
                b.allocated = false;
                b.mapped = n.mapped;
                b.expandable = n.expandable;
                b.event_count = 0;
                b.gc_base = 0;
                // The cold half was cleared when the handle was given back.
                h
            }
            None => {
                self.blocks.push(Block {
                    addr: n.addr,
                    size: n.size,
                    stream: n.stream,
                    small: n.small,
                    prev: n.prev,
                    next: n.next,
                    mapped: n.mapped,
                    expandable: n.expandable,
                    ..Block::default()
                });
                self.cold.push(Cold::default());
                u32::try_from(self.blocks.len() - 1).unwrap_or(NONE)
            }
        }
    }

    fn drop_block(&mut self, h: u32) {
        // A dropped handle is a block of size 0 (what readers of the table skip); the
        // rest is overwritten when the handle is reused.
        let b = &mut self.blocks[h as usize];
        b.size = 0;
        b.allocated = false;
        b.mapped = false;
        let c = &mut self.cold[h as usize];
        c.stream_uses.clear();
        c.id = 0;
        c.meta = Meta::default();
        self.free_handles.push(h);
    }

    fn key(&self, h: u32) -> FreeKey {
        let b = &self.blocks[h as usize];
        (b.stream, b.size, b.addr, h)
    }

    fn unmapped_key(&self, h: u32) -> UnmappedKey {
        let b = &self.blocks[h as usize];
        (b.stream, b.addr, h)
    }

    /// `insert_into_blocks`: into its pool's free set, its age restarting.
    fn insert_free(&mut self, h: u32) {
        let pool = self.blocks[h as usize].pool().index();
        self.blocks[h as usize].gc_base = self.pools[pool].get_free_blocks_call_count;
        let k = self.key(h);
        self.pools[pool].blocks.insert(k);
        self.pools[pool].released = false;
    }

    /// The free block keyed `old` is now block `h` (its key changed): one step in the set
    /// where both keys fall in one bin, as they do when a block splits or merges.
    fn replace_free(&mut self, old: FreeKey, h: u32) {
        let pool = self.blocks[h as usize].pool().index();
        self.blocks[h as usize].gc_base = self.pools[pool].get_free_blocks_call_count;
        let k = self.key(h);
        self.pools[pool].blocks.replace(&old, k);
        self.pools[pool].released = false;
    }

    fn remove_free(&mut self, h: u32) {
        let pool = self.blocks[h as usize].pool().index();
        let k = self.key(h);
        self.pools[pool].blocks.remove(&k);
    }

    // ---- malloc ------------------------------------------------------------------------

    /// `get_allocation_size`: the segment a rounded size asks of the device.
    pub fn allocation_size(size: u64) -> u64 {
        if size <= SMALL_SIZE {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            LARGE_BUFFER
        } else {
            size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
        }
    }

    /// Allocates `bytes` on `stream`; the address, or the failure with the state at that
    /// moment. 0 bytes is no allocation (address 0), as PyTorch returns a null pointer.
    pub fn allocate(&mut self, bytes: u64, stream: u64, meta: Meta) -> Result<u64, Box<AllocFailure>> {
        if bytes == 0 {
            return Ok(0);
        }
        let size = self.settings.round_size(bytes);
        let pool = if size <= SMALL_SIZE { PoolKind::Small } else { PoolKind::Large };
        let mut p = Params { size, alloc_size: Self::allocation_size(size), stream, pool };
        // A block found in the free set stays there until `alloc_found_block` knows whether
        // it splits: the remainder then takes the block's key in one step.
        let mut in_set = self.get_free_block(&p);
        let mut found = in_set.map(|k| k.3);
        if found.is_none() {
            if self.allowed_memory_maximum.is_some() && self.settings.garbage_collection_threshold > 0.0 {
                self.garbage_collect_cached_blocks(meta.t_ns);
            }
            found = self.alloc_block(&mut p, false, meta.t_ns);
            if found.is_none() && self.release_available_cached_blocks(&p, meta.t_ns) {
                found = self.alloc_block(&mut p, false, meta.t_ns);
            }
            if found.is_none() {
                self.release_cached_blocks(meta.t_ns);
                found = self.alloc_block(&mut p, true, meta.t_ns);
            }
        }
        let Some(h) = found else {
            return Err(Box::new(self.record_failure(bytes, &p, meta)));
        };
        if found != in_set.map(|k| k.3) {
            in_set = None;
        }
        Ok(self.alloc_found_block(h, in_set, bytes, &p, meta))
    }

    /// `get_free_block`: the smallest free block of the stream that holds the request,
    /// within the oversize rules.
    /// The block is left in the set; its key is returned.
    fn get_free_block(&mut self, p: &Params) -> Option<FreeKey> {
        let pi = p.pool.index();
        if self.allowed_memory_maximum.is_some() && self.settings.garbage_collection_threshold > 0.0 {
            self.pools[pi].get_free_blocks_call_count += 1;
        }
        self.find_free_block(p)
    }

    /// True when a request of `bytes` on `stream` would be served from the cache now,
    /// without asking the device (nothing changes).
    pub fn serves_from_cache(&self, bytes: u64, stream: u64) -> bool {
        let size = self.settings.round_size(bytes);
        let pool = if size <= SMALL_SIZE { PoolKind::Small } else { PoolKind::Large };
        self.find_free_block(&Params { size, alloc_size: Self::allocation_size(size), stream, pool }).is_some()
    }

    /// [`Caching::get_free_block`]'s search, without its bookkeeping.
    fn find_free_block(&self, p: &Params) -> Option<FreeKey> {
        let pi = p.pool.index();
        let expandable_on = self.settings.expandable_segments;
        let mut k = self.pools[pi].blocks.first_from(p.stream, p.size)?;
        if k.0 != p.stream {
            return None;
        }
        if self.blocks[k.3 as usize].expandable != NONE {
            let mut candidates = self.pools[pi].blocks.from(p.stream, p.size).skip(1);
            if expandable_on {
                // Best fit by the size a block can grow to: its size and the unmapped space
                // right after it.
                let grow = |h: u32| {
                    let b = &self.blocks[h as usize];
                    b.size
                        + if b.next != NONE && !self.blocks[b.next as usize].mapped {
                            self.blocks[b.next as usize].size
                        } else {
                            0
                        }
                };
                for next in candidates {
                    if self.blocks[k.3 as usize].expandable == NONE || next.0 != p.stream || grow(next.3) >= grow(k.3) {
                        break;
                    }
                    k = next;
                }
            } else {
                // Expandable segments turned off after some were made: only other blocks.
                let other = candidates.find(|n| n.0 != p.stream || self.blocks[n.3 as usize].expandable == NONE)?;
                if other.0 != p.stream {
                    return None;
                }
                k = other;
            }
        }
        let max_split = self.settings.max_split();
        if p.size < max_split && k.1 >= max_split {
            return None;
        }
        if p.size >= max_split && k.1 >= p.size.saturating_add(self.settings.max_non_split_rounding) {
            return None;
        }
        Some(k)
    }

    /// `alloc_block`: a new segment (or mapped pages) from the device; `None` when the
    /// limit or the device says no.
    fn alloc_block(&mut self, p: &mut Params, retry: bool, t_ns: u64) -> Option<u32> {
        if retry {
            self.stats.num_alloc_retries += 1;
        }
        if let Some(allowed) = self.allowed_memory_maximum
            && self.total_allocated_memory + p.alloc_size > allowed
        {
            return None;
        }
        if self.settings.expandable_segments {
            return self.try_allocate_expandable_block(p, t_ns);
        }
        let addr = self.device.alloc(p.alloc_size).ok()?;
        self.total_allocated_memory += p.alloc_size;
        let h = self.new_block(NewBlock {
            addr,
            size: p.alloc_size,
            stream: p.stream,
            small: p.pool == PoolKind::Small,
            prev: NONE,
            next: NONE,
            mapped: true,
            expandable: NONE,
        });
        self.stats.segment.increase(p.pool, 1);
        self.stats.reserved_bytes.increase(p.pool, p.alloc_size);
        if p.alloc_size >= self.settings.max_split() {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.push(t_ns, EventKind::Extend, addr, p.alloc_size, p.alloc_size, 0);
        Some(h)
    }

    /// `alloc_found_block`: split when the rules say so, hand out the low part.
    /// `in_set`: the block's key when it is still in the free set.
    fn alloc_found_block(&mut self, h: u32, in_set: Option<FreeKey>, bytes: u64, p: &Params, meta: Meta) -> u64 {
        let remaining = self.blocks[h as usize].size - p.size;
        let split = if p.pool == PoolKind::Small || self.settings.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            p.size < self.settings.max_split() && remaining > SMALL_SIZE
        };
        let h = if split {
            // The remainder keeps the block's place and moves up; the request takes a new
            // block at the low end.
            let rest = h;
            let (addr, stream, small, prev, expandable) = {
                let b = &self.blocks[rest as usize];
                (b.addr, b.stream, b.small, b.prev, b.expandable)
            };
            let was_split = self.blocks[rest as usize].is_split();
            let new = self.new_block(NewBlock {
                addr,
                size: p.size,
                stream,
                small,
                prev,
                next: rest,
                mapped: true,
                expandable,
            });
            if prev != NONE {
                self.blocks[prev as usize].next = new;
            }
            let r = &mut self.blocks[rest as usize];
            r.prev = new;
            r.addr += p.size;
            r.size -= p.size;
            let rest_size = r.size;
            if expandable == NONE {
                if was_split {
                    self.stats.inactive_split_bytes.decrease(p.pool, p.size);
                } else {
                    self.stats.inactive_split_bytes.increase(p.pool, rest_size);
                    self.stats.inactive_split.increase(p.pool, 1);
                }
            }
            match in_set {
                Some(old) => self.replace_free(old, rest),
                None => self.insert_free(rest),
            }
            new
        } else {
            if let Some(old) = in_set {
                self.pools[p.pool.index()].blocks.remove(&old);
            }
            if self.blocks[h as usize].is_split() && self.blocks[h as usize].expandable == NONE {
                let size = self.blocks[h as usize].size;
                self.stats.inactive_split_bytes.decrease(p.pool, size);
                self.stats.inactive_split.decrease(p.pool, 1);
            }
            h
        };
        let id = self.next_id;
        self.next_id += 1;
        let b = &mut self.blocks[h as usize];
        b.allocated = true;
        b.requested = bytes;
        let c = &mut self.cold[h as usize];
        c.id = id;
        c.meta = meta;
        c.stream_uses.clear();
        let b = &self.blocks[h as usize];
        let (addr, size) = (b.addr, b.size);
        self.active.insert(addr, h);
        self.stats.allocation.increase(p.pool, 1);
        self.stats.allocated_bytes.increase(p.pool, size);
        self.stats.active.increase(p.pool, 1);
        self.stats.active_bytes.increase(p.pool, size);
        self.stats.requested_bytes.increase(p.pool, bytes);
        if size >= self.settings.max_split() {
            self.stats.oversize_allocations.increase(1);
        }
        self.largest_alloc = self.largest_alloc.max(size);
        self.rec.peak.alloc(size, bytes, &meta, self.rec.history.total());
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Alloc,
            addr,
            size,
            requested: bytes,
            op: meta.op,
            step: meta.step,
        });
        addr
    }

    // ---- free ------------------------------------------------------------------------

    /// Frees the allocation at `addr`: returned to the pool at once, or pending free while
    /// the streams `record_stream` added use it. Returns the block size.
    pub fn free(&mut self, addr: u64, t_ns: u64) -> Result<u64, FreeError> {
        if addr == 0 {
            return Ok(0);
        }
        // One lookup: the entry leaves the active map now and comes back only for a
        // pending free (or a block freed twice, which stays as it was).
        let h = self.active.remove(&addr).ok_or(FreeError::NotAllocated(addr))?;
        if !self.blocks[h as usize].allocated {
            self.active.insert(addr, h);
            return Err(FreeError::NotAllocated(addr));
        }
        let (size, pool, requested, op) = {
            let b = &mut self.blocks[h as usize];
            b.allocated = false;
            (b.size, b.pool(), b.requested, self.cold[h as usize].meta.op)
        };
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        self.rec.peak.free(size, requested, op);
        if self.cold[h as usize].stream_uses.is_empty() {
            self.free_block(h, t_ns);
        } else {
            // `insert_events`: one event per stream; the block waits for all of them, and
            // stays active until then.
            let uses = &mut self.cold[h as usize].stream_uses;
            self.blocks[h as usize].event_count = u32::try_from(uses.len()).unwrap_or(u32::MAX);
            uses.clear();
            self.active.insert(addr, h);
            self.pending += 1;
        }
        Ok(size)
    }

    /// `record_stream`: the allocation at `addr` is in use on `stream` too.
    pub fn record_stream(&mut self, addr: u64, stream: u64) -> bool {
        let Some(&h) = self.active.get(&addr) else { return false };
        let b = &mut self.blocks[h as usize];
        let uses = &mut self.cold[h as usize].stream_uses;
        if stream != b.stream && !uses.contains(&stream) {
            uses.push(stream);
        }
        true
    }

    /// Allocations freed by the program and still waiting for other streams.
    pub fn pending_frees(&self) -> impl Iterator<Item = u64> + '_ {
        // Counted, so that a synchronize with none pending (every OOM synchronizes) does not
        // walk every live allocation.
        let any = self.pending > 0;
        self.active.iter().filter(move |(_, h)| any && self.blocks[**h as usize].event_count > 0).map(|(&a, _)| a)
    }

    /// One of the streams a pending free waited for has passed its event; at the last one
    /// the block returns to the pool. True when `addr` was pending.
    pub fn event_completed(&mut self, addr: u64, t_ns: u64) -> bool {
        let Some(&h) = self.active.get(&addr) else { return false };
        let b = &mut self.blocks[h as usize];
        if b.allocated || b.event_count == 0 {
            return false;
        }
        b.event_count -= 1;
        if b.event_count == 0 {
            self.active.remove(&addr);
            self.pending -= 1;
            self.free_block(h, t_ns);
        }
        true
    }

    /// Every stream a pending free waited for has passed: the block returns to the pool.
    /// True when `addr` was pending.
    pub fn complete_pending(&mut self, addr: u64, t_ns: u64) -> bool {
        let Some(&h) = self.active.get(&addr) else { return false };
        let b = &mut self.blocks[h as usize];
        if b.allocated || b.event_count == 0 {
            return false;
        }
        b.event_count = 0;
        self.active.remove(&addr);
        self.pending -= 1;
        self.free_block(h, t_ns);
        true
    }

    /// `synchronize_and_free_events`: the device is waited for, and every pending free
    /// completes.
    pub fn synchronize(&mut self, t_ns: u64) -> usize {
        let pending: Vec<u64> = self.pending_frees().collect();
        if !pending.is_empty() {
            self.device.synchronize();
        }
        for &addr in &pending {
            if let Some(h) = self.active.remove(&addr) {
                self.blocks[h as usize].event_count = 0;
                self.pending -= 1;
                self.free_block(h, t_ns);
            }
        }
        self.stats.num_sync_all_streams += 1;
        pending.len()
    }

    /// `free_block`: the block merges with free neighbours and returns to its pool. The
    /// caller has taken it out of the active map.
    fn free_block(&mut self, h: u32, t_ns: u64) {
        let (addr, size, requested, pool, op, step) = {
            let b = &self.blocks[h as usize];
            let m = &self.cold[h as usize].meta;
            (b.addr, b.size, b.requested, b.pool(), m.op, m.step)
        };
        self.rec.history.push(Event { seq: 0, t_ns, kind: EventKind::Free, addr, size, requested, op, step });
        let expandable = self.blocks[h as usize].expandable != NONE;
        let (prev, next) = (self.blocks[h as usize].prev, self.blocks[h as usize].next);
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        // The neighbours merged in leave the free set and the merged block enters it: the
        // last neighbour's key is replaced by the merged block's.
        let mut taken: [Option<FreeKey>; 2] = [None, None];
        for (i, candidate) in [prev, next].into_iter().enumerate() {
            let (merged, key) = self.merge_blocks(h, candidate, false);
            taken[i] = key;
            if merged > 0 {
                net_blocks -= 1;
                net_bytes -= merged as i64;
            }
        }
        let pi = pool.index();
        match taken {
            [None, None] => self.insert_free(h),
            [Some(k), None] | [None, Some(k)] => self.replace_free(k, h),
            [Some(a), Some(b)] => {
                self.pools[pi].blocks.remove(&a);
                self.replace_free(b, h);
            }
        }
        if self.blocks[h as usize].is_split() {
            net_blocks += 1;
            net_bytes += self.blocks[h as usize].size as i64;
        }
        if !expandable {
            apply(&mut self.stats.inactive_split, pool, net_blocks);
            apply(&mut self.stats.inactive_split_bytes, pool, net_bytes);
        }
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, size);
        self.stats.requested_bytes.decrease(pool, requested);
        if size >= self.settings.max_split() {
            self.stats.oversize_allocations.decrease(1);
        }
    }

    /// `try_merge_blocks`: `src` joins `dst` when free, with no pending work and the same
    /// mapped-ness; `dst` keeps its stale requested size. Returns the bytes taken in.
    fn try_merge_blocks(&mut self, dst: u32, src: u32) -> u64 {
        self.merge_blocks(dst, src, true).0
    }

    /// `try_merge_blocks`; with `remove` false a mapped `src` is left in the free set and
    /// its key returned, for the caller to remove or replace.
    fn merge_blocks(&mut self, dst: u32, src: u32, remove: bool) -> (u64, Option<FreeKey>) {
        if src == NONE {
            return (0, None);
        }
        {
            let s = &self.blocks[src as usize];
            let d = &self.blocks[dst as usize];
            // A pending free (in the active set, not allocated) has `event_count > 0`: it
            // is not merged either.
            // A free block's stream uses are empty (see `Cold`).
            if s.allocated || s.event_count > 0 || s.mapped != d.mapped {
                return (0, None);
            }
            debug_assert!(self.active.get(&s.addr) != Some(&src), "a free block is not active");
        }
        let mut key = None;
        if self.blocks[src as usize].mapped {
            if remove {
                self.remove_free(src);
            } else {
                key = Some(self.key(src));
            }
        } else {
            let k = self.unmapped_key(src);
            let pool = self.blocks[src as usize].pool().index();
            self.pools[pool].unmapped.remove(&k);
        }
        let (s_addr, s_size, s_prev, s_next) = {
            let s = &self.blocks[src as usize];
            (s.addr, s.size, s.prev, s.next)
        };
        let d = &mut self.blocks[dst as usize];
        if d.prev == src {
            d.addr = s_addr;
            d.prev = s_prev;
            if s_prev != NONE {
                self.blocks[s_prev as usize].next = dst;
            }
        } else {
            d.next = s_next;
            if s_next != NONE {
                self.blocks[s_next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s_size;
        self.drop_block(src);
        (s_size, key)
    }

    // ---- when the device says no --------------------------------------------------------

    /// `release_block`: a whole cached segment goes back to the device.
    fn release_block(&mut self, h: u32, t_ns: u64) {
        let (addr, size, pool) = {
            let b = &self.blocks[h as usize];
            (b.addr, b.size, b.pool())
        };
        self.remove_free(h);
        // The device took it back; a real one that refuses keeps it, and the cache has
        // forgotten it either way, as PyTorch's does after cudaFree.
        let _ = self.device.free(addr, size);
        self.total_allocated_memory -= size;
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size);
        if size >= self.settings.max_split() {
            self.stats.oversize_segments.decrease(1);
        }
        self.stats.num_device_free += 1;
        self.push(t_ns, EventKind::RegionFree, addr, size, size, 0);
        self.drop_block(h);
    }

    /// `release_available_cached_blocks` (only with `max_split_size`): one cached oversize
    /// segment large enough, or oversize segments from the largest down until enough.
    fn release_available_cached_blocks(&mut self, p: &Params, t_ns: u64) -> bool {
        let Some(max_split) = self.settings.max_split_size else { return false };
        let pi = p.pool.index();
        let key_size = p.size.max(max_split);
        let found = self.pools[pi].blocks.first_from(p.stream, key_size);
        if let Some(k) = found
            && k.0 == p.stream
            && self.blocks[k.3 as usize].expandable == NONE
        {
            self.release_block(k.3, t_ns);
            return true;
        }
        // No single block is large enough: free oversize blocks, largest first.
        let below: Vec<FreeKey> = self.pools[pi].blocks.below_rev(p.stream, key_size);
        let mut released = 0;
        for k in below {
            if released >= key_size || k.1 < max_split || k.0 != p.stream {
                break;
            }
            if self.blocks[k.3 as usize].expandable == NONE {
                self.release_block(k.3, t_ns);
                released += k.1;
            }
        }
        released >= key_size
    }

    /// `release_cached_blocks` (and `torch.cuda.empty_cache()`): pending frees complete,
    /// then every whole cached segment of the large pool, then of the small pool, goes back;
    /// expandable segments give back their free pages.
    pub fn release_cached_blocks(&mut self, t_ns: u64) {
        self.synchronize(t_ns);
        for pi in [PoolKind::Large.index(), PoolKind::Small.index()] {
            if self.pools[pi].released {
                continue;
            }
            let keys: Vec<FreeKey> = self.pools[pi].blocks.iter().collect();
            let mut to_unmap = Vec::new();
            for k in keys {
                let b = &self.blocks[k.3 as usize];
                if b.expandable != NONE {
                    to_unmap.push(k.3);
                } else if !b.is_split() {
                    self.release_block(k.3, t_ns);
                }
            }
            for h in to_unmap {
                self.unmap_block(h, t_ns);
                let b = &self.blocks[h as usize];
                if !b.is_split() {
                    self.release_expandable_segment(h);
                }
            }
            // What stayed (split blocks, partial pages) stays until something enters.
            self.pools[pi].released = true;
        }
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&mut self, t_ns: u64) {
        self.release_cached_blocks(t_ns);
    }

    /// `garbage_collect_cached_blocks`: with a memory fraction and a threshold, whole cached
    /// large-pool segments older than the average go back until the excess is reclaimed.
    fn garbage_collect_cached_blocks(&mut self, t_ns: u64) {
        let Some(allowed) = self.allowed_memory_maximum else { return };
        let threshold = (self.settings.garbage_collection_threshold * allowed as f64) as u64;
        if self.total_allocated_memory <= threshold {
            return;
        }
        let target = self.total_allocated_memory - threshold;
        let li = PoolKind::Large.index();
        let count = self.pools[li].get_free_blocks_call_count;
        let age = |b: &Block| count - b.gc_base;
        let mut total_age: u64 = 0;
        let mut freeable: u64 = 0;
        for k in self.pools[li].blocks.iter() {
            let b = &self.blocks[k.3 as usize];
            if !b.is_split() {
                total_age += age(b);
                freeable += 1;
            }
        }
        if freeable == 0 {
            return;
        }
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && freeable > 0 {
            let threshold_age = total_age as f64 / freeable as f64;
            freed = false;
            let keys: Vec<FreeKey> = self.pools[li].blocks.iter().collect();
            for k in keys {
                let b = &self.blocks[k.3 as usize];
                if !b.is_split() && b.expandable == NONE && age(b) as f64 >= threshold_age {
                    freed = true;
                    reclaimed += b.size;
                    total_age -= age(b);
                    freeable -= 1;
                    self.release_block(k.3, t_ns);
                }
            }
        }
    }

    // ---- expandable segments -------------------------------------------------------------

    fn page_size(small: bool) -> u64 {
        if small { SMALL_BUFFER } else { LARGE_BUFFER }
    }

    /// `try_allocate_expandable_block`: map pages of a reservation until a free block holds
    /// the rounded size.
    fn try_allocate_expandable_block(&mut self, p: &Params, t_ns: u64) -> Option<u32> {
        let mut candidate = self.find_expandable_block(p)?;
        if !self.blocks[candidate as usize].mapped {
            let size = self.blocks[candidate as usize].size.min(p.size);
            candidate = self.map_block(candidate, size, t_ns)?;
        }
        while self.blocks[candidate as usize].size < p.size {
            let remaining = p.size - self.blocks[candidate as usize].size;
            let next = self.blocks[candidate as usize].next;
            if next == NONE {
                return None;
            }
            let size = remaining.min(self.blocks[next as usize].size);
            candidate = self.map_block(next, size, t_ns)?;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `find_expandable_block`: the lowest unmapped range of the stream with enough free
    /// and unmapped space after it (counting a free mapped block just before it), or a new
    /// reservation.
    fn find_expandable_block(&mut self, p: &Params) -> Option<u32> {
        let pi = p.pool.index();
        let allocatable = |c: &Caching, h: u32| {
            h != NONE && {
                let b = &c.blocks[h as usize];
                !b.allocated && b.event_count == 0 && c.active.get(&b.addr) != Some(&h)
            }
        };
        let room = |c: &Caching, mut h: u32| {
            let mut bytes = 0;
            while bytes < p.size && allocatable(c, h) {
                bytes += c.blocks[h as usize].size;
                h = c.blocks[h as usize].next;
            }
            bytes >= p.size
        };
        let unmapped: Vec<UnmappedKey> =
            self.pools[pi].unmapped.from((p.stream, 0, 0)).take_while(|k| k.0 == p.stream).copied().collect();
        for k in unmapped {
            let mut c = k.2;
            let prev = self.blocks[c as usize].prev;
            if allocatable(self, prev) {
                c = prev;
            }
            if room(self, c) {
                return Some(c);
            }
        }
        // A new reservation: address space for 9/8 of the device, in whole pages (none
        // past the address space: the device refuses it like any reservation).
        let small = p.pool == PoolKind::Small;
        let page = Self::page_size(small);
        let total = self.device.mem_info().total;
        let size = (total / 8).checked_mul(9)?.div_ceil(page).max(1).checked_mul(page)?;
        let base = self.device.reserve(size).ok()?;
        self.expandable.push(Expandable { base, size, page, mapped: PageRuns::default(), released: false });
        let index = u32::try_from(self.expandable.len() - 1).unwrap_or(NONE);
        let h = self.new_block(NewBlock {
            addr: base,
            size,
            stream: p.stream,
            small,
            prev: NONE,
            next: NONE,
            mapped: false,
            expandable: index,
        });
        let k = self.unmapped_key(h);
        self.pools[pi].unmapped.insert(k);
        Some(h)
    }

    /// `map_block`: map the pages under the first `size` bytes of an unmapped block; the
    /// mapped part merges with free mapped neighbours. The block that holds the result.
    fn map_block(&mut self, h: u32, size: u64, t_ns: u64) -> Option<u32> {
        let (addr, block_size, e, stream, small) = {
            let b = &self.blocks[h as usize];
            (b.addr, b.size, b.expandable as usize, b.stream, b.small)
        };
        let seg = &self.expandable[e];
        let page = seg.page;
        let first = (addr - seg.base) / page;
        let last = (addr + size - seg.base).div_ceil(page);
        let base = seg.base;
        // Each run of pages not yet mapped, all or none (PyTorch maps page by page and
        // unmaps what this call mapped when one fails).
        let mut done: Vec<(u64, u64)> = Vec::new();
        for (a, b) in self.expandable[e].mapped.gaps(first, last) {
            if self.device.map_pages(base + a * page, page, b - a).is_err() {
                for (a, b) in done {
                    self.device.unmap_pages(base + a * page, page, b - a);
                    self.expandable[e].mapped.remove(a, b);
                }
                return None;
            }
            self.expandable[e].mapped.insert(a, b);
            done.push((a, b));
        }
        let mapped_size = ((last - first) * page).min(block_size);
        let pool = if small { PoolKind::Small } else { PoolKind::Large };
        let k = self.unmapped_key(h);
        self.pools[pool.index()].unmapped.remove(&k);
        self.blocks[h as usize].mapped = true;
        if mapped_size < block_size {
            let next = self.blocks[h as usize].next;
            let rest = self.new_block(NewBlock {
                addr: addr + mapped_size,
                size: block_size - mapped_size,
                stream,
                small,
                prev: h,
                next,
                mapped: false,
                expandable: e as u32,
            });
            if next != NONE {
                self.blocks[next as usize].prev = rest;
            }
            self.blocks[h as usize].next = rest;
            self.blocks[h as usize].size = mapped_size;
            let k = self.unmapped_key(rest);
            self.pools[pool.index()].unmapped.insert(k);
        }
        let (prev, next) = (self.blocks[h as usize].prev, self.blocks[h as usize].next);
        self.try_merge_blocks(h, prev);
        self.try_merge_blocks(h, next);
        self.insert_free(h);
        self.total_allocated_memory += mapped_size;
        self.stats.reserved_bytes.increase(pool, mapped_size);
        self.stats.num_device_alloc += 1;
        self.push(t_ns, EventKind::Extend, addr, mapped_size, mapped_size, 0);
        Some(h)
    }

    /// `unmap_block`: unmap the whole pages inside a free block; the partial pages at its
    /// ends stay free and mapped.
    fn unmap_block(&mut self, h: u32, t_ns: u64) {
        let (addr, size, e, stream, small) = {
            let b = &self.blocks[h as usize];
            (b.addr, b.size, b.expandable as usize, b.stream, b.small)
        };
        let (base, page) = (self.expandable[e].base, self.expandable[e].page);
        let begin = (addr - base).div_ceil(page);
        let end = (addr + size - base) / page;
        if begin >= end {
            return;
        }
        let (u_addr, u_size) = (base + begin * page, (end - begin) * page);
        for (a, b) in self.expandable[e].mapped.runs(begin, end) {
            self.device.unmap_pages(base + a * page, page, b - a);
        }
        self.expandable[e].mapped.remove(begin, end);
        let pool = if small { PoolKind::Small } else { PoolKind::Large };
        self.remove_free(h);
        let before = u_addr - addr;
        if before > 0 {
            let prev = self.blocks[h as usize].prev;
            let b = self.new_block(NewBlock {
                addr,
                size: before,
                stream,
                small,
                prev,
                next: h,
                mapped: true,
                expandable: e as u32,
            });
            if prev != NONE {
                self.blocks[prev as usize].next = b;
            }
            self.blocks[h as usize].prev = b;
            self.insert_free(b);
        }
        let after = size - before - u_size;
        if after > 0 {
            let next = self.blocks[h as usize].next;
            let a = self.new_block(NewBlock {
                addr: u_addr + u_size,
                size: after,
                stream,
                small,
                prev: h,
                next,
                mapped: true,
                expandable: e as u32,
            });
            if next != NONE {
                self.blocks[next as usize].prev = a;
            }
            self.blocks[h as usize].next = a;
            self.insert_free(a);
        }
        {
            let b = &mut self.blocks[h as usize];
            b.addr = u_addr;
            b.size = u_size;
            b.mapped = false;
        }
        let (prev, next) = (self.blocks[h as usize].prev, self.blocks[h as usize].next);
        self.try_merge_blocks(h, prev);
        self.try_merge_blocks(h, next);
        let k = self.unmapped_key(h);
        self.pools[pool.index()].unmapped.insert(k);
        self.total_allocated_memory -= u_size;
        self.stats.reserved_bytes.decrease(pool, u_size);
        self.stats.num_device_free += 1;
        self.push(t_ns, EventKind::RegionFree, u_addr, u_size, u_size, 0);
    }

    /// A reservation with nothing mapped goes back.
    fn release_expandable_segment(&mut self, h: u32) {
        let e = self.blocks[h as usize].expandable as usize;
        let k = self.unmapped_key(h);
        let pool = self.blocks[h as usize].pool().index();
        self.pools[pool].unmapped.remove(&k);
        let (base, size) = (self.expandable[e].base, self.expandable[e].size);
        self.device.unreserve(base, size);
        self.expandable[e].released = true;
        self.drop_block(h);
    }

    // ---- replaying what a real allocator did ------------------------------------------------

    /// Releases the cached segment (or, in an expandable segment, unmaps the free pages)
    /// at `addr`, as a recorded `segment_free`/`segment_unmap` says the real allocator did.
    /// False when nothing free starts or lies there.
    pub fn release_at(&mut self, addr: u64, t_ns: u64) -> bool {
        let found = self.pools.iter().flat_map(|p| p.blocks.iter()).find(|k| {
            let b = &self.blocks[k.3 as usize];
            b.addr <= addr && addr < b.addr + b.size && (b.expandable != NONE || b.addr == addr)
        });
        let Some(k) = found else { return false };
        let h = k.3;
        if self.blocks[h as usize].expandable != NONE {
            self.unmap_block(h, t_ns);
            if !self.blocks[h as usize].is_split() && !self.blocks[h as usize].mapped {
                self.release_expandable_segment(h);
            }
            true
        } else if !self.blocks[h as usize].is_split() {
            self.release_block(h, t_ns);
            true
        } else {
            false
        }
    }

    // ---- failures and steps -------------------------------------------------------------

    fn record_failure(&mut self, bytes: u64, p: &Params, meta: Meta) -> AllocFailure {
        self.stats.num_ooms += 1;
        let device = self.device.mem_info();
        let in_use = self.stats.allocated_bytes.all.current;
        let reserved = self.stats.reserved_bytes.all.current;
        self.rec.history.push(Event {
            seq: 0,
            t_ns: meta.t_ns,
            kind: EventKind::Oom,
            addr: 0,
            size: p.size,
            requested: bytes,
            op: meta.op,
            step: meta.step,
        });
        let limit = self.allowed_memory_maximum.unwrap_or(reserved + device.free);
        let f = AllocFailure {
            seq: self.rec.history.total().saturating_sub(1),
            requested: bytes,
            rounded: p.size,
            meta,
            bytes_in_use: in_use,
            pool_bytes: reserved,
            largest_free_block: self.largest_free_block(),
            limit_headroom: limit.saturating_sub(reserved),
            device,
            device_refusals: Vec::new(),
            outside: false,
        };
        if self.rec.failures.len() < FAILURES_KEPT {
            self.rec.failures.push(f.clone());
            self.oom_figures.push(OomFigures {
                alloc_size: p.alloc_size,
                device_free: device.free,
                device_total: device.total,
                allocated: in_use,
                reserved,
                allowed: self.allowed_memory_maximum,
            });
        }
        f
    }

    /// Marks the start of a training step.
    pub fn mark_step(&mut self, step: i64, t_ns: u64) {
        self.rec.mark_step(StepMark {
            step,
            t_ns,
            bytes_in_use: self.stats.allocated_bytes.all.current,
            pool_bytes: self.stats.reserved_bytes.all.current,
            live: self.active.len() as u64,
        });
    }

    fn push(&mut self, t_ns: u64, kind: EventKind, addr: u64, size: u64, requested: u64, step: i64) {
        let step = if kind == EventKind::Step { step } else { self.rec.current_step };
        self.rec.history.push(Event { seq: 0, t_ns, kind, addr, size, requested, op: 0, step });
    }

    // ---- reading the state ------------------------------------------------------------------

    /// The segments in address order (an expandable segment: each contiguous mapped range,
    /// as PyTorch's snapshot lists it).
    pub fn segments(&self) -> Vec<SegmentRef> {
        let mut out = Vec::new();
        for (h, b) in self.blocks.iter().enumerate() {
            let h = h as u32;
            // Dropped handles are zeroed blocks.
            if b.size == 0 {
                continue;
            }
            let head = if b.expandable == NONE {
                b.prev == NONE
            } else {
                b.mapped && (b.prev == NONE || !self.blocks[b.prev as usize].mapped)
            };
            if !head {
                continue;
            }
            let mut size = 0;
            let mut n = h;
            while n != NONE && self.blocks[n as usize].mapped {
                size += self.blocks[n as usize].size;
                n = self.blocks[n as usize].next;
            }
            out.push(SegmentRef {
                addr: b.addr,
                size,
                stream: b.stream,
                pool: b.pool(),
                expandable: b.expandable != NONE,
                first: h,
            });
        }
        out.sort_by_key(|s| s.addr);
        out
    }

    /// Slots in the block table, live or dropped.
    pub fn slots(&self) -> usize {
        self.blocks.len()
    }

    /// The live, mapped blocks in slots `from..from + count`, in slot order; `head` marks
    /// the first block of each segment as [`Caching::segments`] draws them.
    pub fn visit_slots(&self, from: usize, count: usize, f: &mut dyn FnMut(crate::SlotChunk<'_>)) {
        let end = from.saturating_add(count).min(self.blocks.len());
        for (h, b) in self.blocks.iter().enumerate().take(end).skip(from) {
            // Dropped handles are zeroed blocks; unmapped ones are address space only.
            if b.size == 0 || !b.mapped {
                continue;
            }
            let head = b.prev == NONE || (b.expandable != NONE && !self.blocks[b.prev as usize].mapped);
            let pending = !b.allocated && self.active.get(&b.addr) == Some(&(h as u32));
            f(crate::SlotChunk {
                addr: b.addr,
                size: b.size,
                requested: b.requested,
                // A pending free is not reusable yet: it counts as in use.
                in_use: b.allocated || pending,
                head,
                meta: &self.cold[h].meta,
            });
        }
    }

    /// The blocks of a segment, in address order.
    pub fn segment_blocks(&self, seg: &SegmentRef) -> Vec<BlockRef<'_>> {
        let mut out = Vec::new();
        let mut n = seg.first;
        while n != NONE && self.blocks[n as usize].mapped {
            let b = &self.blocks[n as usize];
            let pending = !b.allocated && self.active.get(&b.addr) == Some(&n);
            out.push(BlockRef {
                addr: b.addr,
                size: b.size,
                requested: b.requested,
                allocated: b.allocated,
                pending_free: pending,
                mapped: b.mapped,
                meta: &self.cold[n as usize].meta,
            });
            n = b.next;
        }
        out
    }

    /// The invariants that make the allocator PyTorch's; `Err` names the first broken one.
    pub fn check(&self) -> Result<(), oomscope_base::Problem> {
        let mut reserved = 0;
        for seg in self.segments() {
            let mut at = seg.addr;
            let mut prev_free = false;
            for b in self.segment_blocks(&seg) {
                if b.addr != at {
                    return Err(oomscope_base::problem!(
                        "segment {:#x}: a block at {:#x}, expected {at:#x}",
                        seg.addr,
                        b.addr
                    ));
                }
                let free = !b.allocated && !b.pending_free;
                if free && prev_free {
                    return Err(oomscope_base::problem!("two free neighbours unmerged at {:#x}", b.addr));
                }
                if b.size % MIN_BLOCK_SIZE != 0 {
                    return Err(oomscope_base::problem!(
                        "block {:#x} of {} bytes: not a multiple of 512",
                        b.addr,
                        b.size
                    ));
                }
                prev_free = free;
                at += b.size;
            }
            reserved += seg.size;
        }
        if reserved != self.stats.reserved_bytes.all.current {
            return Err(oomscope_base::problem!(
                "segments hold {reserved} bytes, reserved_bytes says {}",
                self.stats.reserved_bytes.all.current
            ));
        }
        if reserved != self.total_allocated_memory {
            return Err(oomscope_base::problem!(
                "segments hold {reserved}, total_allocated_memory {}",
                self.total_allocated_memory
            ));
        }
        for pool in &self.pools {
            pool.blocks.check()?;
        }
        let pending = self.active.values().filter(|&&h| self.blocks[h as usize].event_count > 0).count();
        if pending != self.pending {
            return Err(oomscope_base::problem!("{pending} frees pending, {} counted", self.pending));
        }
        // Expandable segments' mapped pages are the memory their segments hold.
        let mut pages_bytes = 0;
        for x in &self.expandable {
            x.mapped.check()?;
            pages_bytes += x.mapped.count() * x.page;
        }
        let expandable_bytes: u64 = self.segments().iter().filter(|s| s.expandable).map(|s| s.size).sum();
        if pages_bytes != expandable_bytes {
            return Err(oomscope_base::problem!(
                "mapped pages hold {pages_bytes} bytes, expandable segments {expandable_bytes}"
            ));
        }
        let allocated: u64 =
            self.active.values().map(|&h| &self.blocks[h as usize]).filter(|b| b.allocated).map(|b| b.size).sum();
        if allocated != self.stats.allocated_bytes.all.current {
            return Err(oomscope_base::problem!(
                "allocated blocks hold {allocated}, allocated_bytes says {}",
                self.stats.allocated_bytes.all.current
            ));
        }
        let a = &self.stats.allocated_bytes.all;
        self.rec.peak.agrees_with(a.current, a.peak)?;
        let free_in_sets: usize = self.pools.iter().map(|p| p.blocks.len()).sum();
        let free_blocks = self
            .segments()
            .iter()
            .map(|s| self.segment_blocks(s).iter().filter(|b| !b.allocated && !b.pending_free).count())
            .sum::<usize>();
        if free_in_sets != free_blocks {
            return Err(oomscope_base::problem!(
                "{free_in_sets} blocks in the free sets, {free_blocks} free blocks in segments"
            ));
        }
        Ok(())
    }
}

fn apply(stat: &mut PoolStats, pool: PoolKind, delta: i64) {
    if delta > 0 {
        stat.increase(pool, delta.unsigned_abs());
    } else if delta < 0 {
        stat.decrease(pool, delta.unsigned_abs());
    }
}

#[cfg(test)]
mod tests;
