//! A TensorFlow program's variables in its allocator's dump. TF's BFC dump lists each chunk
//! by address and size only; the program's hook (Keras under `oomscope run`) lists the
//! model's weights and the optimizer's slots with their bytes ([`Variables`]). Each finds
//! its chunk by size: BFC serves a request of `n` bytes from a chunk of at least `n`
//! rounded up to 256, split off unless what is left would be no larger than it (a chunk is
//! kept whole only below twice the rounded size). Among the chunks a variable could be in,
//! the one of exactly its rounded size comes first, then the smallest, then the lowest
//! address; the weights choose first (made when the model was built, where BFC split its
//! fresh regions to the byte; the slots came later, into holes a step left). Chunks of the
//! same size cannot be told apart by the log, so which of them is the variable is a guess,
//! but the bytes of each kind are not: each variable takes one chunk its size fits, and a
//! chunk kept whole holds the variable's bytes (its `requested`) and slack.

use oomscope_format::feed::Variable;
use oomscope_format::{Dump, Kind, NodeUsage};

/// The node of the in-use chunks no variable took, in a dump named this way.
pub const UNNAMED: &str = "(not named: TensorFlow's allocator log names no op)";

/// Names the dump's in-use chunks that no op names after the variables that fit them; the
/// number named. When the dump had no usage by node (a TF log's never has), it is ranked
/// from the chunks, the rest as [`UNNAMED`].
pub fn name_variables(d: &mut Dump, variables: &[Variable]) -> usize {
    // (region, chunk, size, address) of each in-use chunk without a name.
    let mut free: Vec<(usize, usize, u64, u64)> = Vec::new();
    for (ri, r) in d.regions.iter().enumerate() {
        for (ci, c) in r.chunks.iter().enumerate() {
            if c.in_use && c.op.is_none() {
                free.push((ri, ci, c.size, c.address));
            }
        }
    }
    let mut order: Vec<&Variable> = variables.iter().filter(|v| v.bytes > 0).collect();
    // The weights first: made when the model was built, in regions BFC split to the byte,
    // where the optimizer's slots came later, into the holes a step left. Then the largest
    // first: a small variable never takes the chunk a larger one needs.
    order.sort_by(|a, b| {
        (a.kind != Kind::Weight)
            .cmp(&(b.kind != Kind::Weight))
            .then(b.bytes.cmp(&a.bytes))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut named = 0;
    for v in order {
        let rounded = v.bytes.div_ceil(256).saturating_mul(256);
        let best = free
            .iter()
            .enumerate()
            .filter(|&(_, &(_, _, size, _))| size >= rounded && size < rounded.saturating_mul(2))
            .min_by_key(|&(_, &(_, _, size, address))| (size != rounded, size, address))
            .map(|(i, _)| i);
        let Some(i) = best else { continue };
        let (ri, ci, _, _) = free.swap_remove(i);
        let c = &mut d.regions[ri].chunks[ci];
        c.op = Some(v.name.clone());
        c.kind = Some(v.kind);
        c.requested = v.bytes;
        named += 1;
    }
    if named > 0 && d.usage_by_node.is_empty() {
        d.usage_by_node = NodeUsage::rank(
            d.regions.iter().flat_map(|r| &r.chunks).filter(|c| c.in_use).map(|c| {
                (c.op.as_deref().unwrap_or(UNNAMED), c.size, if c.op.is_some() { c.requested } else { c.size })
            }),
            str::to_string,
        );
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{ChunkInfo, RegionInfo};

    fn chunk(address: u64, size: u64, in_use: bool) -> ChunkInfo {
        ChunkInfo { address, size, requested: size, in_use, ..ChunkInfo::default() }
    }

    fn var(name: &str, bytes: u64, kind: Kind) -> Variable {
        Variable { name: name.into(), bytes, kind }
    }

    #[test]
    fn each_variable_takes_one_chunk_its_size_fits() {
        let mut d = Dump {
            regions: vec![RegionInfo {
                address: 0,
                size: 1 << 20,
                chunks: vec![
                    chunk(0, 256, true),            // adam/iteration (8 bytes)
                    chunk(256, 128_000, true),      // the kernel
                    chunk(128_256, 128_000, true),  // its momentum
                    chunk(256_256, 128_000, false), // free: never named
                    chunk(384_256, 200_192, true),  // 1.56x the velocity's: a chunk kept whole
                    chunk(584_448, 4_096, true),    // the bias (4000 bytes, 4096 rounded)
                    chunk(588_544, 65_536, true),   // an activation: nothing fits
                ],
                ..RegionInfo::default()
            }],
            ..Dump::default()
        };
        let vars = [
            var("dense/kernel", 128_000, Kind::Weight),
            var("dense/bias", 4_000, Kind::Weight),
            var("adam/dense_kernel_momentum", 128_000, Kind::Optimizer),
            var("adam/dense_kernel_velocity", 128_000, Kind::Optimizer),
            var("adam/iteration", 8, Kind::Optimizer),
            var("adam/missing", 1 << 30, Kind::Optimizer),
        ];
        assert_eq!(name_variables(&mut d, &vars), 5);
        let c = &d.regions[0].chunks;
        assert!([0, 1, 2, 4, 5].iter().all(|&i| c[i].kind.is_some()), "{c:?}");
        assert!(c[3].op.is_none() && c[6].op.is_none(), "a free chunk and one nothing fits stay unnamed");
        assert_eq!(c[0].op.as_deref(), Some("adam/iteration"));
        assert_eq!(c[5].op.as_deref(), Some("dense/bias"));
        // The kernel and its two slots: in the two chunks of 128 000 and the one kept whole,
        // whichever is which; the bytes of each kind are exact.
        let bytes = |k: Kind| c.iter().filter(|c| c.kind == Some(k)).map(|c| c.requested).sum::<u64>();
        assert_eq!((bytes(Kind::Weight), bytes(Kind::Optimizer)), (132_000, 256_008));
        assert_eq!(d.usage_by_node.iter().map(|n| n.bytes).sum::<u64>(), 256 + 2 * 128_000 + 200_192 + 4_096 + 65_536);
        assert!(d.usage_by_node.iter().any(|n| n.op == UNNAMED && n.bytes == 65_536), "{:?}", d.usage_by_node);
    }
}
