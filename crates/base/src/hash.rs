//! A fast, non-cryptographic hasher for the allocator's maps (chunk addresses, interned
//! names). The keys are the process's own data, not an attacker's, so SipHash's DoS
//! resistance buys nothing and costs tens of nanoseconds per allocation.
//!
//! FxHash's word step (rotate, xor, multiply), finished with a rotation that brings the
//! well-mixed high bits down: chunk addresses are multiples of 256, and without it their
//! low hash bits, which pick the bucket, would be zero.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0xf135_7aea_2e62_a9c5;

#[derive(Default, Clone, Copy, Debug)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_buckets() {
        // 4096 addresses 256 bytes apart land in most of 4096 buckets by their low bits.
        let b = BuildHasherDefault::<FastHasher>::default();
        let mut used = std::collections::HashSet::new();
        for i in 0..4096u64 {
            used.insert(b.hash_one(0x7f00_0000_0000u64 + i * 256) & 4095);
        }
        assert!(used.len() > 2500, "only {} buckets used", used.len());
    }

    #[test]
    fn strings_that_differ_hash_differently() {
        let b = BuildHasherDefault::<FastHasher>::default();
        let h = |s: &str| b.hash_one(s);
        assert_ne!(h("model/layer1/Conv2D"), h("model/layer2/Conv2D"));
        assert_ne!(h("a"), h("a\0"));
        assert_eq!(h("same"), h("same"));
    }
}
