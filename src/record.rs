//! What oomscope remembers about each allocation, and the recent history.
//!
//! Names, shapes, dtypes and call stacks are interned once and referred to by small ids,
//! so recording an allocation costs a few stores on the hot path; strings are looked up
//! again only when a report is written.

use crate::hash::FastMap;
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;

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

/// What a tensor is for: the verdict says which of these dominates at a peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Not given; [`Kind::infer`] guesses from the op name.
    #[default]
    Unknown,
    /// Trainable variables and other persistent model state.
    Weight,
    /// Optimizer slots (Adam's m and v, momentum).
    Optimizer,
    /// The batch fed to the model (images, labels).
    Input,
    /// Forward outputs, kept while backward still needs them.
    Activation,
    /// Gradients of activations and weights.
    Gradient,
    /// Scratch memory freed by the op that made it (cuDNN workspaces).
    Temporary,
}

impl Kind {
    pub const ALL: [Kind; 6] =
        [Kind::Activation, Kind::Gradient, Kind::Weight, Kind::Optimizer, Kind::Input, Kind::Temporary];

    /// The name used in traces, dumps and reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Unknown => "unknown",
            Kind::Weight => "weight",
            Kind::Optimizer => "optimizer",
            Kind::Input => "input",
            Kind::Activation => "activation",
            Kind::Gradient => "gradient",
            Kind::Temporary => "temporary",
        }
    }

    /// The kind in prose: `activations`, `optimizer state`.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Unknown => "unclassified memory",
            Kind::Weight => "weights",
            Kind::Optimizer => "optimizer state",
            Kind::Input => "inputs",
            Kind::Activation => "activations",
            Kind::Gradient => "gradients",
            Kind::Temporary => "temporaries",
        }
    }

    /// Parses a trace's `kind` field.
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "weight" => Kind::Weight,
            "optimizer" => Kind::Optimizer,
            "input" => Kind::Input,
            "activation" => Kind::Activation,
            "gradient" => Kind::Gradient,
            "temporary" => Kind::Temporary,
            "unknown" => Kind::Unknown,
            _ => return None,
        })
    }

    /// A guess from TensorFlow's naming conventions, for data that did not say:
    /// `gradients/...` and `..._grad/...` are gradients; slot names (`/Adam`, `/Momentum`,
    /// `/RMSProp`) optimizer state; variables (`kernel`, `bias`, `weights`, `Variable`,
    /// `embeddings`, batch-norm statistics) weights; `workspace` temporaries; the rest
    /// activations.
    pub fn infer(op: &str) -> Kind {
        let last = op.rsplit('/').next().unwrap_or(op);
        if op.starts_with("gradients") || op.contains("_grad/") {
            Kind::Gradient
        } else if ["Adam", "Adam_1", "Momentum", "RMSProp", "RMSProp_1", "Adagrad", "Ftrl", "Ftrl_1"].contains(&last)
            || op.contains("/Adam/")
        {
            Kind::Optimizer
        } else if [
            "kernel",
            "bias",
            "weights",
            "biases",
            "embeddings",
            "gamma",
            "beta",
            "moving_mean",
            "moving_variance",
        ]
        .contains(&last)
            || last.starts_with("Variable")
        {
            Kind::Weight
        } else if op.contains("workspace") {
            Kind::Temporary
        } else {
            Kind::Activation
        }
    }

    /// The kind given, or else the one inferred from the op name.
    pub fn or_infer(self, op: &str) -> Kind {
        if self == Kind::Unknown { Kind::infer(op) } else { self }
    }
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

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A tensor was allocated (`addr`, `size` = chunk size, `requested`).
    Alloc,
    /// A tensor was freed.
    Free,
    /// An allocation failed (`requested`, `size` = rounded request).
    Oom,
    /// A training step began (`step`).
    Step,
    /// The allocator obtained a region from the device (`addr`, `size`).
    Extend,
    /// The device refused a region of `size` bytes.
    Refused,
    /// Garbage collection returned an empty region to the device.
    RegionFree,
    /// Memory taken directly from the device, outside the allocator's pool (cuDNN, cuBLAS).
    OutsideAlloc,
    /// Outside memory given back.
    OutsideFree,
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

impl History {
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

/// Live bytes at a step boundary: what the growth-across-steps verdict reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepMark {
    pub step: i64,
    pub t_ns: u64,
    pub bytes_in_use: u64,
    pub pool_bytes: u64,
    /// Live allocations at the mark.
    pub live: u64,
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
    fn kinds_are_inferred_from_tf_names() {
        for (op, kind) in [
            ("gradients/shared_model/unet_07/Conv2D_grad/Conv2DBackpropFilter", Kind::Gradient),
            ("model/dense/MatMul_grad/MatMul", Kind::Gradient),
            ("unet_conv_00_w/Adam_1", Kind::Optimizer),
            ("model/dense/kernel", Kind::Weight),
            ("Variable_3", Kind::Weight),
            ("model/bn/moving_mean", Kind::Weight),
            ("model/layer01/Conv2D/workspace", Kind::Temporary),
            ("shared_model/unet_00/Conv2D", Kind::Activation),
        ] {
            assert_eq!(Kind::infer(op), kind, "{op}");
        }
        assert_eq!(Kind::Input.or_infer("gradients/x"), Kind::Input, "a given kind wins");
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
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
