//! The allocator against the figures PyTorch's own tests and documentation state, and its
//! invariants under random programs.

use super::*;
use crate::device::SimDevice;
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn caching(settings: &str, total: u64) -> Caching {
    let s = Settings::parse(settings).expect("settings");
    Caching::new(s, CachingOptions::new(0), Box::new(SimDevice::new(total, 0)))
}

fn alloc(c: &mut Caching, bytes: u64) -> u64 {
    c.allocate(bytes, 0, Meta::default()).expect("allocation")
}

fn reserved(c: &Caching) -> u64 {
    c.device_stats().reserved_bytes.all.current
}

fn allocated(c: &Caching) -> u64 {
    c.device_stats().allocated_bytes.all.current
}

#[test]
fn small_requests_take_512_byte_blocks_of_a_2_mib_segment() {
    // test_cuda.py's memory_allocated checks: one byte holds 512, the segment is 2 MiB.
    let mut c = caching("", 8 * GIB);
    let a = alloc(&mut c, 1);
    assert_eq!(allocated(&c), 512);
    assert_eq!(reserved(&c), 2 * MIB);
    let b = alloc(&mut c, 513);
    assert_eq!(b, a + 512, "the next block follows in the same segment");
    assert_eq!(allocated(&c), 512 + 1024);
    assert_eq!(c.device_stats().requested_bytes.all.current, 514);
    assert_eq!(c.device_stats().segment.small.current, 1);
    c.free(a, 0).unwrap();
    c.free(b, 0).unwrap();
    assert_eq!(allocated(&c), 0);
    assert_eq!(reserved(&c), 2 * MIB, "the cache keeps the segment");
    c.empty_cache(0);
    assert_eq!(reserved(&c), 0);
    c.check().unwrap();
}

#[test]
fn large_requests_take_20_mib_segments_or_their_size_in_2_mib_steps() {
    let mut c = caching("", 8 * GIB);
    let a = alloc(&mut c, 1_500_000);
    assert_eq!(reserved(&c), 20 * MIB);
    assert_eq!(c.allocated_size(a), Some(1_500_160), "rounded to 512");
    // The rest of the segment is split off and serves the next request.
    let b = alloc(&mut c, 5 * MIB);
    assert_eq!(b, a + 1_500_160);
    assert_eq!(reserved(&c), 20 * MIB);
    // 10 MiB and more: a segment of the size rounded up to 2 MiB.
    let d = alloc(&mut c, 25_690_112);
    assert_eq!(reserved(&c), 20 * MIB + 27_262_976);
    assert_eq!(c.allocated_size(d), Some(25_690_112), "the 1.5 MiB tail is split off");
    c.check().unwrap();
}

#[test]
fn a_tail_of_at_most_1_mib_stays_in_the_large_block() {
    let mut c = caching("", 8 * GIB);
    // 19.5 MiB in a 20 MiB segment: 0.5 MiB remains, not split; the block is 20 MiB.
    let a = alloc(&mut c, 19 * MIB + MIB / 2);
    assert_eq!(c.allocated_size(a), Some(20 * MIB));
    assert_eq!(allocated(&c), 20 * MIB);
    assert_eq!(c.device_stats().requested_bytes.all.current, 19 * MIB + MIB / 2);
    // 9 MiB in a 20 MiB segment: 11 MiB remain and are split off.
    let b = alloc(&mut c, 9 * MIB);
    assert_eq!(c.allocated_size(b), Some(9 * MIB));
    assert_eq!(c.device_stats().inactive_split_bytes.all.current, 11 * MIB);
    c.check().unwrap();
}

#[test]
fn best_fit_by_size_then_address_and_only_on_the_same_stream() {
    let mut c = caching("", 8 * GIB);
    let big = alloc(&mut c, 12 * MIB);
    let small = alloc(&mut c, 11 * MIB);
    c.free(big, 0).unwrap();
    c.free(small, 0).unwrap();
    // 10.5 MiB fits both cached segments (12 and 12 MiB, rounded to 2 MiB): the lower address.
    let x = alloc(&mut c, 10 * MIB + MIB / 2);
    assert_eq!(x, big.min(small));
    // Another stream never takes the other cached segment.
    let before = reserved(&c);
    let y = c.allocate(10 * MIB + MIB / 2, 7, Meta::default()).unwrap();
    assert_ne!(y, big.max(small));
    assert_eq!(reserved(&c), before + 12 * MIB);
    c.check().unwrap();
}

#[test]
fn max_split_size_keeps_oversize_blocks_for_oversize_requests() {
    let mut c = caching("max_split_size_mb:64", 8 * GIB);
    let a = alloc(&mut c, 100 * MIB);
    c.free(a, 0).unwrap();
    // A 30 MiB request does not take the cached 100 MiB block.
    let b = alloc(&mut c, 30 * MIB);
    assert_ne!(b, a);
    assert_eq!(reserved(&c), 100 * MIB + 30 * MIB);
    // 90 MiB may take it (100 < 90 + 20), unsplit.
    let d = alloc(&mut c, 90 * MIB);
    assert_eq!(d, a);
    assert_eq!(c.allocated_size(d), Some(100 * MIB));
    assert_eq!(c.device_stats().oversize_allocations.current, 1);
    c.free(d, 0).unwrap();
    // 70 MiB may not (100 >= 70 + 20): a new segment.
    let e = alloc(&mut c, 70 * MIB);
    assert_ne!(e, a);
    c.check().unwrap();
}

#[test]
fn roundup_power2_divisions_round_block_sizes() {
    let mut c = caching("roundup_power2_divisions:4", 8 * GIB);
    let a = alloc(&mut c, 84 * MIB);
    assert_eq!(c.allocated_size(a), Some(96 * MIB));
    assert_eq!(reserved(&c), 96 * MIB);
}

#[test]
fn record_stream_keeps_a_freed_block_pending_until_the_stream_passes() {
    let mut c = caching("", 8 * GIB);
    let a = alloc(&mut c, 4096);
    assert!(c.record_stream(a, 5));
    c.free(a, 0).unwrap();
    assert_eq!(allocated(&c), 0, "allocated drops at free()");
    assert_eq!(c.device_stats().active_bytes.all.current, 4096, "active until the event completes");
    assert_eq!(c.pending_frees().collect::<Vec<_>>(), vec![a]);
    let b = alloc(&mut c, 4096);
    assert_ne!(b, a, "a pending block is not reused");
    assert!(c.event_completed(a, 1));
    assert_eq!(c.device_stats().active_bytes.all.current, 4096);
    let d = alloc(&mut c, 4096);
    assert_eq!(d, a, "back in the pool: the lowest address fits first");
    c.check().unwrap();
}

#[test]
fn the_device_saying_no_releases_the_cache_and_retries() {
    let mut c = caching("", 100 * MIB);
    let a = alloc(&mut c, 40 * MIB);
    let b = alloc(&mut c, 40 * MIB);
    c.free(a, 0).unwrap();
    // 50 MiB: no cached block, the device has 20 MiB left. The cached 40 MiB goes back.
    let d = alloc(&mut c, 50 * MIB);
    assert_eq!(reserved(&c), 90 * MIB);
    assert_eq!(c.device_stats().num_alloc_retries, 1);
    assert_eq!(c.device_stats().num_device_free, 1);
    // 20 MiB more cannot come from anywhere: the OOM with PyTorch's figures.
    let e = c.allocate(20 * MIB, 0, Meta::default()).unwrap_err();
    assert_eq!(e.rounded, 20 * MIB);
    let f = c.oom_figures()[0];
    assert_eq!((f.alloc_size, f.allocated, f.reserved, f.device_free), (20 * MIB, 90 * MIB, 90 * MIB, 10 * MIB));
    assert_eq!(c.device_stats().num_ooms, 1);
    c.free(b, 0).unwrap();
    c.free(d, 0).unwrap();
    c.check().unwrap();
}

#[test]
fn a_memory_fraction_limits_what_the_cache_may_hold() {
    // test_set_per_process_memory_fraction: half the device may be used, not more.
    let mut c = caching("", 1000 * MIB);
    c.set_memory_fraction(0.5);
    assert_eq!(c.allowed(), Some(500 * MIB));
    let a = alloc(&mut c, 400 * MIB);
    let e = c.allocate(120 * MIB, 0, Meta::default()).unwrap_err();
    assert_eq!(c.oom_figures()[0].allowed, Some(500 * MIB));
    assert_eq!(e.pool_bytes, 400 * MIB);
    c.free(a, 0).unwrap();
    // The cached 400 MiB serves 120 MiB on its stream; on another stream it is released by
    // the retry chain and 150 MiB fits.
    assert_eq!(alloc(&mut c, 120 * MIB), a);
    c.free(a, 0).unwrap();
    c.allocate(150 * MIB, 1, Meta::default()).unwrap();
    assert_eq!(reserved(&c), 150 * MIB);
}

#[test]
fn garbage_collection_releases_old_cached_segments_before_asking_the_device() {
    let mut c = caching("garbage_collection_threshold:0.5", 1000 * MIB);
    c.set_memory_fraction(1.0);
    let a = alloc(&mut c, 300 * MIB);
    let b = alloc(&mut c, 300 * MIB);
    c.free(a, 0).unwrap();
    c.free(b, 0).unwrap();
    // 610 MiB cached > 500 MiB threshold: a 350 MiB request finds no block and GC runs.
    alloc(&mut c, 350 * MIB);
    // Both cached segments are as old as the average: both go, though one was enough.
    assert_eq!(c.device_stats().num_device_free, 2);
    assert_eq!(reserved(&c), 350 * MIB);
    c.check().unwrap();
}

#[test]
fn expandable_segments_map_pages_of_one_reservation() {
    let mut c = caching("expandable_segments:True", 8 * GIB);
    let a = alloc(&mut c, 30 * MIB);
    // Two 20 MiB pages mapped for 30 MiB; the reservation is 9/8 of the device.
    assert_eq!(reserved(&c), 40 * MIB);
    let b = alloc(&mut c, 30 * MIB);
    assert_eq!(b, a + 30 * MIB, "the next request continues the same range");
    assert_eq!(reserved(&c), 60 * MIB);
    let segs = c.segments();
    assert_eq!(segs.len(), 1, "one contiguous mapped range is one segment");
    assert_eq!(segs[0].size, 60 * MIB);
    assert!(segs[0].expandable);
    c.free(b, 0).unwrap();
    c.empty_cache(0);
    // Whole free pages go back; the page partly under `a` stays mapped.
    assert_eq!(reserved(&c), 40 * MIB);
    c.free(a, 0).unwrap();
    c.empty_cache(0);
    assert_eq!(reserved(&c), 0);
    assert!(c.segments().is_empty());
    c.check().unwrap();
}

#[test]
fn freeing_what_is_not_allocated_is_refused_without_change() {
    let mut c = caching("", GIB);
    let a = alloc(&mut c, 4096);
    c.free(a, 0).unwrap();
    assert_eq!(c.free(a, 0), Err(FreeError::NotAllocated(a)));
    assert_eq!(c.free(a + 512, 0), Err(FreeError::NotAllocated(a + 512)));
    c.check().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64, u64),
    Free(usize),
    RecordStream(usize, u64),
    Complete(usize),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop_oneof![1u64..2048, 1u64..(2 * MIB), (MIB)..(40 * MIB)], 0u64..3).prop_map(|(b, s)| Op::Alloc(b, s)),
        3 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 0u64..3).prop_map(|(i, s)| Op::RecordStream(i, s)),
        1 => any::<usize>().prop_map(Op::Complete),
        1 => Just(Op::EmptyCache),
    ]
}

fn run_program(settings: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut c = caching(settings, 256 * MIB);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut pending: Vec<u64> = Vec::new();
    for op in ops {
        match *op {
            Op::Alloc(bytes, stream) => {
                if let Ok(a) = c.allocate(bytes, stream, Meta::default()) {
                    // No two live blocks overlap.
                    let size = c.allocated_size(a).unwrap_or(0);
                    for &(b, _) in &live {
                        let bs = c.allocated_size(b).unwrap_or(0);
                        prop_assert!(a + size <= b || b + bs <= a, "{a:#x}+{size} overlaps {b:#x}+{bs}");
                    }
                    prop_assert!(size >= bytes);
                    live.push((a, bytes));
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let (a, _) = live.swap_remove(i % live.len());
                c.free(a, 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
                if c.pending_frees().any(|p| p == a) {
                    pending.push(a);
                }
            }
            Op::RecordStream(i, s) if !live.is_empty() => {
                c.record_stream(live[i % live.len()].0, s);
            }
            Op::Complete(i) if !pending.is_empty() => {
                let a = pending[i % pending.len()];
                c.event_completed(a, 0);
                if !c.pending_frees().any(|p| p == a) {
                    pending.retain(|&p| p != a);
                }
            }
            Op::EmptyCache => {
                c.empty_cache(0);
                pending.clear();
            }
            _ => {}
        }
        c.check().map_err(|e| TestCaseError::fail(e.0))?;
        let requested: u64 = live.iter().map(|l| l.1).sum();
        prop_assert!(c.device_stats().allocated_bytes.all.current >= requested);
        prop_assert!(c.device_stats().reserved_bytes.all.current <= 256 * MIB);
    }
    for (a, _) in live {
        c.free(a, 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    c.empty_cache(0);
    prop_assert_eq!(c.device_stats().reserved_bytes.all.current, 0, "everything goes back");
    prop_assert_eq!(c.device_stats().active_bytes.all.current, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn invariants_hold_under_random_programs(ops in prop::collection::vec(op(), 1..120)) {
        run_program("", &ops)?;
    }

    #[test]
    fn invariants_hold_with_max_split_and_rounding(ops in prop::collection::vec(op(), 1..120)) {
        run_program("max_split_size_mb:24,roundup_power2_divisions:4", &ops)?;
    }

    #[test]
    fn invariants_hold_with_expandable_segments(ops in prop::collection::vec(op(), 1..120)) {
        run_program("expandable_segments:True", &ops)?;
    }
}

#[test]
fn a_device_of_a_hundred_petabytes_costs_memory_by_what_is_mapped() {
    // A page table for a reservation of 9/8 of 128 PiB would take 77 GB: the allocation
    // aborted before the first tensor.
    let mut c = caching("expandable_segments:True", 1 << 57);
    let a = alloc(&mut c, 8 << 20);
    assert_eq!(reserved(&c), 20 << 20, "one page of the large pool");
    let b = alloc(&mut c, 300 << 20);
    c.free(a, 0).unwrap();
    c.free(b, 0).unwrap();
    c.empty_cache(0);
    assert_eq!(reserved(&c), 0);
    c.check().unwrap();
}

#[test]
fn requests_near_two_to_the_64_fail_as_out_of_memory() {
    for settings in ["", "expandable_segments:True", "roundup_power2_divisions:4"] {
        for total in [1 << 30, oomscope_base::size::MAX_DEVICE_BYTES] {
            let mut c = caching(settings, total);
            for bytes in [u64::MAX, u64::MAX - 511, 1 << 63, (1 << 63) + 1, total + 1] {
                assert!(c.allocate(bytes, 0, Meta::default()).is_err(), "{settings} {bytes}");
                c.check().unwrap();
            }
            alloc(&mut c, 1 << 20);
        }
    }
}
