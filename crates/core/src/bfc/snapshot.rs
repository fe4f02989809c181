//! Turning allocator state into a [`Dump`]. Runs under the allocator's lock at OOM time,
//! so it only reads state and allocates host memory: no device calls besides `mem_info`,
//! no I/O, no symbolization (see [`crate::stack`]).

use super::{AllocFailure, Bfc, NONE, bins_of};
use crate::record::{Kind, Meta, Names};
use oomscope_format::{
    AllocatorInfo, ChunkInfo, DeviceInfo, Dump, NodeUsage, OomRecord, OutsideInfo, RegionInfo, Source, StackInfo,
};
use std::collections::HashMap;

impl Bfc {
    /// The whole state as a dump. `source` says where it came from.
    pub fn snapshot(&self, source: Source) -> Dump {
        let names = &self.rec.names;
        let stats = self.stats();
        let mut stack_index: HashMap<u32, u32> = HashMap::new();
        let mut stacks = Vec::new();
        // (op id, size, requested) of each live chunk.
        let mut live = Vec::with_capacity(self.in_use.len());
        let mut regions = Vec::with_capacity(self.regions.len());
        for r in &self.regions {
            let mut chunks = Vec::new();
            let mut h = r.first;
            while h != NONE {
                let c = &self.chunks[h as usize];
                let mut info = ChunkInfo {
                    address: c.addr,
                    size: c.size,
                    requested: c.requested,
                    in_use: c.in_use(),
                    next: (c.next != NONE).then_some(c.next as u64),
                    ..ChunkInfo::default()
                };
                if c.in_use() {
                    live.push((c.meta.op, c.size, c.requested));
                    describe(&mut info, &c.meta, names, &mut stacks, &mut stack_index);
                }
                chunks.push(info);
                h = c.next;
            }
            regions.push(RegionInfo { address: r.addr, size: r.size, chunks, ..RegionInfo::default() });
        }
        // Largest first; ties in the order the ops were first seen (interning order).
        let usage_by_node = NodeUsage::rank(live, |op| names.op(op).to_string());
        let bins =
            bins_of(regions.iter().flat_map(|r: &RegionInfo| &r.chunks).map(|c| (c.size, c.requested, c.in_use)));
        let ooms: Vec<OomRecord> = self.rec.failures.iter().map(|f| oom_record(f, names)).collect();
        let recorded = self.rec.recorded(stats.num_ooms == 0);
        Dump {
            tool: format!("oomscope {}", env!("CARGO_PKG_VERSION")),
            source,
            device: self.device_info(),
            allocator: self.allocator_info(),
            stats,
            oom: ooms.first().cloned(),
            ooms_total: stats.num_ooms,
            ooms,
            usage_by_node,
            peak: recorded.peak,
            bins,
            regions,
            stacks,
            events: recorded.events,
            events_total: recorded.events_total,
            steps: recorded.steps,
            refusals: self.refusals.clone(),
            outside: {
                let mut v: Vec<OutsideInfo> = self
                    .outside
                    .iter()
                    .map(|(&address, (size, m))| OutsideInfo {
                        address,
                        size: *size,
                        op: names.op(m.op).to_string(),
                        step: m.step,
                    })
                    .collect();
                v.sort_by_key(|o| o.address);
                v
            },
            ..Dump::default()
        }
    }
}

/// Fills a live chunk's recorded fields from its `Meta`, its stack added to `stacks` once.
pub fn describe(
    info: &mut ChunkInfo,
    m: &Meta,
    names: &Names,
    stacks: &mut Vec<StackInfo>,
    stack_index: &mut HashMap<u32, u32>,
) {
    info.op = Some(names.op(m.op).to_string());
    info.shape = names.shapes.get(m.shape).cloned();
    info.dtype = names.dtypes.get(m.dtype).cloned();
    info.kind = (m.kind != Kind::Unknown).then_some(m.kind);
    info.step = Some(m.step);
    info.t_ns = Some(m.t_ns);
    if let Some(ips) = names.stacks.get(m.stack) {
        let next = stacks.len() as u32;
        let idx = *stack_index.entry(m.stack).or_insert_with(|| {
            stacks.push(StackInfo { ips: ips.clone(), frames: Vec::new() });
            next
        });
        info.stack = Some(idx);
    }
}

impl Bfc {
    /// The device as a dump describes it (free memory as of now).
    pub fn device_info(&self) -> DeviceInfo {
        crate::device::info(self.device.as_ref(), &self.opts.device_name)
    }

    /// The allocator's settings as a dump describes them.
    pub fn allocator_info(&self) -> AllocatorInfo {
        AllocatorInfo {
            name: self.opts.name.clone(),
            limit: self.opts.limit,
            allow_growth: self.opts.allow_growth,
            garbage_collection: self.opts.garbage_collection,
            fragmentation_fraction: self.opts.fragmentation_fraction,
            max_internal_fragmentation: self.max_internal_fragmentation,
            curr_region_allocation_bytes: self.curr_region_allocation_bytes,
            expandable_segments: false,
            settings: None,
            caching: None,
            torch_version: None,
        }
    }
}

/// A failure with its ids resolved to names.
pub fn oom_record(f: &AllocFailure, names: &Names) -> OomRecord {
    OomRecord {
        seq: f.seq,
        requested: f.requested,
        rounded: f.rounded,
        op: names.ops.get(f.meta.op).cloned(),
        shape: names.shapes.get(f.meta.shape).cloned(),
        dtype: names.dtypes.get(f.meta.dtype).cloned(),
        kind: (f.meta.kind != Kind::Unknown).then_some(f.meta.kind),
        step: f.meta.step,
        t_ns: f.meta.t_ns,
        outside: f.outside,
        size_assumed: false,
        bytes_in_use: f.bytes_in_use,
        pool_bytes: f.pool_bytes,
        largest_free_block: f.largest_free_block,
        limit_headroom: f.limit_headroom,
        device_free: f.device.free,
        device_total: f.device.total,
        device_refusals: f.device_refusals.clone(),
        segment_request: None,
        processes: Vec::new(),
    }
}
