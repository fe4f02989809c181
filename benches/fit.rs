//! `cargo bench --bench fit`: `oomscope fit`'s answer from a learned step, the part that must
//! be fast: learning a step of 100 000 requests from three probes' tapes, and the bisection
//! over replays of it through the caching allocator on an 80 GiB card. Figures go to
//! `docs/performance.md`.
//!
//! The step is generated: 144 weights (fixed), then six training steps of 48 layers, each
//! forward allocation growing with the batch and kept for the backward pass, backward
//! temporaries, gradients once, the optimizer's state at the first step; about 100 000
//! requests in all.

#![allow(clippy::unwrap_used)]

use divan::Bencher;
use oomscope_core::record::Kind;
use oomscope_replay::scaled::{Probed, Scaled, TapeEntry, scale};
use std::sync::LazyLock;

fn main() {
    divan::main();
}

/// `cargo bench` passes `--bench`; `cargo test` runs each benchmark once to check it works,
/// on a step of a twelfth the size, which keeps that to seconds in a debug build.
static LAYERS: LazyLock<u64> = LazyLock::new(|| if std::env::args().any(|a| a == "--bench") { 48 } else { 4 });
const STEPS: i64 = 6;

/// A probe's tape at `batch`.
fn tape(batch: u64) -> Probed {
    let mut p = Probed { batch, entries: Vec::new(), ops: vec![String::new()] };
    let mut next = 0u32;
    let mut alloc = |p: &mut Probed, bytes: u64, kind: Kind, step: i64, name: String| {
        p.ops.push(name);
        let op = (p.ops.len() - 1) as u32;
        p.entries.push(TapeEntry::Alloc { bytes, stream: 0, op, kind, step });
        next += 1;
        next - 1
    };
    let weights: Vec<u32> =
        (0..*LAYERS * 3).map(|l| alloc(&mut p, 4 << 20, Kind::Weight, -1, format!("w{l}"))).collect();
    let mut grads = Vec::new();
    for step in 0..STEPS {
        p.entries.push(TapeEntry::Step { step });
        let mut acts = Vec::new();
        for l in 0..*LAYERS {
            for j in 0..110 {
                let a = alloc(&mut p, 65_536 * batch + 512, Kind::Activation, step, format!("f{l}.{j}"));
                if j % 3 == 0 {
                    p.entries.push(TapeEntry::Free { alloc: a });
                } else {
                    acts.push(a);
                }
            }
        }
        for (l, a) in acts.into_iter().rev().enumerate() {
            let t = alloc(&mut p, 32_768 * batch, Kind::Backward, step, format!("b{l}"));
            p.entries.push(TapeEntry::Free { alloc: a });
            p.entries.push(TapeEntry::Free { alloc: t });
        }
        if step == 0 {
            grads = weights.iter().map(|w| alloc(&mut p, 4 << 20, Kind::Gradient, step, format!("g{w}"))).collect();
            for w in &weights {
                alloc(&mut p, 8 << 20, Kind::Optimizer, step, format!("o{w}"));
            }
        }
    }
    let _ = &grads;
    p
}

static PROBES: LazyLock<Vec<Probed>> = LazyLock::new(|| [2, 4, 6].into_iter().map(tape).collect());
static STEP: LazyLock<Scaled> = LazyLock::new(|| scale(&PROBES).unwrap());

fn settings() -> oomscope_replay::Settings {
    let mut o = oomscope_core::bfc::Options::new(80 << 30);
    o.history = 0;
    oomscope_replay::Settings {
        options: o,
        device_total: 80 << 30,
        device_others: 0,
        device_model: "h100".into(),
        keep_going: false,
        allocator: oomscope_replay::Allocator::Caching(Box::default()),
    }
}

/// Learning the step from the three tapes (aligning them, fitting every size).
#[divan::bench(sample_count = 5)]
fn learn_a_100k_request_step(b: Bencher) {
    let probes = &*PROBES;
    assert!(probes[0].entries.len() > 95_000 || *LAYERS < 48, "{}", probes[0].entries.len());
    b.bench(|| scale(probes).unwrap());
}

/// The largest batch on an 80 GiB card: doubling, then bisection, each a whole replay.
#[divan::bench(sample_count = 5)]
fn bisection_over_replays_of_a_100k_request_step(b: Bencher) {
    let step = &*STEP;
    let s = settings();
    b.bench(|| {
        let mut runs = Vec::new();
        let largest = oomscope_fit::largest(step, &s, 1 << 20, &mut runs).unwrap();
        assert!(largest > 64, "{largest}");
        runs.len()
    });
}
