//! The allocator's invariants, checked from scratch. Tests call this after every step;
//! it walks everything, so it is not for the hot path.

use super::{Bfc, NO_BIN, NONE, NUM_BINS, bin_for_size};
use std::collections::HashSet;

impl Bfc {
    /// Verifies every structural invariant and returns the first one broken:
    /// regions are sorted and disjoint; chunks tile each region through consistent
    /// `prev`/`next` links; no two free neighbours are left unmerged; the bins hold exactly
    /// the free chunks, each in the bin of its size; the in-use map holds exactly the in-use
    /// chunks; handles are either live or recycled, never both; the statistics equal what
    /// the chunks say.
    pub fn check_invariants(&self) -> Result<(), oomscope_base::Problem> {
        let mut live = HashSet::new();
        let mut free_keys = HashSet::new();
        let (mut in_use_bytes, mut in_use_count, mut pool) = (0u64, 0usize, 0u64);
        let mut prev_end = 0u64;
        for (i, r) in self.regions.iter().enumerate() {
            if r.addr < prev_end {
                return Err(oomscope_base::problem!("region {i} at {:#x} overlaps or is out of order", r.addr));
            }
            prev_end = r.addr + r.size;
            pool += r.size;
            let (mut h, mut expect_addr, mut prev, mut prev_free) = (r.first, r.addr, NONE, false);
            while h != NONE {
                let c = self.chunks.get(h as usize).ok_or(format!("handle {h} out of range"))?;
                if !live.insert(h) {
                    return Err(oomscope_base::problem!("handle {h} appears twice"));
                }
                if c.addr != expect_addr {
                    return Err(oomscope_base::problem!(
                        "chunk {h} at {:#x}, expected {expect_addr:#x}: chunks do not tile",
                        c.addr
                    ));
                }
                if c.size == 0 || c.size % 256 != 0 {
                    return Err(oomscope_base::problem!("chunk {h} has size {}", c.size));
                }
                if c.prev != prev {
                    return Err(oomscope_base::problem!("chunk {h}: prev is {}, expected {prev}", c.prev));
                }
                if c.in_use() {
                    in_use_bytes += c.size;
                    in_use_count += 1;
                    if c.bin != NO_BIN {
                        return Err(oomscope_base::problem!("in-use chunk {h} is in bin {}", c.bin));
                    }
                    if self.in_use.get(&c.addr) != Some(&h) {
                        return Err(oomscope_base::problem!(
                            "in-use chunk {h} at {:#x} is missing from the address map",
                            c.addr
                        ));
                    }
                    if c.requested == 0 || c.requested > c.size {
                        return Err(oomscope_base::problem!(
                            "in-use chunk {h}: requested {} for size {}",
                            c.requested,
                            c.size
                        ));
                    }
                    prev_free = false;
                } else {
                    if prev_free {
                        return Err(oomscope_base::problem!(
                            "free chunk {h} at {:#x} follows a free chunk: unmerged",
                            c.addr
                        ));
                    }
                    let bin = bin_for_size(c.size);
                    if c.bin as isize != bin as isize {
                        return Err(oomscope_base::problem!(
                            "free chunk {h} of size {} has bin {}, expected {bin}",
                            c.size,
                            c.bin
                        ));
                    }
                    free_keys.insert((bin, (c.size, c.addr, h)));
                    prev_free = true;
                }
                expect_addr = c.addr + c.size;
                prev = h;
                h = c.next;
            }
            if expect_addr != r.addr + r.size {
                return Err(oomscope_base::problem!(
                    "region {i} chunks end at {expect_addr:#x}, region ends at {prev_end:#x}"
                ));
            }
        }
        let mut binned = 0usize;
        for bin in 0..NUM_BINS {
            for key in self.bins.iter(bin) {
                binned += 1;
                if !free_keys.contains(&(bin, *key)) {
                    return Err(oomscope_base::problem!(
                        "bin {bin} holds {key:?}, which is not a free chunk of that bin"
                    ));
                }
            }
            if (self.bins.nonempty_mask() >> bin & 1 == 1) != (self.bins.len(bin) > 0) {
                return Err(oomscope_base::problem!("bin {bin}: non-empty mask is wrong"));
            }
        }
        if binned != free_keys.len() {
            return Err(oomscope_base::problem!("{} free chunks but {binned} binned", free_keys.len()));
        }
        if self.in_use.len() != in_use_count {
            return Err(oomscope_base::problem!(
                "address map has {} entries for {in_use_count} in-use chunks",
                self.in_use.len()
            ));
        }
        let mut h = self.free_handles;
        let mut recycled = 0usize;
        while h != NONE {
            if live.contains(&h) {
                return Err(oomscope_base::problem!("handle {h} is both live and recycled"));
            }
            recycled += 1;
            if recycled > self.chunks.len() {
                return Err("recycled-handle list has a cycle".into());
            }
            h = self.chunks[h as usize].next;
        }
        if live.len() + recycled != self.chunks.len() {
            return Err(oomscope_base::problem!(
                "{} handles, {} live + {recycled} recycled",
                self.chunks.len(),
                live.len()
            ));
        }
        let s = self.stats();
        if s.bytes_in_use != in_use_bytes {
            return Err(oomscope_base::problem!(
                "stats say {} bytes in use, chunks say {in_use_bytes}",
                s.bytes_in_use
            ));
        }
        if s.pool_bytes != pool {
            return Err(oomscope_base::problem!("stats say pool {}, regions say {pool}", s.pool_bytes));
        }
        if s.pool_bytes > self.opts.limit {
            return Err(oomscope_base::problem!("pool {} exceeds the limit {}", s.pool_bytes, self.opts.limit));
        }
        if s.peak_bytes_in_use < s.bytes_in_use || s.peak_pool_bytes < s.pool_bytes {
            return Err("a peak is below the current value".into());
        }
        self.rec.peak.agrees_with(s.bytes_in_use, s.peak_bytes_in_use)
    }
}
