//! The importers under random and damaged input: no panic, a clear error or a dump, and a
//! dump no larger than its input allows (memory bounded by what was read).

use crate as render;
use crate::export;
use oomscope_format::Dump;
use oomscope_ingest::import::{self, From};
use proptest::prelude::*;
use std::path::Path;
use std::sync::LazyLock;

/// A snapshot as Python's pickle writes it at protocol 4 (FRAME, MEMOIZE, BINGET...): one
/// segment, two blocks sharing a frame dict, an alloc and an OOM in the trace.
const PROTOCOL_4: &[u8] = b"\
    \x80\x04\x95\x89\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e\x74\x73\
    \x94\x5d\x94\x7d\x94\x28\x8c\x06\x64\x65\x76\x69\x63\x65\x94\x4b\x00\x8c\x07\x61\x64\x64\x72\x65\
    \x73\x73\x94\x4d\x00\x10\x8c\x0a\x74\x6f\x74\x61\x6c\x5f\x73\x69\x7a\x65\x94\x4d\x00\x10\x8c\x06\
    \x62\x6c\x6f\x63\x6b\x73\x94\x5d\x94\x28\x7d\x94\x28\x68\x05\x4d\x00\x10\x8c\x04\x73\x69\x7a\x65\
    \x94\x4d\x00\x08\x8c\x0e\x72\x65\x71\x75\x65\x73\x74\x65\x64\x5f\x73\x69\x7a\x65\x94\x4d\xd0\x07\
    \x8c\x05\x73\x74\x61\x74\x65\x94\x8c\x10\x61\x63\x74\x69\x76\x65\x5f\x61\x6c\x6c\x6f\x63\x61\x74\
    \x65\x64\x94\x8c\x06\x66\x72\x61\x6d\x65\x73\x94\x5d\x94\x28\x7d\x94\x28\x8c\x08\x66\x69\x6c\x65\
    \x6e\x61\x6d\x65\x94\x8c\x10\x2f\x68\x6f\x6d\x65\x2f\x75\x2f\x74\x72\x61\x69\x6e\x2e\x70\x79\x94\
    \x8c\x04\x6c\x69\x6e\x65\x94\x4b\x2a\x8c\x04\x6e\x61\x6d\x65\x94\x8c\x07\x66\x6f\x72\x77\x61\x72\
    \x64\x94\x75\x68\x10\x65\x75\x7d\x94\x28\x68\x05\x4d\x00\x18\x68\x0a\x4d\x00\x08\x68\x0b\x4b\x00\
    \x68\x0c\x8c\x08\x69\x6e\x61\x63\x74\x69\x76\x65\x94\x68\x0e\x5d\x94\x75\x65\x75\x61\x8c\x0d\x64\
    \x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73\x94\x5d\x94\x5d\x94\x28\x7d\x94\x28\x8c\x06\x61\
    \x63\x74\x69\x6f\x6e\x94\x8c\x05\x61\x6c\x6c\x6f\x63\x94\x8c\x04\x61\x64\x64\x72\x94\x4d\x00\x10\
    \x68\x0a\x4d\x00\x08\x8c\x06\x73\x74\x72\x65\x61\x6d\x94\x4b\x00\x8c\x07\x74\x69\x6d\x65\x5f\x75\
    \x73\x94\x4b\x01\x68\x0e\x5d\x94\x68\x10\x61\x75\x7d\x94\x28\x68\x1d\x8c\x03\x6f\x6f\x6d\x94\x68\
    \x1f\x4b\x00\x68\x0a\x4d\x00\x20\x68\x20\x4b\x00\x68\x21\x4b\x02\x8c\x0b\x64\x65\x76\x69\x63\x65\
    \x5f\x66\x72\x65\x65\x94\x4b\x00\x68\x0e\x5d\x94\x68\x10\x61\x75\x65\x61\x75\x2e";

/// Real inputs to mutate: the seeds' logs, logs oomscope prints in several variants, an
/// exported snapshot, and Python's protocol-4 pickle.
static SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<Vec<u8>> = ["seed-000-preallocate.txt", "seed-001-mnist.txt", "seed-003-unet.txt"]
        .iter()
        .map(|f| std::fs::read(root.join("../../fixtures/logs").join(f)).unwrap())
        .collect();
    let dump =
        oomscope_format::read_str(Path::new("g"), include_str!("../../../../tests/golden/tf-reference.dump.json"))
            .unwrap();
    for (_, variant) in oomscope_format::TfVariant::PRESETS.iter().step_by(2) {
        v.push(render::tf::render_variant(&dump, variant).into_bytes());
    }
    v.push(export::torch_snapshot(&dump));
    v.push(PROTOCOL_4.to_vec());
    v
});

/// What an import may hold for an input of `len` bytes: never more items than bytes.
fn bounded(d: &Dump, len: usize) -> bool {
    let chunks: usize = d.regions.iter().map(|r| r.chunks.len()).sum();
    chunks <= len
        && d.events.len() <= len
        && d.usage_by_node.len() <= len
        && d.stacks.len() <= len
        && d.bins.len() <= 21
}

fn try_all(bytes: &[u8]) -> Result<(), TestCaseError> {
    for from in [None, Some(From::TfLog), Some(From::TorchSnapshot)] {
        if let Ok(d) = import::import(Path::new("fuzz.in"), bytes, from, None) {
            prop_assert!(bounded(&d, bytes.len()), "too large a dump for {} bytes", bytes.len());
            // Every renderer copes with whatever was imported.
            for format in [render::Format::Tf, render::Format::Summary, render::Format::Json] {
                let _ = render::render(&d, format);
            }
            let _ = oomscope_diagnose::analyze(&d, &mut |s| oomscope_replay::what_if::from_history(&d, s));
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        try_all(&bytes)?;
    }

    #[test]
    fn pickle_shaped_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512), proto in 2u8..6) {
        let mut bytes = vec![0x80, proto];
        bytes.extend(body);
        try_all(&bytes)?;
    }

    #[test]
    fn mutated_real_inputs_never_panic(which in 0usize..16, mutations in prop::collection::vec(mutation(), 1..12)) {
        let seeds = &*SEEDS;
        let mut bytes = seeds[which % seeds.len()].clone();
        for m in mutations {
            let len = bytes.len().max(1);
            match m {
                Mutation::Flip(i, b) => { if !bytes.is_empty() { bytes[i % len] ^= b.max(1); } }
                Mutation::Truncate(i) => bytes.truncate(i % len),
                Mutation::Insert(i, b) => { let at = i % len; bytes.splice(at.min(bytes.len())..at.min(bytes.len()), b); }
                Mutation::Duplicate(i, n) => {
                    let at = (i % len).min(bytes.len());
                    let end = (at + n).min(bytes.len());
                    let piece = bytes[at..end].to_vec();
                    bytes.splice(at..at, piece);
                }
            }
        }
        try_all(&bytes)?;
    }
}

#[test]
fn the_protocol_4_pickle_imports() {
    let d = import::import(Path::new("p4.pickle"), PROTOCOL_4, None, None).unwrap();
    assert_eq!(d.regions[0].chunks.len(), 2);
    assert_eq!(d.regions[0].chunks[0].op.as_deref(), Some("train.py:42 (forward)"));
    assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(8192));
}

#[test]
fn a_snapshot_that_shares_one_list_many_times_is_refused_not_expanded() {
    // segments = [S, S, S, ...] 60 000 times, S holding 1000 blocks: 60M chunks if expanded.
    let mut p = vec![0x80, 4, b'}', b'(', 0x8c, 8];
    p.extend_from_slice(b"segments");
    p.extend_from_slice(b"](");
    p.extend_from_slice(&[b'}', b'(', 0x8c, 7]);
    p.extend_from_slice(b"address");
    p.extend_from_slice(&[b'K', 1, 0x8c, 10]);
    p.extend_from_slice(b"total_size");
    p.extend_from_slice(&[b'K', 2, 0x8c, 6]);
    p.extend_from_slice(b"blocks");
    p.extend_from_slice(b"](");
    for _ in 0..1000 {
        p.extend_from_slice(&[b'}', 0x8c, 4]);
        p.extend_from_slice(b"size");
        p.extend_from_slice(&[b'K', 1, b's']);
    }
    p.extend_from_slice(&[b'e', b'u', 0x94]); // the segment, memo 0
    for _ in 0..60_000 {
        p.extend_from_slice(&[b'j', 0, 0, 0, 0]);
    }
    p.extend_from_slice(b"eu.");
    let e = import::import(Path::new("bomb.pickle"), &p, None, None).unwrap_err();
    assert!(e.to_string().contains("too large to import"), "{e}");
}
