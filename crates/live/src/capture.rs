//! Allocator state → state frames. Split in two so the allocator's lock is held only to
//! copy: [`Capture::begin`] and [`Capture::more`] run under the lock and copy plain numbers
//! (the figures, recent events, names interned since the last frame, then the chunks a
//! slice of [`SLOTS_PER_HOLD`] slots at a time); [`Capture::build`] runs outside it and
//! does the rest (regions from the chunks, bins, usage by node, merging, sampling,
//! symbols).
//!
//! Copying the chunks in slices bounds how long the allocator waits for the sampler,
//! whatever the chunk count: a million chunks take some 250 holds of a fraction of a
//! millisecond, with the allocator running between them. When it changed in between, the
//! copy is of several moments: overlapping chunks are dropped, gaps shown free, and the
//! frame says it is approximate.

use oomscope_base::hash::FastMap;
use oomscope_core::View;
use oomscope_core::bfc::bins_of;
use oomscope_core::record::{Event, EventKind, UNNAMED_OP};
use oomscope_core::stack;
use oomscope_format::NodeUsage;
use oomscope_format::Stats;
use oomscope_format::live::{MapRegion, NODES_SENT, SPANS_SENT, Span, State, Step};

/// Samples kept per frame.
pub const SAMPLES_SENT: usize = 512;
/// Events looked at per frame (the history may hold more).
const EVENTS_TAKEN: usize = 200_000;
/// Chunk slots copied per hold of the allocator's lock.
pub const SLOTS_PER_HOLD: usize = 4096;

/// What is copied under the lock.
#[derive(Debug, Default)]
pub struct Raw {
    t_ns: u64,
    step: i64,
    stats: Stats,
    live: u64,
    /// Chunks as copied, in slot order: (address, first of its region, chunk).
    pieces: Vec<(u64, bool, RawChunk)>,
    /// Slots copied so far.
    slots_done: usize,
    /// The allocator's event count when the copy began: another at a later slice means the
    /// copy spans several moments.
    events_at: u64,
    torn: bool,
    events: Vec<Event>,
    new_ops: Vec<String>,
    new_shapes: Vec<Vec<i64>>,
    new_stacks: Vec<Vec<u64>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct RawChunk {
    size: u64,
    requested: u64,
    in_use: bool,
    op: u32,
    shape: u32,
    stack: u32,
    step: i64,
}

impl Raw {
    /// Room for the chunks of `slots` more slots, so that [`Capture::more`] does not grow
    /// the copy while it holds the lock.
    pub fn reserve(&mut self, slots: usize) {
        self.pieces.reserve(slots);
    }
}

/// A frame builder for one allocator: it remembers what earlier frames covered.
#[derive(Debug, Default)]
pub struct Capture {
    frames: u64,
    /// The next event number not yet sampled.
    next_event: u64,
    /// Names by id (index 0: none), copied as the allocator interns them.
    ops: Vec<String>,
    shapes: Vec<Vec<i64>>,
    stacks: Vec<Vec<u64>>,
    /// Symbolized stacks by id, filled when a frame first needs one.
    stack_text: FastMap<u32, Vec<String>>,
}

impl Capture {
    pub fn new() -> Capture {
        Capture { ops: vec![String::new()], shapes: vec![Vec::new()], stacks: vec![Vec::new()], ..Capture::default() }
    }

    /// Copies what a frame needs but the chunks: call under the allocator's lock, then
    /// [`Capture::more`] until it says done. `t_ns` is now on the allocator's clock.
    pub fn begin(&mut self, alloc: &(impl View + ?Sized), t_ns: u64) -> Raw {
        let names = alloc.names();
        let history = alloc.history();
        let mut raw = Raw {
            t_ns,
            step: alloc.current_step(),
            stats: alloc.stats(),
            live: alloc.live_allocations() as u64,
            events_at: history.total(),
            ..Raw::default()
        };
        let from = self.next_event.max(history.total().saturating_sub(EVENTS_TAKEN as u64));
        raw.events.extend(history.since(from).copied());
        self.next_event = history.total();
        let known = self.ops.len() as u32;
        raw.new_ops = (known..=names.ops.len() as u32).filter_map(|id| names.ops.get(id).cloned()).collect();
        let known = self.shapes.len() as u32;
        raw.new_shapes = (known..=names.shapes.len() as u32).filter_map(|id| names.shapes.get(id).cloned()).collect();
        let known = self.stacks.len() as u32;
        raw.new_stacks = (known..=names.stacks.len() as u32).filter_map(|id| names.stacks.get(id).cloned()).collect();
        raw
    }

    /// Copies the chunks of the next `count` slots; true when every slot is copied. Call
    /// under the allocator's lock, after [`Raw::reserve`] for `count` outside it: growing
    /// the copy under the lock would move megabytes while the allocator waits.
    pub fn more(&mut self, alloc: &(impl View + ?Sized), raw: &mut Raw, count: usize) -> bool {
        if alloc.history().total() != raw.events_at {
            raw.torn = true;
        }
        let from = raw.slots_done;
        alloc.visit_slots(from, count, &mut |c| {
            let chunk = if c.in_use {
                RawChunk {
                    size: c.size,
                    requested: c.requested,
                    in_use: true,
                    op: c.meta.op,
                    shape: c.meta.shape,
                    stack: c.meta.stack,
                    step: c.meta.step,
                }
            } else {
                RawChunk { size: c.size, requested: c.requested, ..RawChunk::default() }
            };
            raw.pieces.push((c.addr, c.head, chunk));
        });
        raw.slots_done = from.saturating_add(count);
        raw.slots_done >= alloc.slots()
    }

    /// Everything at once, for a caller that holds the allocator (or its lock) throughout.
    pub fn take(&mut self, alloc: &(impl View + ?Sized), t_ns: u64) -> Raw {
        let mut raw = self.begin(alloc, t_ns);
        while !self.more(alloc, &mut raw, usize::MAX) {}
        raw
    }

    /// Builds the frame (and the step marks it saw) from what [`Capture::take`] copied.
    pub fn build(&mut self, mut raw: Raw) -> (State, Vec<Step>) {
        let (raw_regions, raw_chunks) = tile(std::mem::take(&mut raw.pieces));
        self.ops.append(&mut raw.new_ops);
        self.shapes.append(&mut raw.new_shapes);
        self.stacks.append(&mut raw.new_stacks);
        let (samples, steps) = samples(&raw);

        let bins = bins_of(raw_chunks.iter().map(|c| (c.size, c.requested, c.in_use)));
        // Largest first; ties in the order the ops were first seen, as the dump's list.
        let live = raw_chunks.iter().filter(|c| c.in_use).map(|c| (c.op, c.size, c.requested));
        let mut nodes = NodeUsage::rank(live, |op| self.op_name(op).to_string());
        let nodes_rest = (nodes.len() > NODES_SENT).then(|| {
            let rest = nodes.split_off(NODES_SENT);
            [rest.len() as u64, rest.iter().map(|n| n.bytes).sum()]
        });

        let merge = raw_chunks.len() > SPANS_SENT;
        let mut tables = Tables::default();
        let mut regions = Vec::with_capacity(raw_regions.len());
        let runs_cap = SPANS_SENT.max(raw_regions.len());
        for (i, &(address, size, first)) in raw_regions.iter().enumerate() {
            let end = raw_regions.get(i + 1).map_or(raw_chunks.len(), |r| r.2);
            let chunks = &raw_chunks[first..end];
            let spans = if merge {
                // A region's share of the frame, at least one span.
                let share = ((chunks.len() * runs_cap) / raw_chunks.len()).max(1);
                merged_spans(chunks, share, &mut tables)
            } else {
                chunks.iter().map(|c| tables.span(c, 1, c.size, c.requested, c.in_use.then_some(c.size))).collect()
            };
            regions.push(MapRegion { address, size, spans });
        }
        let ops = tables.ops.iter().map(|&id| self.op_name(id).to_string()).collect();
        let shapes =
            tables.shapes.iter().map(|&id| self.shapes.get(id as usize).cloned().unwrap_or_default()).collect();
        let stacks = tables.stacks.iter().map(|&id| self.stack_text(id)).collect();
        let state = State {
            seq: self.frames,
            t_ns: raw.t_ns,
            step: raw.step,
            stats: raw.stats,
            live: raw.live,
            samples,
            nodes,
            nodes_rest,
            bins,
            regions,
            merged: merge,
            approximate: raw.torn,
            ops,
            shapes,
            stacks,
        };
        self.frames += 1;
        (state, steps)
    }

    /// Both halves at once, for a single-threaded caller that owns the allocator.
    pub fn state(&mut self, alloc: &(impl View + ?Sized), t_ns: u64) -> (State, Vec<Step>) {
        let raw = self.take(alloc, t_ns);
        self.build(raw)
    }

    fn op_name(&self, id: u32) -> &str {
        match self.ops.get(id as usize) {
            Some(name) if id != 0 => name,
            _ => UNNAMED_OP,
        }
    }

    fn stack_text(&mut self, id: u32) -> Vec<String> {
        if id == 0 {
            return Vec::new();
        }
        let ips = self.stacks.get(id as usize).cloned().unwrap_or_default();
        self.stack_text
            .entry(id)
            .or_insert_with(|| ips.iter().flat_map(|&ip| stack::resolve(ip)).map(|f| f.text()).collect())
            .clone()
    }
}

/// Regions (address, size, index of the first chunk) and chunks in address order, from
/// chunks copied in slot order. A copy that spans several moments may overlap or leave
/// gaps: an overlapping chunk is dropped, a gap inside a region is shown as free.
fn tile(mut pieces: Vec<(u64, bool, RawChunk)>) -> (Vec<(u64, u64, usize)>, Vec<RawChunk>) {
    pieces.sort_unstable_by_key(|p| (p.0, !p.1));
    let mut regions: Vec<(u64, u64, usize)> = Vec::new();
    let mut chunks = Vec::with_capacity(pieces.len());
    // The end of the open region.
    let mut end: Option<u64> = None;
    for (addr, head, c) in pieces {
        match end {
            // Overlaps what is placed already.
            Some(e) if addr < e => continue,
            // Before any region: a chunk whose region head moved while it was copied.
            None if !head => continue,
            _ => {}
        }
        if head {
            regions.push((addr, 0, chunks.len()));
        } else if let Some(e) = end
            && addr > e
        {
            chunks.push(RawChunk { size: addr - e, ..RawChunk::default() });
        }
        let region = regions.last_mut().expect("a region is open: a head came first");
        region.1 = addr + c.size - region.0;
        end = Some(addr + c.size);
        chunks.push(c);
    }
    (regions, chunks)
}

/// The frame's own name tables: global ids in the order first used (index 0: none).
#[derive(Default)]
struct Tables {
    ops: Vec<u32>,
    shapes: Vec<u32>,
    stacks: Vec<u32>,
    index: FastMap<(u8, u32), u32>,
}

impl Tables {
    fn local(&mut self, table: u8, id: u32) -> u32 {
        if id == 0 {
            return 0;
        }
        let list = match table {
            0 => &mut self.ops,
            1 => &mut self.shapes,
            _ => &mut self.stacks,
        };
        *self.index.entry((table, id)).or_insert_with(|| {
            if list.is_empty() {
                list.push(0);
            }
            list.push(id);
            (list.len() - 1) as u32
        })
    }

    /// A span for `c` (the representative chunk of a run of `chunks`).
    fn span(&mut self, c: &RawChunk, chunks: u32, size: u64, requested: u64, in_use: Option<u64>) -> Span {
        let used = in_use.unwrap_or(0);
        if used == 0 {
            return Span(size, 0, 0, chunks, 0, 0, 0, 0);
        }
        let (shape, stack) = if chunks == 1 { (self.local(1, c.shape), self.local(2, c.stack)) } else { (0, 0) };
        Span(size, requested, used, chunks, self.local(0, c.op), shape, stack, c.step)
    }
}

/// A region's chunks as at most about `cap` spans: first runs of neighbours with the same
/// state and op, then, if still too many, groups of neighbouring runs. A merged span is
/// named by its largest in-use chunk.
fn merged_spans(chunks: &[RawChunk], cap: usize, tables: &mut Tables) -> Vec<Span> {
    // (first chunk, chunks, size, requested, in use, largest in-use chunk)
    let mut runs: Vec<(usize, u32, u64, u64, u64, usize)> = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let same = runs.last().is_some_and(|r| {
            let head = &chunks[r.0];
            head.in_use == c.in_use && (!c.in_use || head.op == c.op)
        });
        if !same {
            runs.push((i, 0, 0, 0, 0, i));
        }
        let r = runs.last_mut().expect("pushed above");
        r.1 += 1;
        r.2 += c.size;
        if c.in_use {
            r.3 += c.requested;
            r.4 += c.size;
            if c.size > chunks[r.5].size || !chunks[r.5].in_use {
                r.5 = i;
            }
        }
    }
    let group = runs.len().div_ceil(cap.max(1)).max(1);
    runs.chunks(group)
        .map(|g| {
            let mut acc = (0u32, 0u64, 0u64, 0u64, g[0].5);
            for r in g {
                acc.0 += r.1;
                acc.1 += r.2;
                acc.2 += r.3;
                acc.3 += r.4;
                if chunks[r.5].in_use && (!chunks[acc.4].in_use || chunks[r.5].size > chunks[acc.4].size) {
                    acc.4 = r.5;
                }
            }
            let (n, size, requested, used, rep) = acc;
            if n == 1 {
                let c = &chunks[rep];
                return tables.span(c, 1, c.size, c.requested, c.in_use.then_some(c.size));
            }
            tables.span(&chunks[rep], n, size, requested, (used > 0).then_some(used))
        })
        .collect()
}

/// In-use and pool bytes after each recent event (walking back from the current figures),
/// thinned to [`SAMPLES_SENT`], and the step marks among the events.
fn samples(raw: &Raw) -> (Vec<[u64; 3]>, Vec<Step>) {
    let (mut in_use, mut pool) = (raw.stats.bytes_in_use, raw.stats.pool_bytes);
    let timed = raw.events.iter().any(|e| e.t_ns != 0);
    let mut all = Vec::with_capacity(raw.events.len() + 1);
    let mut steps = Vec::new();
    for e in raw.events.iter().rev() {
        if timed {
            all.push([e.t_ns, in_use, pool]);
        }
        match e.kind {
            EventKind::Alloc => in_use = in_use.saturating_sub(e.size),
            EventKind::Free => in_use += e.size,
            EventKind::Extend => pool = pool.saturating_sub(e.size),
            EventKind::RegionFree => pool += e.size,
            EventKind::Step => steps.push(Step { step: e.step, t_ns: e.t_ns, bytes_in_use: in_use, pool_bytes: pool }),
            EventKind::Oom | EventKind::Refused | EventKind::OutsideAlloc | EventKind::OutsideFree => {}
        }
    }
    all.reverse();
    steps.reverse();
    let now = [raw.t_ns.max(all.last().map_or(0, |s| s[0])), raw.stats.bytes_in_use, raw.stats.pool_bytes];
    if all.len() > SAMPLES_SENT {
        // Keep each stretch's highest point, so a short peak survives the thinning.
        let per = all.len().div_ceil(SAMPLES_SENT - 1);
        all = all.chunks(per).map(|c| *c.iter().max_by_key(|s| (s[1], s[0])).unwrap_or(&c[0])).collect();
    }
    all.push(now);
    (all, steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_core::bfc::{Bfc, Options};
    use oomscope_core::device::SimDevice;
    use oomscope_core::record::Meta;

    fn bfc() -> Bfc {
        let mut o = Options::new(1 << 30);
        o.allow_growth = true;
        Bfc::new(o, Box::new(SimDevice::new(1 << 30, 0)))
    }

    #[test]
    fn a_frame_holds_the_state_and_the_samples_since_the_last() {
        let mut b = bfc();
        let conv = b.names_mut().ops.intern("model/conv/Conv2D");
        let relu = b.names_mut().ops.intern("model/Relu");
        let shape = b.names_mut().shapes.intern(&[8i64, 64][..]);
        b.mark_step(0, 5);
        let x = b.allocate(1 << 20, Meta { op: conv, shape, t_ns: 10, ..Meta::default() }).unwrap();
        let y = b.allocate(3 << 20, Meta { op: relu, t_ns: 20, ..Meta::default() }).unwrap();
        // 3 MiB lands in the 4 MiB second region, unsplit (TF's rule): the chunk counts.
        let y_size = b.allocated_size(y).unwrap();
        assert_eq!(y_size, 4 << 20);
        let mut cap = Capture::new();
        let (s, steps) = cap.state(&b, 30);
        assert_eq!(s.seq, 0);
        assert_eq!(steps, [Step { step: 0, t_ns: 5, bytes_in_use: 0, pool_bytes: 0 }]);
        assert_eq!(s.nodes[0], NodeUsage { op: "model/Relu".into(), bytes: y_size, requested: 3 << 20, count: 1 });
        assert_eq!(s.nodes[1].op, "model/conv/Conv2D");
        assert_eq!(s.live, 2);
        let spans: Vec<&Span> = s.regions.iter().flat_map(|r| &r.spans).collect();
        let total: u64 = spans.iter().map(|s| s.size()).sum();
        assert_eq!(total, s.stats.pool_bytes, "spans tile the pool");
        let conv_span = spans.iter().find(|sp| sp.in_use() == 1 << 20).unwrap();
        assert_eq!(s.ops[conv_span.op() as usize], "model/conv/Conv2D");
        assert_eq!(s.shapes[conv_span.shape() as usize], [8, 64]);
        // After the second alloc in-use is 5 MiB; the samples rise to it.
        assert_eq!(s.samples.last().unwrap()[1], (1 << 20) + y_size);
        assert!(s.samples.iter().any(|x| x == &[10, 1 << 20, x[2]]), "{:?}", s.samples);
        assert_eq!(s.bins.iter().map(|b| b.chunks_in_use).sum::<u64>(), 2);

        b.free(x, 40).unwrap();
        let (s2, steps2) = cap.state(&b, 50);
        assert_eq!(s2.seq, 1);
        assert!(steps2.is_empty());
        assert_eq!(s2.samples.len(), 2, "one event since the last frame, and now: {:?}", s2.samples);
        assert_eq!(s2.samples[0], [40, y_size, s2.stats.pool_bytes]);
    }

    #[test]
    fn many_chunks_are_merged_into_runs_that_keep_the_bytes() {
        let mut b = bfc();
        let names: Vec<u32> = (0..7).map(|i| b.names_mut().ops.intern(&format!("op{i}"))).collect();
        let mut addrs = Vec::new();
        for i in 0..(SPANS_SENT * 2 + 100) {
            addrs.push(b.allocate(256 * (1 + (i % 3) as u64), Meta { op: names[i % 7], ..Meta::default() }).unwrap());
        }
        for a in addrs.iter().step_by(5) {
            b.free(*a, 0).unwrap();
        }
        let mut cap = Capture::new();
        let (s, _) = cap.state(&b, 1);
        assert!(s.merged);
        let spans: Vec<&Span> = s.regions.iter().flat_map(|r| &r.spans).collect();
        assert!(spans.len() <= SPANS_SENT + s.regions.len(), "{} spans", spans.len());
        let st = b.stats();
        assert_eq!(spans.iter().map(|s| s.size()).sum::<u64>(), st.pool_bytes);
        assert_eq!(spans.iter().map(|s| s.in_use()).sum::<u64>(), st.bytes_in_use);
        assert_eq!(
            spans.iter().map(|s| s.chunks() as u64).sum::<u64>(),
            s.bins.iter().map(|b| b.total_chunks).sum::<u64>()
        );
    }

    /// Regions (address, size) and their chunks (size, in use).
    type Layout = Vec<(u64, u64, Vec<(u64, bool)>)>;

    /// The layout as an address-order walk sees it: the reference for copies made in slices.
    fn walked(alloc: &impl View) -> Layout {
        let mut out: Layout = Vec::new();
        alloc.visit(&mut |v| match v {
            oomscope_core::Visit::Region { addr, size } => out.push((addr, size, Vec::new())),
            oomscope_core::Visit::Chunk { size, in_use, .. } => out.last_mut().unwrap().2.push((size, in_use)),
        });
        out
    }

    fn tiled(raw: Raw) -> Layout {
        let (regions, chunks) = tile(raw.pieces);
        regions
            .iter()
            .enumerate()
            .map(|(i, &(addr, size, first))| {
                let end = regions.get(i + 1).map_or(chunks.len(), |r| r.2);
                (addr, size, chunks[first..end].iter().map(|c| (c.size, c.in_use)).collect())
            })
            .collect()
    }

    #[test]
    fn a_large_state_is_copied_in_bounded_slices_that_add_up_to_the_whole() {
        // Several regions (growth), holes from frees, merged neighbours.
        let mut b = bfc();
        let mut addrs = Vec::new();
        for i in 0..60_000u64 {
            addrs.push(b.allocate(256 * (1 + i % 5), Meta::default()).unwrap());
        }
        for a in addrs.iter().step_by(3).chain(addrs.iter().skip(1).step_by(7)) {
            let _ = b.free(*a, 0);
        }
        assert!(b.regions().len() > 1);
        let mut cap = Capture::new();
        let mut raw = cap.begin(&b, 1);
        let mut holds = 0;
        let mut most = 0;
        loop {
            holds += 1;
            let before = raw.pieces.len();
            let done = cap.more(&b, &mut raw, 1000);
            most = most.max(raw.pieces.len() - before);
            if done {
                break;
            }
        }
        assert!(holds >= 40, "{holds} holds for {} slots", b.slots());
        assert!(most <= 1000, "a hold copied {most} chunks");
        assert!(!raw.torn);
        assert_eq!(tiled(raw), walked(&b), "the slices add up to the address-order walk");
    }

    #[test]
    fn a_copy_spanning_changes_still_tiles_each_region_and_says_it_is_approximate() {
        let mut b = bfc();
        let mut addrs: Vec<u64> =
            (0..20_000u64).map(|i| b.allocate(256 * (1 + i % 4), Meta::default()).unwrap()).collect();
        let mut cap = Capture::new();
        let mut raw = cap.begin(&b, 1);
        let mut i = 0;
        while !cap.more(&b, &mut raw, 500) {
            // Frees and new allocations between slices: merges, splits, reused slots.
            for _ in 0..50 {
                i = (i * 7919 + 13) % addrs.len();
                if b.free(addrs[i], 0).is_ok() {
                    addrs[i] = b.allocate(256 * (1 + (i as u64) % 9), Meta::default()).unwrap();
                }
            }
        }
        assert!(raw.torn);
        let (state, _) = cap.build(raw);
        assert!(state.approximate);
        for r in &state.regions {
            assert_eq!(r.spans.iter().map(|s| s.size()).sum::<u64>(), r.size, "spans tile region {:#x}", r.address);
        }
        let mut at = 0;
        for r in &state.regions {
            assert!(r.address >= at, "regions do not overlap");
            at = r.address + r.size;
        }
    }

    #[test]
    fn a_frame_of_the_caching_allocator_shows_its_segments_and_pending_frees() {
        use oomscope_core::caching::{Caching, CachingOptions, Settings};
        let mut c = Caching::new(Settings::default(), CachingOptions::new(0), Box::new(SimDevice::new(1 << 30, 0)));
        let op = c.names_mut().ops.intern("Net.fc1/aten::addmm");
        let a = c.allocate(1, 0, Meta { op, ..Meta::default() }).unwrap();
        let b = c.allocate(4 << 20, 0, Meta { op, ..Meta::default() }).unwrap();
        c.record_stream(b, 7);
        c.free(b, 1).unwrap();
        let (s, _) = Capture::new().state(&c, 2);
        let regions: Vec<(u64, u64)> = s.regions.iter().map(|r| (r.address, r.size)).collect();
        assert_eq!(regions.len(), 2, "a 2 MiB small-pool and a 20 MiB large-pool segment: {regions:?}");
        assert_eq!(s.stats.pool_bytes, 22 << 20);
        assert_eq!(s.stats.bytes_in_use, 512, "PyTorch's allocated: the pending free no longer counts");
        let held: u64 = s.regions.iter().flat_map(|r| &r.spans).map(|sp| sp.in_use()).sum();
        assert_eq!(held, 512 + (4 << 20), "but its block is not free to reuse: the map shows it held");
        assert_eq!(s.nodes[0].op, "Net.fc1/aten::addmm");
        assert!(c.free(a, 3).is_ok());
        // Slot order, tiled, is the segments' own order; expandable segments too.
        for expandable in [false, true] {
            let settings = Settings { expandable_segments: expandable, ..Settings::default() };
            let mut c = Caching::new(settings, CachingOptions::new(0), Box::new(SimDevice::new(1 << 30, 0)));
            let addrs: Vec<u64> =
                (0..300u64).map(|i| c.allocate((i % 13 + 1) << 18, 0, Meta::default()).unwrap()).collect();
            for a in addrs.iter().step_by(4) {
                c.free(*a, 1).unwrap();
            }
            assert_eq!(tiled(Capture::new().take(&c, 2)), walked(&c), "expandable: {expandable}");
        }
    }
}
