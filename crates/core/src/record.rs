//! What oomscope remembers about each allocation, and the recent history.
//!
//! Names, shapes, dtypes and call stacks are interned once and referred to by small ids,
//! so recording an allocation costs a few stores on the hot path; strings are looked up
//! again only when a report is written.

use oomscope_base::hash::FastMap;
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;

pub use oomscope_dump::{EventKind, Kind, StepMark};

/// The name printed for allocations that came with no op name and no scope.
pub const UNNAMED_OP: &str = "unknown";

/// What an allocation is recorded with. Ids refer to the allocator's [`Names`];
/// 0 means "not given".
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
    pub fn to_dump(&self, names: &Names) -> Vec<oomscope_dump::EventInfo> {
        self.iter()
            .map(|e| oomscope_dump::EventInfo {
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
}
