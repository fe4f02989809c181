//! The caching allocator's state as a [`Dump`] (segments as regions, blocks as chunks), and
//! the reverse for a replay that starts mid-run: segments put back as a snapshot lists them.

use super::{Caching, NONE, NewBlock, PoolKind, Stat};
use crate::bfc::{bins_of, describe, oom_record};
use crate::record::{BEFORE_RECORDING, Meta};
use oomscope_format::{
    AllocatorInfo, CachingStats, ChunkInfo, Counter, DeviceInfo, Dump, NodeUsage, RegionInfo, SegmentPool, Source,
    Stats,
};
use std::collections::HashMap;

/// A block of a segment being put back.
#[derive(Clone, Debug, Default)]
pub struct RestoredBlock {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub allocated: bool,
    pub meta: Meta,
}

/// A segment being put back: its blocks cover it in address order.
#[derive(Clone, Debug)]
pub struct RestoredSegment {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub blocks: Vec<RestoredBlock>,
}

fn counter(s: &Stat) -> Counter {
    Counter { current: s.current, peak: s.peak }
}

impl Caching {
    /// Puts a segment that existed before the first recorded event back, with its blocks:
    /// adjacent free blocks are merged (free neighbours are always merged in PyTorch), the
    /// statistics count it as if it had been allocated here. Its allocated blocks were live
    /// before any event, so none of them is the allocation that reached the peak: when the
    /// restored state is above the peak, it is the peak, reached by
    /// [`BEFORE_RECORDING`] before the first step (-1), with no event. Refused (false) when
    /// the blocks do not cover the segment exactly or it overlaps one already held.
    pub fn restore_segment(&mut self, seg: &RestoredSegment) -> bool {
        let mut at = seg.addr;
        for b in &seg.blocks {
            if b.addr != at || b.size == 0 {
                return false;
            }
            at += b.size;
        }
        if at != seg.addr + seg.size || self.segments().iter().any(|s| s.addr < at && seg.addr < s.addr + s.size) {
            return false;
        }
        // Merge free runs.
        let mut blocks: Vec<RestoredBlock> = Vec::with_capacity(seg.blocks.len());
        for b in &seg.blocks {
            match blocks.last_mut() {
                Some(last) if !last.allocated && !b.allocated => last.size += b.size,
                _ => blocks.push(b.clone()),
            }
        }
        let small = seg.pool == PoolKind::Small;
        self.total_allocated_memory += seg.size;
        self.stats.segment.increase(seg.pool, 1);
        self.stats.reserved_bytes.increase(seg.pool, seg.size);
        if seg.size >= self.settings.max_split() {
            self.stats.oversize_segments.increase(1);
        }
        let split = blocks.len() > 1;
        let mut prev = NONE;
        let mut handles = Vec::with_capacity(blocks.len());
        for b in &blocks {
            let h = self.new_block(NewBlock {
                addr: b.addr,
                size: b.size,
                stream: seg.stream,
                small,
                prev,
                next: NONE,
                mapped: true,
                expandable: NONE,
            });
            self.blocks[h as usize].requested = b.requested;
            self.blocks[h as usize].allocated = b.allocated;
            if prev != NONE {
                self.blocks[prev as usize].next = h;
            }
            prev = h;
            handles.push(h);
        }
        for (h, b) in handles.into_iter().zip(&blocks) {
            if b.allocated {
                let id = self.next_id;
                self.next_id += 1;
                let cold = &mut self.cold[h as usize];
                cold.id = id;
                cold.meta = b.meta;
                self.active.insert(b.addr, h);
                for s in [&mut self.stats.allocation, &mut self.stats.active] {
                    s.increase(seg.pool, 1);
                }
                for s in [&mut self.stats.allocated_bytes, &mut self.stats.active_bytes] {
                    s.increase(seg.pool, b.size);
                }
                self.stats.requested_bytes.increase(seg.pool, b.requested);
                if b.size >= self.settings.max_split() {
                    self.stats.oversize_allocations.increase(1);
                }
                self.largest_alloc = self.largest_alloc.max(b.size);
                // Already live when recording began: no allocation of it reached the peak.
                self.rec.peak.restore(b.size, b.requested, b.meta.op);
            } else {
                if split {
                    self.stats.inactive_split.increase(seg.pool, 1);
                    self.stats.inactive_split_bytes.increase(seg.pool, b.size);
                }
                self.insert_free(h);
            }
        }
        if blocks.iter().any(|b| b.allocated) {
            let op = self.rec.names.ops.intern(BEFORE_RECORDING);
            self.rec.peak.restored(op);
        }
        true
    }

    /// PyTorch's counters as a dump carries them.
    pub fn caching_stats(&self) -> CachingStats {
        let s = &self.stats;
        CachingStats {
            allowed: self.allowed_memory_maximum,
            allocated: counter(&s.allocated_bytes.all),
            reserved: counter(&s.reserved_bytes.all),
            active: counter(&s.active_bytes.all),
            requested: counter(&s.requested_bytes.all),
            inactive_split: counter(&s.inactive_split_bytes.all),
            segments: counter(&s.segment.all),
            allocations: counter(&s.allocation.all),
            alloc_retries: s.num_alloc_retries,
            ooms: s.num_ooms,
            device_allocs: s.num_device_alloc,
            device_frees: s.num_device_free,
        }
    }

    /// The state's figures as a dump carries them: in use is what PyTorch calls allocated,
    /// the pool is what it reserved, the limit the memory fraction's or the device's.
    pub fn stats(&self) -> Stats {
        let s = &self.stats;
        let largest_free = self.largest_free_block();
        let pool_bytes = s.reserved_bytes.all.current;
        let free_bytes = pool_bytes.saturating_sub(s.active_bytes.all.current);
        Stats {
            bytes_limit: self.limit(),
            bytes_in_use: s.allocated_bytes.all.current,
            peak_bytes_in_use: s.allocated_bytes.all.peak,
            num_allocs: s.allocation.all.allocated,
            num_frees: s.allocation.all.freed,
            largest_alloc_size: self.largest_alloc,
            pool_bytes,
            peak_pool_bytes: s.reserved_bytes.all.peak,
            largest_free_block: largest_free,
            free_bytes,
            fragmentation: if free_bytes == 0 { 0.0 } else { 1.0 - largest_free as f64 / free_bytes as f64 },
            num_ooms: s.num_ooms,
            ..Stats::default()
        }
    }

    /// What the allocator may hold: the memory fraction's limit, else the device's memory
    /// less what other processes hold.
    pub fn limit(&self) -> u64 {
        let mem = self.device.mem_info();
        self.allowed_memory_maximum.unwrap_or(mem.total.saturating_sub(self.device.describe().others))
    }

    pub fn device_info(&self) -> DeviceInfo {
        crate::device::info(self.device.as_ref(), &self.opts.device_name)
    }

    pub fn allocator_info(&self) -> AllocatorInfo {
        AllocatorInfo {
            name: self.opts.name.clone(),
            limit: self.limit(),
            allow_growth: true,
            expandable_segments: self.settings.expandable_segments,
            settings: Some(self.settings.text.clone()),
            caching: Some(Box::new(self.caching_stats())),
            torch_version: None,
            ..AllocatorInfo::default()
        }
    }

    /// The dump of the moment `failure` (the last failed request) happened: the state, with
    /// the failure as its OOM.
    pub fn oom_dump(&self, source: Source) -> Dump {
        let mut d = self.snapshot(source);
        if let Some(last) = d.ooms.last() {
            d.oom = Some(last.clone());
        }
        d
    }

    /// The whole state as a dump: segments as regions (with stream, pool and expandable
    /// flag), blocks as chunks (pending frees flagged), PyTorch's counters, the failures.
    pub fn snapshot(&self, source: Source) -> Dump {
        let names = &self.rec.names;
        let mut stack_index: HashMap<u32, u32> = HashMap::new();
        let mut stacks = Vec::new();
        let mut live = Vec::with_capacity(self.active.len());
        let mut regions = Vec::new();
        for seg in self.segments() {
            let mut chunks = Vec::new();
            for b in self.segment_blocks(&seg) {
                let mut info = ChunkInfo {
                    address: b.addr,
                    size: b.size,
                    requested: b.requested,
                    in_use: b.allocated,
                    pending_free: b.pending_free,
                    ..ChunkInfo::default()
                };
                if b.allocated || b.pending_free {
                    if b.allocated {
                        live.push((b.meta.op, b.size, b.requested));
                    }
                    describe(&mut info, b.meta, names, &mut stacks, &mut stack_index);
                }
                chunks.push(info);
            }
            regions.push(RegionInfo {
                address: seg.addr,
                size: seg.size,
                chunks,
                stream: Some(seg.stream),
                pool: Some(match seg.pool {
                    PoolKind::Small => SegmentPool::Small,
                    PoolKind::Large => SegmentPool::Large,
                }),
                expandable: seg.expandable,
            });
        }
        let usage_by_node = NodeUsage::rank(live, |op| names.op(op).to_string());
        let bins = bins_of(regions.iter().flat_map(|r| &r.chunks).map(|c| (c.size, c.requested, c.in_use)));
        let mut ooms: Vec<_> = self.rec.failures.iter().map(|f| oom_record(f, names)).collect();
        for (o, f) in ooms.iter_mut().zip(&self.oom_figures) {
            o.segment_request = Some(f.alloc_size);
        }
        let s = &self.stats;
        let recorded = self.rec.recorded(s.num_ooms == 0);
        let stats = self.stats();
        Dump {
            tool: format!("oomscope {}", env!("CARGO_PKG_VERSION")),
            source,
            device: self.device_info(),
            allocator: self.allocator_info(),
            stats,
            oom: ooms.first().cloned(),
            ooms_total: s.num_ooms,
            ooms,
            usage_by_node,
            peak: recorded.peak,
            bins,
            regions,
            stacks,
            events: recorded.events,
            events_total: recorded.events_total,
            steps: recorded.steps,
            ..Dump::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caching::{CachingOptions, Settings};
    use crate::device::SimDevice;

    const MIB: u64 = 1 << 20;

    /// A 20 MiB segment holding two blocks of `ops` (4 and 6 MiB) and a free rest.
    fn segment(c: &mut Caching, addr: u64, ops: [&str; 2]) -> RestoredSegment {
        let mut block = |at: u64, size: u64, op: &str| RestoredBlock {
            addr: at,
            size,
            requested: size,
            allocated: true,
            meta: Meta { op: c.names_mut().ops.intern(op), ..Meta::default() },
        };
        let blocks = vec![
            block(addr, 4 * MIB, ops[0]),
            block(addr + 4 * MIB, 6 * MIB, ops[1]),
            RestoredBlock { addr: addr + 10 * MIB, size: 10 * MIB, ..RestoredBlock::default() },
        ];
        RestoredSegment { addr, size: 20 * MIB, stream: 0, pool: PoolKind::Large, blocks }
    }

    /// A replay that starts from a snapshot's state: while the restored state is the peak,
    /// the peak is that state, reached before the first event (no allocation of it, no
    /// step, no event); the first allocation past it is the peak's from then on.
    #[test]
    fn a_restored_state_is_its_own_peak_reached_before_recording_began() {
        let mut c = Caching::new(
            Settings::parse("").expect("settings"),
            CachingOptions::new(0),
            Box::new(SimDevice::new(1 << 30, 0)),
        );
        let first = segment(&mut c, 1 << 32, ["model/weights", "model/bias"]);
        let second = segment(&mut c, (1 << 32) + 64 * MIB, ["model/embedding", "optimizer/state"]);
        assert!(c.restore_segment(&first) && c.restore_segment(&second));
        c.check().expect("consistent");
        let peak = c.snapshot(Source::default()).peak.expect("a peak");
        assert_eq!((peak.bytes_in_use, peak.allocations), (20 * MIB, 4));
        assert_eq!(peak.op, BEFORE_RECORDING, "not the block restored last");
        assert_eq!((peak.step, peak.seq, peak.t_ns), (-1, None, 0));
        let ranked: Vec<(&str, u64)> = peak.usage_by_node.iter().map(|n| (n.op.as_str(), n.bytes)).collect();
        assert_eq!(
            ranked,
            vec![
                ("model/bias", 6 * MIB),
                ("optimizer/state", 6 * MIB),
                ("model/weights", 4 * MIB),
                ("model/embedding", 4 * MIB)
            ]
        );
        // Events after the start: a free, then allocations that do not reach the peak
        // leave it; one that passes it takes it.
        c.free(1 << 32, 0).expect("free");
        c.mark_step(7, 10);
        let op = c.names_mut().ops.intern("model/forward");
        c.allocate(2 * MIB, 0, Meta { op, step: 7, t_ns: 20, ..Meta::default() }).expect("fits");
        assert_eq!(c.snapshot(Source::default()).peak.expect("a peak").op, BEFORE_RECORDING);
        c.allocate(8 * MIB, 0, Meta { op, step: 7, t_ns: 30, ..Meta::default() }).expect("fits");
        let peak = c.snapshot(Source::default()).peak.expect("a peak");
        assert_eq!((peak.bytes_in_use, peak.op.as_str(), peak.step, peak.t_ns), (26 * MIB, "model/forward", 7, 30));
        assert_eq!(peak.seq, Some(c.history().total() - 1), "the last event reached it");
        c.check().expect("consistent");
    }
}
