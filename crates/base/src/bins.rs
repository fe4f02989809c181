//! The bin arithmetic TensorFlow's BFC allocator and its OOM report share: 256-byte
//! rounding and the 21 power-of-two bins. The allocator (`oomscope-core`), the log importer
//! and the TF text renderer all count chunks into bins the same way.

/// log2 of the minimum allocation unit.
pub const MIN_ALLOCATION_BITS: u32 = 8;
/// Every allocation is a multiple of 256 bytes.
pub const MIN_ALLOCATION_SIZE: u64 = 1 << MIN_ALLOCATION_BITS;
/// Bin `b` holds free chunks of `256 << b` up to `(256 << (b + 1)) - 1` bytes; the last holds
/// everything larger.
pub const NUM_BINS: usize = 21;

/// `256 * ceil(n / 256)`, saturating for requests no device can hold.
#[inline]
pub fn rounded_bytes(n: u64) -> u64 {
    n.div_ceil(MIN_ALLOCATION_SIZE).saturating_mul(MIN_ALLOCATION_SIZE)
}

/// `min(20, floor(log2(max(size, 256) >> 8)))`.
#[inline]
pub fn bin_for_size(size: u64) -> usize {
    let v = size.max(MIN_ALLOCATION_SIZE) >> MIN_ALLOCATION_BITS;
    (63 - v.leading_zeros() as usize).min(NUM_BINS - 1)
}

/// Smallest chunk size of bin `bin` (`256 << bin`).
#[inline]
pub fn bin_size(bin: usize) -> u64 {
    MIN_ALLOCATION_SIZE << bin
}
