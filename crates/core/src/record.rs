//! What oomscope remembers about each allocation, and the recent history.
//!
//! Names, shapes, dtypes and call stacks are interned once and referred to by small ids,
//! so recording an allocation costs a few stores on the hot path; strings are looked up
//! again only when a report is written.

use oomscope_base::hash::FastMap;
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;

pub use oomscope_format::{EventKind, Kind, StepMark};

pub use oomscope_format::UNNAMED_OP;

/// What both allocators record beside their own state, in one place: the names of ops,
/// shapes and stacks, the history of events, what was live at the peak, the step marks and
/// the failures. Each allocator keeps one and reads it into its dumps ([`Recorder::recorded`]).
#[derive(Debug)]
pub struct Recorder {
    pub names: Names,
    pub history: History,
    /// What was live when the bytes in use peaked.
    pub peak: PeakTracker,
    pub steps: VecDeque<StepMark>,
    /// The step allocations are marked with (-1 before the first mark).
    pub current_step: i64,
    pub failures: Vec<crate::bfc::AllocFailure>,
}

/// What a dump takes from a [`Recorder`], whichever allocator kept it.
#[derive(Debug)]
pub struct Recorded {
    pub events: Vec<oomscope_format::EventInfo>,
    pub events_total: u64,
    pub steps: Vec<StepMark>,
    pub peak: Option<oomscope_format::PeakInfo>,
}

impl Recorder {
    /// Keeping the last `history` events.
    pub fn new(history: usize) -> Recorder {
        Recorder::with_history(History::new(history))
    }

    pub fn with_history(history: History) -> Recorder {
        Recorder {
            names: Names::default(),
            history,
            peak: PeakTracker::default(),
            steps: VecDeque::new(),
            current_step: -1,
            failures: Vec::new(),
        }
    }

    /// A step's start: later allocations are marked with it, the bytes at the boundary kept
    /// for the growth analysis (`mark`), and the mark in the history.
    pub fn mark_step(&mut self, mark: StepMark) {
        self.current_step = mark.step;
        keep_step_mark(&mut self.steps, mark);
        self.history.push(Event {
            seq: 0,
            t_ns: mark.t_ns,
            kind: EventKind::Step,
            addr: 0,
            size: 0,
            requested: 0,
            op: 0,
            step: mark.step,
        });
    }

    /// The history, the step marks, and (when nothing failed) what was live at the peak, with
    /// their names, for a dump.
    pub fn recorded(&self, with_peak: bool) -> Recorded {
        Recorded {
            events: self.history.to_dump(&self.names),
            events_total: self.history.total(),
            steps: self.steps.iter().copied().collect(),
            peak: if with_peak { self.peak.to_dump(&self.names) } else { None },
        }
    }
}

/// The node of memory that was already allocated when recording began: blocks of a PyTorch
/// snapshot without frames, and the state a replay starts from, as the moment it peaked.
pub const BEFORE_RECORDING: &str = "(allocated before recording began)";

/// What an allocation is recorded with. Ids refer to the allocator's [`Names`];
/// 0 means "not given".
/// What a retag of a live allocation changes (interned ids; `None` keeps what it had).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retag {
    pub op: Option<u32>,
    pub kind: Option<Kind>,
    pub shape: Option<u32>,
    pub dtype: Option<u32>,
}

impl Retag {
    /// Applies it to `meta`; returns the op it had.
    pub fn apply(&self, meta: &mut Meta) -> u32 {
        let from = meta.op;
        if let Some(op) = self.op {
            meta.op = op;
        }
        if let Some(kind) = self.kind {
            meta.kind = kind;
        }
        if let Some(shape) = self.shape {
            meta.shape = shape;
        }
        if let Some(dtype) = self.dtype {
            meta.dtype = dtype;
        }
        from
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub op: u32,
    pub shape: u32,
    pub dtype: u32,
    pub stack: u32,
    /// What the tensor is for, when the caller knows.
    pub kind: Kind,
    /// Training step (`-1` before the first step mark).
    pub step: i64,
    /// Nanoseconds since the allocator's origin (replay: the trace's clock).
    pub t_ns: u64,
}

/// Interns values of one kind; ids start at 1 so that 0 can mean "none".
#[derive(Clone, Debug)]
pub struct Interner<K> {
    items: Vec<K>,
    index: FastMap<K, u32>,
    /// The id returned last: callers often intern the same value many times in a row
    /// (a dtype, a stack), and one comparison is cheaper than a hash lookup.
    last: u32,
}

impl<K> Default for Interner<K> {
    fn default() -> Self {
        Interner { items: Vec::new(), index: FastMap::default(), last: 0 }
    }
}

impl<K: Hash + Eq + Clone> Interner<K> {
    /// The id of `value`, adding it when new.
    pub fn intern<Q>(&mut self, value: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(last) = self.get(self.last)
            && last.borrow() == value
        {
            return self.last;
        }
        if let Some(&id) = self.index.get(value) {
            self.last = id;
            return id;
        }
        let owned = value.to_owned();
        self.items.push(owned.clone());
        // More than u32::MAX distinct names cannot happen before the host runs out of memory.
        let id = u32::try_from(self.items.len()).unwrap_or(u32::MAX);
        self.index.insert(owned, id);
        self.last = id;
        id
    }

    /// The value behind `id`, or `None` for 0 and unknown ids.
    pub fn get(&self, id: u32) -> Option<&K> {
        (id as usize).checked_sub(1).and_then(|i| self.items.get(i))
    }

    /// Number of distinct values.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The allocator's tables of interned strings and stacks.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub ops: Interner<String>,
    pub shapes: Interner<Vec<i64>>,
    pub dtypes: Interner<String>,
    /// Raw instruction pointers, innermost first.
    pub stacks: Interner<Vec<u64>>,
}

impl Names {
    /// The op name for an id, [`UNNAMED_OP`] when none was given.
    pub fn op(&self, id: u32) -> &str {
        self.ops.get(id).map_or(UNNAMED_OP, String::as_str)
    }
}

/// One entry of the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Position among all events since the allocator was created (kept ones and dropped).
    pub seq: u64,
    pub t_ns: u64,
    pub kind: EventKind,
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub op: u32,
    pub step: i64,
}

/// The last `capacity` events; older ones are dropped and counted.
#[derive(Clone, Debug, Default)]
pub struct History {
    events: VecDeque<Event>,
    capacity: usize,
    next_seq: u64,
}

/// Step marks kept for the growth analysis.
pub const STEP_MARKS_KEPT: usize = 4096;

/// Keeps `mark`, dropping the oldest when [`STEP_MARKS_KEPT`] are kept.
pub fn keep_step_mark(steps: &mut VecDeque<StepMark>, mark: StepMark) {
    if steps.len() == STEP_MARKS_KEPT {
        steps.pop_front();
    }
    steps.push_back(mark);
}

impl History {
    /// The kept events as a dump lists them, op ids resolved to names.
    pub fn to_dump(&self, names: &Names) -> Vec<oomscope_format::EventInfo> {
        self.iter()
            .map(|e| oomscope_format::EventInfo {
                seq: e.seq,
                t_ns: e.t_ns,
                kind: e.kind,
                address: e.addr,
                size: e.size,
                requested: e.requested,
                op: (e.op != 0).then(|| names.op(e.op).to_string()),
                step: e.step,
            })
            .collect()
    }

    pub fn new(capacity: usize) -> History {
        History { events: VecDeque::with_capacity(capacity.min(1 << 16)), capacity, next_seq: 0 }
    }

    /// Records an event (or only counts it when the capacity is 0).
    #[inline]
    pub fn push(&mut self, mut event: Event) {
        event.seq = self.next_seq;
        self.next_seq += 1;
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// Kept events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }

    /// Kept events numbered `seq` or later, oldest first (kept events have consecutive
    /// numbers, so this is a slice, found without a search).
    pub fn since(&self, seq: u64) -> impl Iterator<Item = &Event> {
        let first = self.next_seq - self.events.len() as u64;
        let skip = seq.saturating_sub(first).min(self.events.len() as u64) as usize;
        self.events.range(skip..)
    }

    /// Events seen in all.
    pub fn total(&self) -> u64 {
        self.next_seq
    }

    /// Events seen but no longer kept.
    pub fn dropped(&self) -> u64 {
        self.next_seq - self.events.len() as u64
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Live bytes of one op: (chunk bytes, requested bytes, allocations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OpLive {
    bytes: u64,
    requested: u64,
    count: u64,
}

impl OpLive {
    #[inline]
    fn add(&mut self, c: &Change) {
        if c.alloc {
            self.bytes += c.size;
            self.requested += c.requested;
            self.count += 1;
        } else {
            self.bytes -= c.size;
            self.requested -= c.requested;
            self.count -= 1;
        }
    }
}

/// An allocation or a free, as the peak tracker replays it.
#[derive(Clone, Copy, Debug)]
struct Change {
    op: u32,
    alloc: bool,
    size: u64,
    requested: u64,
}

/// The allocation that made the bytes in use reach their peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PeakMark {
    bytes: u64,
    allocations: u64,
    /// None: no event reached it (the state a replay started from, [`PeakTracker::restored`]).
    seq: Option<u64>,
    op: u32,
    step: i64,
    t_ns: u64,
}

/// What was live when the bytes in use peaked, by op, kept as the allocator runs.
///
/// Each allocation and free updates the live bytes of its op and is logged as a change
/// since the last peak; at a new peak the logged changes are applied to the copy kept at
/// the last one. When the log outgrows the table of ops, it is dropped and the next peak
/// copies the table instead, so the work stays constant per event, amortized, and the
/// memory bounded by the number of ops, however long the run.
#[derive(Clone, Debug, Default)]
pub struct PeakTracker {
    in_use: u64,
    allocations: u64,
    /// Live bytes by op id, now.
    now: Vec<OpLive>,
    /// Live bytes by op id at the peak.
    at_peak: Vec<OpLive>,
    /// Changes since the peak, while `stale` is false.
    since: Vec<Change>,
    /// The log was dropped: the next peak copies `now`.
    stale: bool,
    mark: PeakMark,
}

/// Changes logged beyond the size of the table of ops before the log is dropped.
const PEAK_LOG_SLACK: usize = 1024;

impl PeakTracker {
    /// An allocation of a chunk of `size` bytes (`requested` asked) by `meta`; `seq` is its
    /// position in the event sequence.
    #[inline]
    pub fn alloc(&mut self, size: u64, requested: u64, meta: &Meta, seq: u64) {
        self.in_use += size;
        self.allocations += 1;
        self.change(Change { op: meta.op, alloc: true, size, requested });
        if self.in_use > self.mark.bytes {
            self.catch_up();
            self.mark = PeakMark {
                bytes: self.in_use,
                allocations: self.allocations,
                seq: Some(seq),
                op: meta.op,
                step: meta.step,
                t_ns: meta.t_ns,
            };
        }
    }

    /// A chunk that was already allocated when recording began (a replay starting from a
    /// snapshot's state): counted live, but no allocation of it reached a peak; once the
    /// state is restored, [`PeakTracker::restored`] marks it as one.
    pub fn restore(&mut self, size: u64, requested: u64, op: u32) {
        self.in_use += size;
        self.allocations += 1;
        self.change(Change { op, alloc: true, size, requested });
    }

    /// Marks the restored state as the peak, when it is above the last one: reached by no
    /// event (no `seq`), before the first step (`-1`), at time 0, by `op` (the id of
    /// [`BEFORE_RECORDING`]).
    pub fn restored(&mut self, op: u32) {
        if self.in_use > self.mark.bytes {
            self.catch_up();
            self.mark =
                PeakMark { bytes: self.in_use, allocations: self.allocations, seq: None, op, step: -1, t_ns: 0 };
        }
    }

    /// A free of a chunk of `size` bytes (`requested` asked) allocated for `op`.
    #[inline]
    pub fn free(&mut self, size: u64, requested: u64, op: u32) {
        self.in_use -= size;
        self.allocations -= 1;
        self.change(Change { op, alloc: false, size, requested });
    }

    /// A live chunk's op renamed (`from` to `to`): the bytes move between ops, none are
    /// allocated or freed.
    pub fn rename(&mut self, size: u64, requested: u64, from: u32, to: u32) {
        if from != to {
            self.change(Change { op: from, alloc: false, size, requested });
            self.change(Change { op: to, alloc: true, size, requested });
        }
    }

    #[inline]
    fn change(&mut self, c: Change) {
        let i = c.op as usize;
        if i >= self.now.len() {
            self.now.resize(i + 1, OpLive::default());
        }
        self.now[i].add(&c);
        if !self.stale {
            self.since.push(c);
            if self.since.len() > self.now.len() + PEAK_LOG_SLACK {
                self.stale = true;
                self.since.clear();
            }
        }
    }

    /// Brings `at_peak` to now.
    fn catch_up(&mut self) {
        if self.stale {
            self.at_peak.clone_from(&self.now);
            self.stale = false;
        } else {
            if self.at_peak.len() < self.now.len() {
                self.at_peak.resize(self.now.len(), OpLive::default());
            }
            for c in &self.since {
                self.at_peak[c.op as usize].add(c);
            }
        }
        self.since.clear();
    }

    /// Bytes in use at the peak (0 before any allocation).
    pub fn bytes(&self) -> u64 {
        self.mark.bytes
    }

    /// Bytes in use now.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// The allocator's invariant check: the tracker counts what the allocator's own
    /// statistics count (bytes in use now, and at the peak).
    pub fn agrees_with(&self, in_use: u64, peak: u64) -> Result<(), oomscope_base::Problem> {
        if (self.in_use, self.mark.bytes) == (in_use, peak) {
            Ok(())
        } else {
            Err(oomscope_base::problem!(
                "the peak tracker has {} in use (peak {}), the allocator's statistics {in_use} (peak {peak})",
                self.in_use,
                self.mark.bytes
            ))
        }
    }

    /// The peak as a dump records it, op ids resolved to names; `None` before any
    /// allocation.
    pub fn to_dump(&self, names: &Names) -> Option<oomscope_format::PeakInfo> {
        if self.mark.bytes == 0 {
            return None;
        }
        let mut ops: Vec<(u32, OpLive)> =
            (0u32..).zip(self.at_peak.iter().copied()).filter(|(_, l)| l.count > 0).collect();
        // Largest first; ties in the order the ops were first seen, as `usage_by_node`.
        ops.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then(ka.cmp(kb)));
        let m = &self.mark;
        Some(oomscope_format::PeakInfo {
            bytes_in_use: m.bytes,
            allocations: m.allocations,
            seq: m.seq,
            op: names.op(m.op).to_string(),
            step: m.step,
            t_ns: m.t_ns,
            usage_by_node: ops
                .into_iter()
                .map(|(op, l)| oomscope_format::NodeUsage {
                    op: names.op(op).to_string(),
                    bytes: l.bytes,
                    requested: l.requested,
                    count: l.count,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_ids_start_at_one_and_are_stable() {
        let mut i: Interner<String> = Interner::default();
        assert_eq!(i.intern("a"), 1);
        assert_eq!(i.intern("b"), 2);
        assert_eq!(i.intern("a"), 1);
        assert_eq!(i.get(0), None);
        assert_eq!(i.get(2).map(String::as_str), Some("b"));
        assert_eq!(i.get(3), None);
        let mut s: Interner<Vec<i64>> = Interner::default();
        assert_eq!(s.intern(&[1i64, 2][..]), 1);
        assert_eq!(s.intern(&[1i64, 2][..]), 1);
    }

    #[test]
    fn history_keeps_the_last_events_and_counts_the_rest() {
        let mut h = History::new(3);
        let e = Event { seq: 0, t_ns: 0, kind: EventKind::Alloc, addr: 0, size: 0, requested: 0, op: 0, step: 0 };
        for i in 0..5 {
            h.push(Event { addr: i, ..e });
        }
        let kept: Vec<u64> = h.iter().map(|e| e.seq).collect();
        assert_eq!(kept, vec![2, 3, 4]);
        assert_eq!((h.total(), h.dropped()), (5, 2));
        let mut off = History::new(0);
        off.push(e);
        assert_eq!((off.total(), off.dropped(), off.iter().count()), (1, 1, 0));
    }

    /// The ranking at the peak, as (op id, bytes, count).
    fn at_peak(t: &PeakTracker) -> Vec<(String, u64, u64)> {
        let mut names = Names::default();
        for n in ["a", "b", "c"] {
            names.ops.intern(n);
        }
        t.to_dump(&names).unwrap().usage_by_node.into_iter().map(|n| (n.op, n.bytes, n.count)).collect()
    }

    #[test]
    fn the_peak_tracker_keeps_what_was_live_at_the_peak() {
        let m = |op| Meta { op, step: 3, ..Meta::default() };
        let mut t = PeakTracker::default();
        assert!(t.to_dump(&Names::default()).is_none());
        t.alloc(100, 90, &m(1), 0);
        t.alloc(300, 300, &m(2), 1);
        t.alloc(50, 50, &m(1), 2);
        t.free(300, 300, 2);
        t.alloc(10, 10, &m(3), 4);
        let peak = t.to_dump(&Names::default()).unwrap();
        assert_eq!((peak.bytes_in_use, peak.allocations, peak.seq, peak.step), (450, 3, Some(2), 3));
        assert_eq!(at_peak(&t), vec![("b".into(), 300, 1), ("a".into(), 150, 2)]);
        // A higher peak later replaces it.
        t.alloc(1000, 1000, &m(3), 5);
        assert_eq!(t.bytes(), 1160);
        assert_eq!(at_peak(&t), vec![("c".into(), 1010, 2), ("a".into(), 150, 2)]);
    }

    #[test]
    fn the_peak_tracker_stays_exact_when_its_log_is_dropped() {
        let m = |op| Meta { op, ..Meta::default() };
        let mut t = PeakTracker::default();
        t.alloc(1 << 20, 1 << 20, &m(1), 0);
        t.free(1 << 20, 1 << 20, 1);
        // Far more changes than the log keeps, none of them a peak.
        for i in 0..10 * PEAK_LOG_SLACK as u64 {
            t.alloc(256, 256, &m(2), i);
            t.free(256, 256, 2);
        }
        assert!(t.stale && t.since.is_empty());
        assert_eq!(at_peak(&t), vec![("a".into(), 1 << 20, 1)]);
        t.alloc(512, 512, &m(3), 0);
        t.alloc(1 << 20, 1 << 20, &m(2), 0);
        assert_eq!(at_peak(&t), vec![("b".into(), 1 << 20, 1), ("c".into(), 512, 1)]);
    }
}
