//! The 21 bins of free chunks.
//!
//! Invariant (TF's): a bin holds FREE chunks only, each in the bin of its size, ordered
//! by (size, address). The search order this gives is what makes the allocator's choices,
//! and therefore its addresses and its dump, identical to TensorFlow's.
//!
//! TF keeps each bin in a `std::set`. Here a bin is a sorted vector while it is small (the
//! common case: a few free chunks per size class, where a vector is several times faster
//! than a tree) and a B-tree once it holds many (a fragmented pool can leave thousands of
//! free chunks in one bin, where shifting a vector would cost microseconds). Both give the
//! same order, so the choice is invisible outside this file.

use super::{NUM_BINS, bin_for_size};
use std::collections::BTreeSet;

/// A free chunk as a bin orders it: (size, address), and the chunk's handle.
pub(super) type Key = (u64, u64, u32);

/// Above this many chunks a bin becomes a tree...
const TO_TREE: usize = 128;
/// ...and below this many it becomes a vector again (apart from `TO_TREE`, so a bin that
/// hovers around one size does not convert back and forth).
const TO_VEC: usize = 32;

#[derive(Clone, Debug)]
enum Set {
    Small(Vec<Key>),
    Large(BTreeSet<Key>),
}

impl Default for Set {
    fn default() -> Self {
        Set::Small(Vec::new())
    }
}

impl Set {
    fn len(&self) -> usize {
        match self {
            Set::Small(v) => v.len(),
            Set::Large(t) => t.len(),
        }
    }

    fn insert(&mut self, key: Key) {
        match self {
            Set::Small(v) => {
                let at = v.partition_point(|k| *k < key);
                v.insert(at, key);
                if v.len() > TO_TREE {
                    *self = Set::Large(v.drain(..).collect());
                }
            }
            Set::Large(t) => {
                t.insert(key);
            }
        }
    }

    fn remove(&mut self, key: &Key) -> bool {
        match self {
            Set::Small(v) => match v.binary_search(key) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            Set::Large(t) => {
                let removed = t.remove(key);
                if t.len() < TO_VEC {
                    *self = Set::Small(std::mem::take(t).into_iter().collect());
                }
                removed
            }
        }
    }

    /// The first key at or after `from`.
    fn first_from(&self, from: Key) -> Option<Key> {
        match self {
            Set::Small(v) => v.get(v.partition_point(|k| *k < from)).copied(),
            Set::Large(t) => t.range(from..).next().copied(),
        }
    }

    fn first(&self) -> Option<Key> {
        match self {
            Set::Small(v) => v.first().copied(),
            Set::Large(t) => t.first().copied(),
        }
    }

    fn last(&self) -> Option<Key> {
        match self {
            Set::Small(v) => v.last().copied(),
            Set::Large(t) => t.last().copied(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &Key> + '_> {
        match self {
            Set::Small(v) => Box::new(v.iter()),
            Set::Large(t) => Box::new(t.iter()),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Bins {
    sets: [Set; NUM_BINS],
    /// Bit `b` is set when bin `b` is not empty, so the search skips empty bins in O(1).
    nonempty: u32,
}

impl Bins {
    #[inline]
    pub fn insert(&mut self, bin: usize, key: Key) {
        self.sets[bin].insert(key);
        self.nonempty |= 1 << bin;
    }

    #[inline]
    pub fn remove(&mut self, bin: usize, key: &Key) -> bool {
        let set = &mut self.sets[bin];
        let removed = set.remove(key);
        if set.len() == 0 {
            self.nonempty &= !(1 << bin);
        }
        removed
    }

    /// TF's `FindChunkPtr` search: from the bin of `rounded` upward, the first chunk in
    /// (size, address) order whose size is at least `rounded`.
    #[inline]
    pub fn find(&self, rounded: u64) -> Option<(usize, Key)> {
        let first = bin_for_size(rounded);
        if self.nonempty & (1 << first) != 0
            && let Some(key) = self.sets[first].first_from((rounded, 0, 0))
        {
            return Some((first, key));
        }
        // Every chunk in a higher bin is larger than anything the first bin can hold.
        let higher = self.nonempty & !((2u32 << first) - 1);
        if higher == 0 {
            return None;
        }
        let bin = higher.trailing_zeros() as usize;
        self.sets[bin].first().map(|key| (bin, key))
    }

    /// The largest free chunk's size (0 when none).
    pub fn largest(&self) -> u64 {
        if self.nonempty == 0 {
            return 0;
        }
        let bin = 31 - self.nonempty.leading_zeros() as usize;
        self.sets[bin].last().map_or(0, |k| k.0)
    }

    /// Free chunks of one bin in the order the allocator searches them.
    pub fn iter(&self, bin: usize) -> impl Iterator<Item = &Key> {
        self.sets[bin].iter()
    }

    pub fn len(&self, bin: usize) -> usize {
        self.sets[bin].len()
    }

    pub fn nonempty_mask(&self) -> u32 {
        self.nonempty
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector and the tree must agree on every query, across both conversions.
    #[test]
    fn small_and_large_forms_give_the_same_answers() {
        let mut bins = Bins::default();
        let mut reference = BTreeSet::new();
        let bin = 3; // sizes 2048..4095
        let mut seed = 12345u64;
        for round in 0..4000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let size = 2048 + (seed >> 33) % 2048 / 256 * 256;
            let key = (size, (seed >> 20) % 1000 * 4096, round);
            // Grow past TO_TREE in the first half, shrink below TO_VEC in the second.
            if round < 2000 || seed.is_multiple_of(3) {
                bins.insert(bin, key);
                reference.insert(key);
            } else if let Some(&k) = reference.iter().nth((seed % reference.len().max(1) as u64) as usize) {
                assert!(bins.remove(bin, &k));
                reference.remove(&k);
            }
            assert!(!bins.remove(bin, &(1, 1, 1)), "absent keys are not removed");
            let probe = 2048 + (seed >> 40) % 2048;
            let expect = reference.range((probe, 0, 0)..).next().copied();
            assert_eq!(bins.find(probe).map(|(_, k)| k), expect, "round {round}");
            assert_eq!(bins.len(bin), reference.len());
            assert_eq!(bins.largest(), reference.last().map_or(0, |k| k.0));
            assert!(bins.iter(bin).copied().eq(reference.iter().copied()));
        }
    }
}
