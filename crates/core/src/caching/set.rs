//! An ordered set of free-block keys, as PyTorch's `std::set<Block*, Comparator>`: a sorted
//! vector while small (a pool holds a few dozen free blocks in a typical run, where shifting
//! a vector beats a tree several times over) and a B-tree once it holds many (a fragmented
//! pool can hold thousands). Both give the same order, so the choice is invisible outside.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Above this many keys the set becomes a tree...
const TO_TREE: usize = 256;
/// ...and below this many a vector again (apart from `TO_TREE`, so a set hovering around
/// one size does not convert back and forth).
const TO_VEC: usize = 64;

#[derive(Clone, Debug)]
pub(super) enum OrderedSet<K: Ord + Copy> {
    Small(Vec<K>),
    Large(BTreeSet<K>),
}

impl<K: Ord + Copy> Default for OrderedSet<K> {
    fn default() -> Self {
        OrderedSet::Small(Vec::new())
    }
}

impl<K: Ord + Copy> OrderedSet<K> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            OrderedSet::Small(v) => v.len(),
            OrderedSet::Large(t) => t.len(),
        }
    }

    pub fn insert(&mut self, key: K) {
        match self {
            OrderedSet::Small(v) => {
                let at = v.partition_point(|k| *k < key);
                if v.get(at) != Some(&key) {
                    v.insert(at, key);
                }
                if v.len() > TO_TREE {
                    *self = OrderedSet::Large(v.drain(..).collect());
                }
            }
            OrderedSet::Large(t) => {
                t.insert(key);
            }
        }
    }

    pub fn remove(&mut self, key: &K) -> bool {
        match self {
            OrderedSet::Small(v) => match v.binary_search(key) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            OrderedSet::Large(t) => {
                let removed = t.remove(key);
                if t.len() < TO_VEC {
                    *self = OrderedSet::Small(std::mem::take(t).into_iter().collect());
                }
                removed
            }
        }
    }

    /// Replaces `old` by `new`: in a vector, one search and a shift of the keys between
    /// the two places (none when the order does not change) rather than two shifts of the
    /// tail. False (and nothing changed) when `old` is not there.
    #[cfg(test)]
    pub fn replace(&mut self, old: &K, new: K) -> bool {
        match self {
            OrderedSet::Small(v) => {
                let Ok(i) = v.binary_search(old) else { return false };
                if new > *old {
                    // The new place is after `i`, among the keys greater than `old`.
                    let j = i + 1 + v[i + 1..].partition_point(|k| *k < new);
                    if v.get(j) == Some(&new) {
                        v.remove(i);
                    } else {
                        v[i..j].rotate_left(1);
                        v[j - 1] = new;
                    }
                } else {
                    let j = v[..i].partition_point(|k| *k < new);
                    if j < i && v[j] == new {
                        v.remove(i);
                    } else {
                        v[j..=i].rotate_right(1);
                        v[j] = new;
                    }
                }
                true
            }
            OrderedSet::Large(t) => {
                if !t.remove(old) {
                    return false;
                }
                t.insert(new);
                true
            }
        }
    }

    /// The keys at or after `from`, in order.
    pub fn from(&self, from: K) -> Box<dyn Iterator<Item = &K> + '_> {
        match self {
            OrderedSet::Small(v) => Box::new(v[v.partition_point(|k| *k < from)..].iter()),
            OrderedSet::Large(t) => Box::new(t.range((Bound::Included(from), Bound::Unbounded))),
        }
    }

    /// The first key at or after `from` (no iterator to box: the hot path).
    #[cfg(test)]
    pub fn first_from(&self, from: K) -> Option<K> {
        match self {
            OrderedSet::Small(v) => v.get(v.partition_point(|k| *k < from)).copied(),
            OrderedSet::Large(t) => t.range(from..).next().copied(),
        }
    }

    /// The keys before `to`, largest first.
    #[cfg(test)]
    pub fn before_rev(&self, to: K) -> Box<dyn Iterator<Item = &K> + '_> {
        match self {
            OrderedSet::Small(v) => Box::new(v[..v.partition_point(|k| *k < to)].iter().rev()),
            OrderedSet::Large(t) => Box::new(t.range(..to).rev()),
        }
    }

    #[cfg(test)]
    pub fn iter(&self) -> Box<dyn Iterator<Item = &K> + '_> {
        match self {
            OrderedSet::Small(v) => Box::new(v.iter()),
            OrderedSet::Large(t) => Box::new(t.iter()),
        }
    }
}

/// A pool's free blocks, keyed (stream, size, address, handle) and ordered so, as
/// PyTorch's `BlockComparatorSize`. Inside, per stream, blocks are binned by size (an eighth
/// of an octave per bin, so every size in bin `b` is smaller than any in bin `b + 1`), and
/// each bin is a list sorted by (size, address) threaded through a table indexed by the
/// block's handle: an insert walks the few blocks of one bin, a removal unlinks in O(1), a
/// search looks in the request's bin and then takes the head of the next non-empty one.
/// A bin that gathers many blocks (a fragmented pool) becomes a B-tree, so no operation is
/// worse than logarithmic. The order seen outside is PyTorch's.
#[derive(Clone, Debug, Default)]
pub(super) struct FreeSet {
    /// By stream: the first few streams binned, in a list (a lookup in the hot path is a
    /// compare or two); the rest in a map, few-block streams unbinned (a program may use
    /// thousands of streams: each lookup stays logarithmic, memory follows the blocks).
    near: Vec<(u64, Bins)>,
    far: BTreeMap<u64, Blocks>,
    /// By handle: the block's size and address while it is in the set, and its list links.
    nodes: Vec<Node>,
    len: usize,
    /// The largest block's size when known (`None`: to be found again). Every OOM reports
    /// it; found by a walk, it made a program failing in a loop over many streams
    /// quadratic. An insert raises it at once; only the removal of a block of that size
    /// forgets it.
    largest: std::cell::Cell<Option<u64>>,
}

/// One stream's free blocks, past the first few streams. Bins cost 8 KiB a stream: a stream
/// that holds few blocks keeps them in one sorted list instead, and is binned once it holds
/// more than [`BINNED_PAST`]. A binned stream stays binned; a stream of few blocks that
/// empties is dropped. Memory then follows the blocks, not the streams ever seen.
#[derive(Clone, Debug)]
enum Blocks {
    /// Sorted.
    Few(Vec<BinKey>),
    Binned(Bins),
}

/// A stream's blocks are binned past this many.
const BINNED_PAST: usize = 16;
/// Streams looked up in a list, always binned.
const NEAR: usize = 4;

/// A stream's blocks as a query reads them.
#[derive(Clone, Copy)]
enum BlocksRef<'a> {
    Few(&'a [BinKey]),
    Binned(&'a Bins),
}

type Key = (u64, u64, u64, u32);
type BinKey = (u64, u64, u32);
const NIL: u32 = u32::MAX;
/// Sub-bins per power of two.
const SUB_BITS: u32 = 3;
const BINS: usize = 64 << SUB_BITS;
const WORDS: usize = BINS / 64;
/// A bin's list past this many blocks becomes a tree...
const LIST_MAX: u32 = 48;
/// ...and a tree below this many a list again.
const LIST_AGAIN: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Node {
    size: u64,
    addr: u64,
    prev: u32,
    next: u32,
    /// In the set (and where its links are meaningful).
    linked: bool,
}

impl Default for Node {
    fn default() -> Self {
        Node { size: 0, addr: 0, prev: NIL, next: NIL, linked: false }
    }
}

#[derive(Clone, Debug)]
enum Bin {
    /// A sorted list through the node table.
    List { head: u32, len: u32 },
    // Boxed so that a bin, of which a stream has 512, stays two words.
    #[allow(clippy::box_collection)]
    Tree(Box<BTreeSet<BinKey>>),
}

#[derive(Clone, Debug)]
struct Bins {
    bins: Box<[Bin]>,
    /// Bit `b % 64` of word `b / 64` is set when bin `b` is not empty.
    nonempty: [u64; WORDS],
}

impl Default for Bins {
    fn default() -> Self {
        Bins { bins: (0..BINS).map(|_| Bin::List { head: NIL, len: 0 }).collect(), nonempty: [0; WORDS] }
    }
}

/// The bin of a size: its power of two and the next `SUB_BITS` bits below the top one.
#[inline]
fn bin(size: u64) -> usize {
    let size = size | 1;
    let p = 63 - size.leading_zeros();
    let sub = if p >= SUB_BITS { (size >> (p - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1) } else { 0 };
    ((p as usize) << SUB_BITS) | sub
}

impl Bins {
    #[inline]
    fn set_nonempty(&mut self, b: usize, on: bool) {
        if on {
            self.nonempty[b / 64] |= 1 << (b % 64);
        } else {
            self.nonempty[b / 64] &= !(1 << (b % 64));
        }
    }

    #[inline]
    fn is_nonempty(&self, b: usize) -> bool {
        self.nonempty[b / 64] & (1 << (b % 64)) != 0
    }

    /// The first bin at or above `b` that holds blocks.
    #[inline]
    fn next_nonempty(&self, b: usize) -> Option<usize> {
        if b >= BINS {
            return None;
        }
        let mut w = b / 64;
        let mut mask = self.nonempty[w] & (!0u64 << (b % 64));
        loop {
            if mask != 0 {
                return Some(w * 64 + mask.trailing_zeros() as usize);
            }
            w += 1;
            if w == WORDS {
                return None;
            }
            mask = self.nonempty[w];
        }
    }
}

impl Bins {
    /// Links block `h` (size and address in `nodes[h]`) into its bin, after every block
    /// ordered before it.
    #[inline(always)]
    fn insert(&mut self, nodes: &mut [Node], h: u32) {
        let (size, addr) = (nodes[h as usize].size, nodes[h as usize].addr);
        let b = bin(size);
        match &mut self.bins[b] {
            Bin::List { head, len } => {
                let (mut prev, mut at) = (NIL, *head);
                while at != NIL {
                    let n = &nodes[at as usize];
                    if (n.size, n.addr) > (size, addr) {
                        break;
                    }
                    prev = at;
                    at = n.next;
                }
                nodes[h as usize].prev = prev;
                nodes[h as usize].next = at;
                if prev == NIL {
                    *head = h;
                } else {
                    nodes[prev as usize].next = h;
                }
                if at != NIL {
                    nodes[at as usize].prev = h;
                }
                *len += 1;
                if *len > LIST_MAX {
                    let mut tree = BTreeSet::new();
                    let mut at = *head;
                    while at != NIL {
                        let n = &nodes[at as usize];
                        tree.insert((n.size, n.addr, at));
                        at = n.next;
                    }
                    self.bins[b] = Bin::Tree(Box::new(tree));
                }
            }
            Bin::Tree(t) => {
                t.insert((size, addr, h));
            }
        }
        self.set_nonempty(b, true);
    }

    /// Unlinks block `h`, described by `n` (its node before the call).
    #[inline(always)]
    fn remove(&mut self, nodes: &mut [Node], n: Node, h: u32) {
        let b = bin(n.size);
        let empty = match &mut self.bins[b] {
            Bin::List { head, len } => {
                if n.prev == NIL {
                    *head = n.next;
                } else {
                    nodes[n.prev as usize].next = n.next;
                }
                if n.next != NIL {
                    nodes[n.next as usize].prev = n.prev;
                }
                *len -= 1;
                *len == 0
            }
            Bin::Tree(t) => {
                t.remove(&(n.size, n.addr, h));
                if t.len() < LIST_AGAIN {
                    // Back to a list, in order.
                    let keys: Vec<BinKey> = t.iter().copied().collect();
                    let mut prev = NIL;
                    for &(_, _, x) in &keys {
                        nodes[x as usize].prev = prev;
                        nodes[x as usize].next = NIL;
                        if prev != NIL {
                            nodes[prev as usize].next = x;
                        }
                        prev = x;
                    }
                    let head = keys.first().map_or(NIL, |k| k.2);
                    self.bins[b] = Bin::List { head, len: keys.len() as u32 };
                }
                keys_empty(&self.bins[b])
            }
        };
        if empty {
            self.set_nonempty(b, false);
        }
    }
}

impl FreeSet {
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn get(&self, stream: u64) -> Option<BlocksRef<'_>> {
        match self.near.iter().find(|(s, _)| *s == stream) {
            Some((_, b)) => Some(BlocksRef::Binned(b)),
            None if self.far.is_empty() => None,
            None => self.far.get(&stream).map(|b| match b {
                Blocks::Few(t) => BlocksRef::Few(t),
                Blocks::Binned(b) => BlocksRef::Binned(b),
            }),
        }
    }

    /// Every stream's blocks, in stream order.
    fn all(&self) -> Vec<(u64, BlocksRef<'_>)> {
        let mut v: Vec<(u64, BlocksRef<'_>)> = self
            .near
            .iter()
            .map(|(s, b)| (*s, BlocksRef::Binned(b)))
            .chain(self.far.iter().map(|(s, b)| {
                (
                    *s,
                    match b {
                        Blocks::Few(t) => BlocksRef::Few(t),
                        Blocks::Binned(b) => BlocksRef::Binned(b),
                    },
                )
            }))
            .collect();
        v.sort_unstable_by_key(|(s, _)| *s);
        v
    }

    /// Past the first few streams: out of the hot path. False when the key is not there.
    #[inline(never)]
    fn remove_far(far: &mut BTreeMap<u64, Blocks>, nodes: &mut [Node], n: Node, k: &Key) -> bool {
        let emptied = match far.get_mut(&k.0) {
            None => return false,
            Some(Blocks::Binned(bins)) => {
                bins.remove(nodes, n, k.3);
                false
            }
            Some(Blocks::Few(t)) => {
                let Ok(at) = t.binary_search(&(n.size, n.addr, k.3)) else { return false };
                t.remove(at);
                t.is_empty()
            }
        };
        if emptied {
            far.remove(&k.0);
        }
        true
    }

    /// Past the first few streams: out of the hot path.
    #[inline(never)]
    fn insert_far(far: &mut BTreeMap<u64, Blocks>, nodes: &mut [Node], k: Key) {
        let blocks = far.entry(k.0).or_insert_with(|| Blocks::Few(Vec::new()));
        match blocks {
            Blocks::Binned(bins) => bins.insert(nodes, k.3),
            Blocks::Few(t) => {
                let key = (k.1, k.2, k.3);
                let at = t.partition_point(|x| *x < key);
                t.insert(at, key);
                if t.len() > BINNED_PAST {
                    let mut bins = Bins::default();
                    for &(_, _, x) in t.iter() {
                        bins.insert(nodes, x);
                    }
                    *blocks = Blocks::Binned(bins);
                }
            }
        }
    }

    #[inline]
    pub fn insert(&mut self, k: Key) {
        let h = k.3 as usize;
        if self.nodes.len() <= h {
            self.nodes.resize(h + 1, Node::default());
        }
        if self.nodes[h].linked {
            return;
        }
        self.nodes[h] = Node { size: k.1, addr: k.2, prev: NIL, next: NIL, linked: true };
        if let Some((_, bins)) = self.near.iter_mut().find(|(s, _)| *s == k.0) {
            bins.insert(&mut self.nodes, k.3);
        } else if self.near.len() < NEAR && !self.far.contains_key(&k.0) {
            let mut bins = Bins::default();
            bins.insert(&mut self.nodes, k.3);
            self.near.push((k.0, bins));
        } else {
            Self::insert_far(&mut self.far, &mut self.nodes, k);
        }
        self.len += 1;
        if let Some(m) = self.largest.get() {
            self.largest.set(Some(m.max(k.1)));
        }
    }

    #[inline]
    pub fn remove(&mut self, k: &Key) -> bool {
        let h = k.3 as usize;
        let Some(n) = self.nodes.get(h).copied() else { return false };
        if !n.linked || (n.size, n.addr) != (k.1, k.2) {
            return false;
        }
        if let Some((_, bins)) = self.near.iter_mut().find(|(s, _)| *s == k.0) {
            bins.remove(&mut self.nodes, n, k.3);
        } else if !Self::remove_far(&mut self.far, &mut self.nodes, n, k) {
            return false;
        }
        self.nodes[h] = Node::default();
        self.len -= 1;
        if self.largest.get() == Some(n.size) {
            self.largest.set(None);
        }
        true
    }

    /// The largest block's size (0: none).
    pub fn largest(&self) -> u64 {
        if let Some(m) = self.largest.get() {
            return m;
        }
        let m = self.all().into_iter().map(|(_, b)| self.largest_of(b)).max().unwrap_or(0);
        self.largest.set(Some(m));
        m
    }

    /// The remembered largest size is the largest block's.
    pub fn check(&self) -> Result<(), oomscope_base::Problem> {
        let Some(m) = self.largest.get() else { return Ok(()) };
        let actual = self.iter().map(|k| k.1).max().unwrap_or(0);
        if m != actual {
            return Err(oomscope_base::problem!(
                "the free set remembers {m} bytes as its largest block; it is {actual}"
            ));
        }
        Ok(())
    }

    fn largest_of(&self, b: BlocksRef<'_>) -> u64 {
        match b {
            BlocksRef::Few(t) => t.last().map_or(0, |k| k.0),
            BlocksRef::Binned(bins) => {
                let Some(top) = (0..BINS).rev().find(|&i| bins.is_nonempty(i)) else { return 0 };
                match &bins.bins[top] {
                    Bin::Tree(t) => t.last().map_or(0, |k| k.0),
                    Bin::List { head, .. } => {
                        let mut at = *head;
                        let mut size = 0;
                        while at != NIL {
                            size = self.nodes[at as usize].size;
                            at = self.nodes[at as usize].next;
                        }
                        size
                    }
                }
            }
        }
    }

    /// Replaces the key `old` by `new`, as `remove` then `insert` would.
    #[inline]
    pub fn replace(&mut self, old: &Key, new: Key) {
        self.remove(old);
        self.insert(new);
    }

    /// The first block of `stream` of at least `size` bytes, in (size, address) order.
    #[inline]
    pub fn first_from(&self, stream: u64, size: u64) -> Option<Key> {
        match self.near.iter().find(|(s, _)| *s == stream) {
            Some((_, bins)) => self.first_in_bins(stream, bins, size),
            None => self.first_from_far(stream, size),
        }
    }

    /// Past the first few streams: out of the hot path.
    #[inline(never)]
    fn first_from_far(&self, stream: u64, size: u64) -> Option<Key> {
        match self.far.get(&stream)? {
            Blocks::Few(t) => t.get(t.partition_point(|x| *x < (size, 0, 0))).map(|k| (stream, k.0, k.1, k.2)),
            Blocks::Binned(bins) => self.first_in_bins(stream, bins, size),
        }
    }

    #[inline(always)]
    fn first_in_bins(&self, stream: u64, bins: &Bins, size: u64) -> Option<Key> {
        let b = bin(size);
        if bins.is_nonempty(b) {
            match &bins.bins[b] {
                Bin::List { head, .. } => {
                    let mut at = *head;
                    while at != NIL {
                        let n = &self.nodes[at as usize];
                        if n.size >= size {
                            return Some((stream, n.size, n.addr, at));
                        }
                        at = n.next;
                    }
                }
                Bin::Tree(t) => {
                    if let Some(k) = t.range((size, 0, 0)..).next() {
                        return Some((stream, k.0, k.1, k.2));
                    }
                }
            }
        }
        // Every block in a higher bin is larger than anything bin `b` holds.
        let higher = bins.next_nonempty(b + 1)?;
        self.first_in(stream, &bins.bins[higher])
    }

    fn first_in(&self, stream: u64, bin: &Bin) -> Option<Key> {
        match bin {
            Bin::List { head, .. } => (*head != NIL)
                .then(|| (stream, self.nodes[*head as usize].size, self.nodes[*head as usize].addr, *head)),
            Bin::Tree(t) => t.first().map(|k| (stream, k.0, k.1, k.2)),
        }
    }

    /// The keys of one bin, in order.
    fn bin_keys<'a>(&'a self, stream: u64, bin: &'a Bin) -> Box<dyn Iterator<Item = Key> + 'a> {
        match bin {
            Bin::List { head, .. } => {
                let mut at = *head;
                Box::new(std::iter::from_fn(move || {
                    (at != NIL).then(|| {
                        let n = &self.nodes[at as usize];
                        let k = (stream, n.size, n.addr, at);
                        at = n.next;
                        k
                    })
                }))
            }
            Bin::Tree(t) => Box::new(t.iter().map(move |k| (stream, k.0, k.1, k.2))),
        }
    }

    /// The blocks of `stream` of at least `size` bytes, in order.
    pub fn from(&self, stream: u64, size: u64) -> Box<dyn Iterator<Item = Key> + '_> {
        let bins = match self.get(stream) {
            None => return Box::new(std::iter::empty()),
            Some(BlocksRef::Few(t)) => {
                let at = t.partition_point(|x| *x < (size, 0, 0));
                return Box::new(t[at..].iter().map(move |k| (stream, k.0, k.1, k.2)));
            }
            Some(BlocksRef::Binned(bins)) => bins,
        };
        let b = bin(size);
        let first = self.bin_keys(stream, &bins.bins[b]).filter(move |k| k.1 >= size);
        let mut next = b + 1;
        let rest = std::iter::from_fn(move || {
            let i = bins.next_nonempty(next)?;
            next = i + 1;
            Some(i)
        })
        .flat_map(move |i| self.bin_keys(stream, &bins.bins[i]));
        Box::new(first.chain(rest))
    }

    /// The blocks of `stream` smaller than `size`, largest first.
    pub fn below_rev(&self, stream: u64, size: u64) -> Vec<Key> {
        let bins = match self.get(stream) {
            None => return Vec::new(),
            Some(BlocksRef::Few(t)) => {
                let at = t.partition_point(|x| *x < (size, 0, 0));
                return t[..at].iter().rev().map(|k| (stream, k.0, k.1, k.2)).collect();
            }
            Some(BlocksRef::Binned(bins)) => bins,
        };
        let mut out = Vec::new();
        for i in (0..=bin(size)).rev().filter(|&i| bins.is_nonempty(i)) {
            let mut keys: Vec<Key> = self.bin_keys(stream, &bins.bins[i]).filter(|k| k.1 < size).collect();
            keys.reverse();
            out.extend(keys);
        }
        out
    }

    /// Every block, in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        self.all().into_iter().flat_map(move |(s, blocks)| -> Box<dyn Iterator<Item = Key> + '_> {
            match blocks {
                BlocksRef::Few(t) => Box::new(t.iter().map(move |k| (s, k.0, k.1, k.2))),
                BlocksRef::Binned(bins) => {
                    let mut next = 0;
                    Box::new(
                        std::iter::from_fn(move || {
                            let i = bins.next_nonempty(next)?;
                            next = i + 1;
                            Some(i)
                        })
                        .flat_map(move |i| self.bin_keys(s, &bins.bins[i])),
                    )
                }
            }
        })
    }
}

fn keys_empty(bin: &Bin) -> bool {
    match bin {
        Bin::List { len, .. } => *len == 0,
        Bin::Tree(t) => t.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binned set answers every query as one B-tree over all keys does.
    #[test]
    fn the_free_set_orders_as_pytorchs_set() {
        let mut set = FreeSet::default();
        let mut reference: BTreeSet<Key> = BTreeSet::new();
        let mut seed = 7u64;
        for round in 0..8000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let size = (512 << ((seed >> 58) % 20)) | (((seed >> 30) % 8) * 512);
            let key = ((seed >> 61) % 3, size, (seed >> 20) % 5000 * 512, round);
            if round % 5 == 4 && !reference.is_empty() {
                // A block that splits or merges: its key changes, mostly within its bin.
                let &old = reference.iter().nth((seed % reference.len() as u64) as usize).expect("in range");
                let grown =
                    if seed & 1 == 0 { old.1 + (seed >> 40) % 64 * 512 } else { old.1.saturating_sub(512).max(512) };
                let new = (old.0, grown, old.2 + 512, old.3);
                set.replace(&old, new);
                reference.remove(&old);
                reference.insert(new);
            } else if round < 4000 || seed.is_multiple_of(3) {
                set.insert(key);
                reference.insert(key);
            } else if let Some(&k) = reference.iter().nth((seed % reference.len().max(1) as u64) as usize) {
                assert!(set.remove(&k));
                reference.remove(&k);
            }
            assert_eq!(set.len(), reference.len());
            let (stream, size) = ((seed >> 50) % 3, 512 << ((seed >> 40) % 22));
            let same = |k: &&Key| k.0 == stream;
            let want = reference.range((stream, size, 0, 0)..).find(same).copied();
            assert_eq!(set.first_from(stream, size), want);
            if round % 97 == 0 {
                let want: Vec<Key> = reference.range((stream, size, 0, 0)..).filter(same).copied().collect();
                assert_eq!(set.from(stream, size).collect::<Vec<_>>(), want);
                let want: Vec<Key> = reference.range(..(stream, size, 0, 0)).rev().filter(same).copied().collect();
                assert_eq!(set.below_rev(stream, size), want);
                assert!(set.iter().eq(reference.iter().copied()));
            }
        }
    }

    /// Many streams with a few blocks each (held in one B-tree a stream), some growing past
    /// the binning threshold and emptying again: every query as one B-tree over all keys.
    #[test]
    fn thousands_of_streams_answer_as_one_btree() {
        let mut set = FreeSet::default();
        let mut reference: BTreeSet<Key> = BTreeSet::new();
        let mut seed = 11u64;
        for round in 0..30000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Streams 0..4 get many blocks (binned), the other 2000 a few.
            let stream = if seed.is_multiple_of(4) { (seed >> 20) % 4 } else { 4 + (seed >> 24) % 2000 };
            let key = (stream, 512 << ((seed >> 40) % 16), (seed >> 8) % 100_000 * 512, round);
            if round < 15000 || seed.is_multiple_of(2) {
                set.insert(key);
                reference.insert(key);
            } else if let Some(&k) = reference.range((stream, 0, 0, 0)..(stream + 1, 0, 0, 0)).next() {
                assert!(set.remove(&k));
                reference.remove(&k);
            }
            assert_eq!(set.len(), reference.len());
            let size = 512 << ((seed >> 44) % 18);
            let same = |k: &&Key| k.0 == stream;
            assert_eq!(set.first_from(stream, size), reference.range((stream, size, 0, 0)..).find(same).copied());
            if round % 499 == 0 {
                let want: Vec<Key> = reference.range((stream, size, 0, 0)..).filter(same).copied().collect();
                assert_eq!(set.from(stream, size).collect::<Vec<_>>(), want);
                let want: Vec<Key> = reference.range(..(stream, size, 0, 0)).rev().filter(same).copied().collect();
                assert_eq!(set.below_rev(stream, size), want);
                assert!(set.iter().eq(reference.iter().copied()));
            }
        }
        // Emptied: the few-block streams past the first few are dropped.
        for k in std::mem::take(&mut reference) {
            assert!(set.remove(&k));
        }
        assert!(set.far.values().all(|b| matches!(b, Blocks::Binned(_))), "only binned streams stay");
        assert_eq!(set.near.len(), NEAR, "the first streams stay");
    }

    /// The vector and the tree agree with a B-tree on every query, across both conversions.
    #[test]
    fn both_forms_answer_as_a_btree_does() {
        let mut set = OrderedSet::default();
        let mut reference = BTreeSet::new();
        let mut seed = 99u64;
        for round in 0..6000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = ((seed >> 60) % 2, (seed >> 33) % 64 * 512, (seed >> 20) % 1000, round);
            if round % 7 == 6 && !reference.is_empty() {
                let old: (u64, u64, u64, u32) =
                    *reference.iter().nth((seed % reference.len() as u64) as usize).expect("in range");
                let new = (old.0, (seed >> 33) % 64 * 512, old.2, old.3);
                let had = reference.contains(&old);
                assert_eq!(set.replace(&old, new), had);
                reference.remove(&old);
                reference.insert(new);
            } else if round < 3000 || seed.is_multiple_of(3) {
                set.insert(key);
                reference.insert(key);
            } else if let Some(&k) = reference.iter().nth((seed % reference.len().max(1) as u64) as usize) {
                assert!(set.remove(&k));
                reference.remove(&k);
            }
            assert_eq!(set.len(), reference.len());
            let probe = ((seed >> 50) % 2, (seed >> 40) % 64 * 512, 0, 0);
            assert_eq!(set.first_from(probe), reference.range(probe..).next().copied());
            assert!(set.from(probe).copied().eq(reference.range(probe..).copied()));
            assert!(set.before_rev(probe).copied().eq(reference.range(..probe).rev().copied()));
        }
        assert!(set.iter().copied().eq(reference.iter().copied()));
        assert!(matches!(set, OrderedSet::Large(_)), "grew into a tree");
        for k in std::mem::take(&mut reference) {
            assert!(set.remove(&k));
        }
        assert!(matches!(set, OrderedSet::Small(ref v) if v.is_empty()), "shrunk back to a vector");
    }
}
