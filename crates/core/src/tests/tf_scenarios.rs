//! TensorFlow's own BFC unit scenarios (`bfc_allocator_test.cc`, as listed at the end of
//! `../shared/reference/tf-bfc.md`), with their exact numbers, plus the device back-off
//! sequence from seed 000's log.

use crate::bfc::{Bfc, Options};
use crate::device::SimDevice;
use crate::record::Meta;
use oomscope_format::Source;
use oomscope_format::Stats;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn bfc(limit: u64, allow_growth: bool) -> Bfc {
    let mut o = Options::new(limit);
    o.allow_growth = allow_growth;
    Bfc::new(o, Box::new(SimDevice::new(limit, 0)))
}

fn alloc(b: &mut Bfc, n: u64) -> u64 {
    let a = b.allocate(n, Meta::default()).unwrap_or_else(|f| panic!("allocating {n} failed: {f:?}"));
    b.check_invariants().unwrap();
    a
}

fn free(b: &mut Bfc, a: u64) {
    b.free(a, 0).unwrap();
    b.check_invariants().unwrap();
}

/// (num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size), as TF's tests check.
fn tf_stats(b: &Bfc) -> (u64, u64, u64, u64) {
    let Stats { num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size, .. } = b.stats();
    (num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size)
}

#[test]
fn one_allocation_of_each_size_below_1024() {
    let mut b = bfc(GIB, false);
    let addrs: Vec<u64> = (1..1024).map(|n| alloc(&mut b, n)).collect();
    assert_eq!(tf_stats(&b), (1023, 654_336, 654_336, 1024));
    for a in addrs {
        free(&mut b, a);
    }
    assert_eq!(tf_stats(&b), (1023, 0, 654_336, 1024));
}

#[test]
fn repeated_rounds_reuse_the_first_address() {
    let mut b = bfc(GIB, false);
    let first = alloc(&mut b, 4096);
    free(&mut b, first);
    assert_eq!(tf_stats(&b), (1, 0, 4096, 4096));
    for _ in 0..1024 {
        let addrs: Vec<u64> = [4096, 8_388_608, 16_384, 41_943_040].iter().map(|&n| alloc(&mut b, n)).collect();
        for a in addrs {
            free(&mut b, a);
        }
    }
    assert_eq!(tf_stats(&b), (4097, 0, 50_352_128, 41_943_040));
    assert_eq!(alloc(&mut b, 4096), first);
}

#[test]
fn four_bytes_take_256() {
    let mut b = bfc(GIB, false);
    let a = alloc(&mut b, 4);
    assert_eq!(b.requested_size(a), Some(4));
    assert_eq!(b.allocated_size(a), Some(256));
}

#[test]
fn zero_bytes_give_null_and_free_of_null_is_a_no_op() {
    let mut b = bfc(GIB, false);
    assert_eq!(b.allocate(0, Meta::default()), Ok(0));
    assert_eq!(b.free(0, 0), Ok(0));
    assert_eq!(tf_stats(&b), (0, 0, 0, 0));
}

#[test]
fn small_limit_refuses_a_large_request() {
    let mut b = bfc(2 * MIB, false);
    alloc(&mut b, 256);
    assert!(b.allocate(8 * MIB, Meta::default()).is_err());
    b.check_invariants().unwrap();
}

#[test]
fn two_chunks_in_each_of_the_first_five_bins() {
    let mut b = bfc(GIB, false);
    for i in 0..5 {
        alloc(&mut b, 256 << i);
        alloc(&mut b, 256 << i);
    }
    let d = b.snapshot(Source::default());
    for i in 0..5 {
        let bin = &d.bins[i];
        assert_eq!((bin.total_chunks, bin.chunks_in_use, bin.bytes_in_use), (2, 2, 2 * (256 << i)), "bin {i}");
        assert_eq!(bin.requested_in_use, 2 * (256 << i));
    }
}

#[test]
fn initial_region_size_with_and_without_growth() {
    assert_eq!(bfc(2 * GIB, true).curr_region_allocation_bytes(), 2_097_152);
    assert_eq!(bfc(2 * GIB, false).curr_region_allocation_bytes(), 2_147_483_648);
}

#[test]
fn growth_regions_double_and_a_fragmented_pool_fails() {
    let mut b = bfc(512 * MIB, true);
    let addrs: Vec<u64> = (0..128).map(|_| alloc(&mut b, 4 * MIB)).collect();
    for &a in &addrs[..127] {
        free(&mut b, a);
    }
    assert!(b.allocate(512 * MIB - 4 * MIB, Meta::default()).is_err());
    b.check_invariants().unwrap();
    let sizes: Vec<u64> = b.snapshot(Source::default()).regions.iter().map(|r| r.size / MIB).collect();
    assert_eq!(sizes, vec![4, 4, 8, 16, 32, 64, 128, 256]);
}

#[test]
fn a_request_over_the_limit_fails_and_the_allocator_goes_on() {
    let mut b = bfc(GIB, false);
    assert!(b.allocate(GIB + 1, Meta::default()).is_err());
    let a = alloc(&mut b, MIB);
    free(&mut b, a);
    alloc(&mut b, GIB);
}

#[test]
fn split_rule_keeps_a_small_remainder_inside() {
    let mut b = bfc(GIB, false);
    let a = alloc(&mut b, 600 * MIB);
    assert_eq!(b.allocated_size(a), Some(600 * MIB));
    assert_eq!(b.stats().largest_free_block, 424 * MIB);
    free(&mut b, a);
    let c = alloc(&mut b, 900 * MIB);
    // Less than twice the request, and the 124 MiB left is under the 128 MiB split limit.
    assert_eq!(b.allocated_size(c), Some(GIB));
    assert_eq!(b.requested_size(c), Some(900 * MIB));
}

#[test]
fn fragmentation_fraction_changes_the_split_limit() {
    let mut o = Options::new(GIB);
    o.fragmentation_fraction = 0.1; // ~102 MiB: the 124 MiB remainder is now split off
    let mut b = Bfc::new(o, Box::new(SimDevice::new(GIB, 0)));
    let c = alloc(&mut b, 900 * MIB);
    assert_eq!(b.allocated_size(c), Some(900 * MIB));
}

#[test]
fn device_refusals_back_off_in_float32_steps() {
    // Seed 000: an 11 GiB GTX 1080 Ti with the desktop holding part of it. TF asks for the
    // whole limit, is refused at 11.00G and 9.90G, and the third size fits.
    let limit = 11 * GIB;
    let free = 9_771_050_598; // 9.1 GiB
    let mut b = Bfc::new(Options::new(limit), Box::new(SimDevice::new(limit, limit - free)));
    alloc(&mut b, 1024);
    let d = b.snapshot(Source::default());
    let refused: Vec<u64> = d.refusals.iter().map(|r| r.bytes).collect();
    assert_eq!(refused, vec![11_811_160_064, 10_630_043_648]);
    assert_eq!(d.regions.len(), 1);
    assert_eq!(d.regions[0].size, 9_567_039_488);
    assert_eq!(b.stats().num_device_refusals, 2);

    // With less free memory the sequence goes on: 8610335744 is the fourth size.
    let mut b = Bfc::new(Options::new(limit), Box::new(SimDevice::new(limit, limit - 8_700_000_000)));
    alloc(&mut b, 1024);
    let d = b.snapshot(Source::default());
    let refused: Vec<u64> = d.refusals.iter().map(|r| r.bytes).collect();
    assert_eq!(refused, vec![11_811_160_064, 10_630_043_648, 9_567_039_488]);
    assert_eq!(d.regions[0].size, 8_610_335_744);
}

#[test]
fn back_off_gives_up_below_the_request_and_reports_refusals() {
    let limit = 4 * GIB;
    let mut b = Bfc::new(Options::new(limit), Box::new(SimDevice::new(limit, 3 * GIB)));
    let f = b.allocate(2 * GIB, Meta::default()).unwrap_err();
    assert_eq!(f.device_refusals.first(), Some(&(4 * GIB)));
    assert!(f.device_refusals.iter().all(|&r| r >= 2 * GIB), "stops once below the request");
    assert_eq!(f.device.free, GIB);
    b.check_invariants().unwrap();
}

#[test]
fn garbage_collection_returns_empty_regions_for_a_larger_one() {
    // Growth makes regions of 2, 4, 8 MiB...; freeing everything and asking for more than
    // any region holds works only when empty regions go back to the device.
    let limit = 64 * MIB;
    for gc in [false, true] {
        let mut o = Options::new(limit);
        o.allow_growth = true;
        o.garbage_collection = gc;
        let mut b = Bfc::new(o, Box::new(SimDevice::new(limit, 0)));
        let addrs: Vec<u64> = (0..30).map(|_| alloc(&mut b, 2 * MIB)).collect();
        for a in addrs {
            free(&mut b, a);
        }
        let result = b.allocate(40 * MIB, Meta::default());
        b.check_invariants().unwrap();
        assert_eq!(result.is_ok(), gc, "gc={gc}");
    }
}
