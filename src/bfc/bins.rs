//! The 21 bins of free chunks.
//!
//! Invariant (TF's): a bin holds FREE chunks only, each in the bin of its size, ordered
//! by (size, address). The search order this gives is what makes the allocator's choices,
//! and therefore its addresses and its dump, identical to TensorFlow's.

use super::{NUM_BINS, bin_for_size};
use std::collections::BTreeSet;

/// A free chunk as a bin orders it: (size, address), and the chunk's handle.
pub(super) type Key = (u64, u64, u32);

#[derive(Clone, Debug, Default)]
pub(super) struct Bins {
    sets: [BTreeSet<Key>; NUM_BINS],
    /// Bit `b` is set when bin `b` is not empty, so the search skips empty bins in O(1).
    nonempty: u32,
}

impl Bins {
    pub fn insert(&mut self, bin: usize, key: Key) {
        self.sets[bin].insert(key);
        self.nonempty |= 1 << bin;
    }

    pub fn remove(&mut self, bin: usize, key: &Key) -> bool {
        let set = &mut self.sets[bin];
        let removed = set.remove(key);
        if set.is_empty() {
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
            && let Some(&key) = self.sets[first].range((rounded, 0, 0)..).next()
        {
            return Some((first, key));
        }
        // Every chunk in a higher bin is larger than anything the first bin can hold.
        let higher = self.nonempty & !((2u32 << first) - 1);
        if higher == 0 {
            return None;
        }
        let bin = higher.trailing_zeros() as usize;
        self.sets[bin].first().map(|&key| (bin, key))
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
