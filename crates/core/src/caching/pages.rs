//! The pages of an expandable segment that have memory behind them, as runs of page
//! numbers. A reservation spans 9/8 of the device; a table with a slot per page would cost
//! memory in proportion to the device (a simulated device of 128 PiB: 77 GB, an abort
//! inside the user's process), runs cost memory in proportion to what is mapped and time in
//! proportion to the runs touched.

use std::collections::BTreeMap;

/// Mapped pages: disjoint, non-adjacent runs `start -> end` (end exclusive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PageRuns(BTreeMap<u64, u64>);

impl PageRuns {
    /// The mapped runs within `[first, last)`, clipped to it, in order.
    pub(super) fn runs(&self, first: u64, last: u64) -> Vec<(u64, u64)> {
        let before = self.0.range(..first).next_back().filter(|&(_, &e)| e > first).map(|(&s, &e)| (s, e));
        before
            .into_iter()
            .chain(self.0.range(first..last).map(|(&s, &e)| (s, e)))
            .map(|(s, e)| (s.max(first), e.min(last)))
            .collect()
    }

    /// The runs within `[first, last)` that are not mapped, in order.
    pub(super) fn gaps(&self, first: u64, last: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = first;
        for (s, e) in self.runs(first, last) {
            if s > at {
                out.push((at, s));
            }
            at = e;
        }
        if at < last {
            out.push((at, last));
        }
        out
    }

    /// Marks `[a, b)` mapped.
    pub(super) fn insert(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let (mut start, mut end) = (a, b);
        if let Some((&s, &e)) = self.0.range(..=a).next_back()
            && e >= a
        {
            start = s;
            end = end.max(e);
        }
        let within: Vec<(u64, u64)> = self.0.range(start..=end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in within {
            self.0.remove(&s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    /// Marks `[a, b)` unmapped.
    pub(super) fn remove(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let starts: Vec<u64> = self.0.range(..b).rev().take_while(|&(_, &e)| e > a).map(|(&s, _)| s).collect();
        for s in starts {
            let e = self.0.remove(&s).unwrap_or(s);
            if s < a {
                self.0.insert(s, a);
            }
            if e > b {
                self.0.insert(b, e);
            }
        }
    }

    /// Whether page `i` is mapped.
    #[cfg(test)]
    pub(super) fn contains(&self, i: u64) -> bool {
        self.0.range(..=i).next_back().is_some_and(|(_, &e)| e > i)
    }

    /// Mapped pages in all.
    pub(super) fn count(&self) -> u64 {
        self.0.iter().map(|(s, e)| e - s).sum()
    }

    /// The runs are disjoint, non-empty and not adjacent (adjacent runs are one).
    pub(super) fn check(&self) -> Result<(), oomscope_base::Problem> {
        let mut prev_end: Option<u64> = None;
        for (&s, &e) in &self.0 {
            if s >= e {
                return Err(oomscope_base::problem!("empty page run {s}..{e}"));
            }
            if prev_end.is_some_and(|p| p >= s) {
                return Err(oomscope_base::problem!("page run {s}..{e} touches the one before it"));
            }
            prev_end = Some(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runs_merge_and_split() {
        let mut p = PageRuns::default();
        p.insert(2, 4);
        p.insert(6, 8);
        assert_eq!(p.gaps(0, 10), vec![(0, 2), (4, 6), (8, 10)]);
        p.insert(4, 6);
        assert_eq!(p.runs(0, 10), vec![(2, 8)]);
        p.remove(3, 5);
        assert_eq!(p.runs(0, 10), vec![(2, 3), (5, 8)]);
        assert_eq!(p.runs(6, 7), vec![(6, 7)]);
        assert_eq!(p.count(), 4);
        p.check().unwrap();
    }

    #[test]
    fn a_huge_reservation_costs_nothing_until_mapped() {
        let mut p = PageRuns::default();
        let pages = 1u64 << 40;
        assert_eq!(p.gaps(0, pages), vec![(0, pages)]);
        p.insert(0, pages);
        p.remove(1, pages - 1);
        assert_eq!(p.runs(0, pages), vec![(0, 1), (pages - 1, pages)]);
    }

    proptest! {
        /// Against a page table: any sequence of maps and unmaps gives the same pages, and
        /// gaps and runs partition every range.
        #[test]
        fn same_as_a_table(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 0u64..16), 0..60),
                           q in (0u64..64, 0u64..64)) {
            let mut p = PageRuns::default();
            let mut table = [false; 80];
            for (map, a, n) in ops {
                let b = a + n;
                if map { p.insert(a, b) } else { p.remove(a, b) }
                for t in &mut table[a as usize..b as usize] {
                    *t = map;
                }
                p.check().unwrap();
            }
            for (i, &t) in table.iter().enumerate() {
                prop_assert_eq!(p.contains(i as u64), t);
            }
            let (first, last) = (q.0.min(q.1), q.0.max(q.1));
            let mut seen = [None; 80];
            for (s, e) in p.runs(first, last) {
                for i in s..e { seen[i as usize] = Some(true); }
            }
            for (s, e) in p.gaps(first, last) {
                for i in s..e { prop_assert!(seen[i as usize].is_none()); seen[i as usize] = Some(false); }
            }
            for i in first..last {
                prop_assert_eq!(seen[i as usize], Some(table[i as usize]));
            }
        }
    }
}
