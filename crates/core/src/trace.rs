//! Allocation traces in memory: what a replay feeds through an allocator. A trace is read
//! from a file (`oomscope_ingest::trace`, JSON Lines), built by the workload simulator, or
//! rebuilt from a dump's history; the [`Builder`] makes one in code without text.

use crate::record::{Kind, Meta, Names};

/// One replayable event. `alloc` numbers allocations in order; frees refer to that number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `outside`: taken straight from the device, outside the allocator's pool.
    Alloc {
        alloc: u32,
        bytes: u64,
        meta: Meta,
        outside: bool,
    },
    Free {
        alloc: u32,
        t_ns: u64,
        outside: bool,
    },
    Step {
        step: i64,
        t_ns: u64,
    },
}

/// A checked trace with its names interned.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub events: Vec<Event>,
    /// The source line of each event (1-based).
    pub lines: Vec<u32>,
    pub names: Names,
    /// Number of `alloc` events.
    pub allocs: u32,
    /// Where the recorded run's device put its regions, in the order it handed them out
    /// (`region` lines): a replay's simulated device puts them there too.
    pub regions: Vec<(u64, u64)>,
}

/// Builds a trace in code (the simulator), as if each event were one line of a file: the
/// same checked [`Trace`], without writing text and parsing it back.
#[derive(Debug)]
pub struct Builder {
    trace: Trace,
    step: i64,
    /// Whether each allocation (by number) was taken outside the pool.
    outside: Vec<bool>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder { trace: Trace::default(), step: -1, outside: Vec::new() }
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    fn push(&mut self, event: Event) {
        self.trace.events.push(event);
        self.trace.lines.push(u32::try_from(self.trace.events.len()).unwrap_or(u32::MAX));
    }

    /// A training step begins; later allocations are recorded in it.
    pub fn step(&mut self, step: i64) {
        self.step = step;
        self.push(Event::Step { step, t_ns: 0 });
    }

    /// Allocates; returns the allocation's number, for [`Builder::free`].
    pub fn alloc(
        &mut self,
        bytes: u64,
        op: &str,
        shape: Option<&[i64]>,
        dtype: Option<&str>,
        kind: Kind,
        outside: bool,
    ) -> u32 {
        let alloc = self.trace.allocs;
        self.trace.allocs = alloc.saturating_add(1);
        let names = &mut self.trace.names;
        let meta = Meta {
            op: names.ops.intern(op),
            shape: shape.map_or(0, |s| names.shapes.intern(s)),
            dtype: dtype.map_or(0, |d| names.dtypes.intern(d)),
            step: self.step,
            kind,
            ..Meta::default()
        };
        self.outside.push(outside);
        self.push(Event::Alloc { alloc, bytes, meta, outside });
        alloc
    }

    /// Frees allocation number `alloc`.
    pub fn free(&mut self, alloc: u32) {
        let outside = self.outside.get(alloc as usize).copied().unwrap_or(false);
        self.push(Event::Free { alloc, t_ns: 0, outside });
    }

    /// Events so far.
    pub fn len(&self) -> usize {
        self.trace.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trace.events.is_empty()
    }

    pub fn finish(self) -> Trace {
        self.trace
    }
}
