//! Random alloc/free sequences, checked after every step against the allocator's own
//! invariants (chunks tile regions, no unmerged free neighbours, bins hold exactly the free
//! chunks, stats equal the chunks) and against an outside model: live allocations never
//! overlap, each is at least its request, and the byte counts add up.

use crate::bfc::{Bfc, Options};
use crate::device::SimDevice;
use crate::record::Meta;
use oomscope_format::{self as dump, Source};
use oomscope_report as render;
use proptest::prelude::*;
use std::path::Path;

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64),
    /// Free the live allocation at this index (modulo the number live).
    Free(usize),
    Step,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..4096,
        3 => 4096u64..(1 << 20),
        2 => (1u64 << 20)..(8 << 20),
        1 => Just(256u64),
        1 => (8u64 << 20)..(40 << 20),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => size().prop_map(Op::Alloc),
            4 => any::<usize>().prop_map(Op::Free),
            1 => Just(Op::Step),
        ],
        1..160,
    )
}

#[derive(Clone, Debug)]
struct Config {
    limit: u64,
    allow_growth: bool,
    gc: bool,
    others: u64,
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![Just(16u64 << 20), Just(48 << 20), Just(100 << 20)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0u64), Just(20 << 20)],
    )
        .prop_map(|(limit, allow_growth, gc, others)| Config { limit, allow_growth, gc, others })
}

fn run(cfg: &Config, ops: &[Op]) -> Result<Bfc, TestCaseError> {
    let mut o = Options::new(cfg.limit);
    o.allow_growth = cfg.allow_growth;
    o.garbage_collection = cfg.gc;
    o.history = 64;
    // The device is the limit plus whatever others hold; others may squeeze the pool.
    let device = SimDevice::new(cfg.limit + cfg.others / 2, cfg.others);
    let mut b = Bfc::new(o, Box::new(device));
    let op_id = b.names_mut().ops.intern("prop/op");
    let mut live: Vec<(u64, u64)> = Vec::new(); // (address, requested)
    let (mut successes, mut step) = (0u64, 0i64);
    for op in ops {
        match *op {
            Op::Alloc(n) => {
                let meta = Meta { op: op_id, step, ..Meta::default() };
                if let Ok(addr) = b.allocate(n, meta) {
                    successes += 1;
                    live.push((addr, n));
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let (addr, _) = live.swap_remove(i % live.len());
                prop_assert!(b.free(addr, 0).is_ok());
                prop_assert!(b.free(addr, 0).is_err(), "a double free is refused");
            }
            Op::Free(_) => {}
            Op::Step => {
                step += 1;
                b.mark_step(step, 0);
            }
        }
        if let Err(e) = b.check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        // The outside view: live allocations are disjoint and hold their requests.
        let mut spans: Vec<(u64, u64)> = live
            .iter()
            .map(|&(a, req)| {
                let size = b.allocated_size(a).expect("live allocation is known");
                assert!(size >= req && size.is_multiple_of(256));
                assert_eq!(b.requested_size(a), Some(req));
                (a, size)
            })
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", w);
        }
        let s = b.stats();
        prop_assert_eq!(s.bytes_in_use, spans.iter().map(|s| s.1).sum::<u64>());
        prop_assert_eq!(s.num_allocs, successes);
        prop_assert!(s.pool_bytes <= cfg.limit);
        prop_assert!(s.largest_free_block <= s.free_bytes);
        prop_assert!((0.0..=1.0).contains(&s.fragmentation));
    }
    Ok(b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_step(cfg in config(), ops in ops()) {
        run(&cfg, &ops)?;
    }

    #[test]
    fn dumps_round_trip_and_render_the_same(cfg in config(), ops in ops()) {
        let b = run(&cfg, &ops)?;
        let d = b.snapshot(Source { kind: oomscope_format::SourceKind::Replay, ..Source::default() });
        let text = render::render(&d, render::Format::Json);
        let back = dump::read_str(Path::new("mem.json"), &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Compared whole, reported briefly: a dump's Debug output is long.
        prop_assert!(back == d, "the dump read back differs from the one written");
        prop_assert_eq!(render::tf::render(&back), render::tf::render(&d));
        // Bins in the dump agree with the chunks listed in it.
        let chunks: u64 = d.regions.iter().map(|r| r.chunks.len() as u64).sum();
        prop_assert_eq!(d.bins.iter().map(|b| b.total_chunks).sum::<u64>(), chunks);
        prop_assert_eq!(d.usage_total(), d.stats.bytes_in_use);
    }
}
