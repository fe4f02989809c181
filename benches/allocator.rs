//! `cargo bench`: the allocator against its peers on one recorded training trace, replay
//! and parse throughput, and dumps with 1M live allocations. Figures go to
//! `docs/performance.md` (machine and date with them).
//!
//! The trace is generated deterministically (see `training_trace`): a 48-layer network
//! trained for as many steps as it takes to pass 1M events, weights allocated once, then per
//! step forward activations and cuDNN-style workspaces, backward gradients, and an optimizer
//! update; every 7th step changes the batch shape, as dynamic shapes do. It is written to
//! `target/bench-training.jsonl` so it can be replayed with the CLI too.
//!
//! Peers get the same alloc/free sequence in 256-byte units over one arena of the limit:
//! `offset-allocator` (two-level bins, O(1)) and `buddy_system_allocator` (power-of-two).

#![allow(clippy::unwrap_used)]

use divan::Bencher;
use divan::counter::ItemsCount;
use oomscope_core::Allocator;
use oomscope_core::Recording;
use oomscope_core::Request;
use oomscope_core::bfc::{Bfc, Options};
use oomscope_core::caching::{Caching, CachingOptions, Settings};
use oomscope_core::device::SimDevice;
use oomscope_core::record::Meta;
use oomscope_format::{self as dump, Source};
use oomscope_ingest::trace::{self, Event, Trace};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

fn main() {
    // The C ABI benchmark's allocator: a simulated card larger than the trace's peak.
    if std::env::var_os("OOMSCOPE_DEVICE").is_none() {
        // SAFETY: set before any thread starts.
        unsafe { std::env::set_var("OOMSCOPE_DEVICE", "sim:24GiB") };
    }
    divan::main();
}

/// Limit for the replays: comfortably above the trace's peak, so nothing fails.
const LIMIT: u64 = 24 << 30;

/// `cargo bench` passes `--bench`; under `cargo test --benches` divan runs each benchmark
/// once to check it works, and a small trace keeps that to seconds in a debug build.
static FULL: LazyLock<bool> = LazyLock::new(|| std::env::args().any(|a| a == "--bench"));

/// Events in the training trace, and live allocations in the dump benchmarks.
fn scale(full: usize) -> usize {
    if *FULL { full } else { full / 100 }
}

struct Workload {
    trace: Trace,
    jsonl_path: PathBuf,
    jsonl_bytes: u64,
    allocs: u64,
    /// Op names by allocation number, for the API benches.
    ops: Vec<String>,
}

static WORKLOAD: LazyLock<Workload> = LazyLock::new(training_trace);

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn training_trace() -> Workload {
    let mut rng = Rng(0x5EED);
    let mut lines = String::new();
    let mut id = 0u64;
    let mut alloc = |lines: &mut String, bytes: u64, op: &str, step: i64| -> u64 {
        id += 1;
        lines.push_str(&format!(
            "{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":{bytes},\"op\":\"{op}\",\"dtype\":\"float32\",\"step\":{step}}}\n"
        ));
        id
    };
    let free = |lines: &mut String, id: u64| lines.push_str(&format!("{{\"ev\":\"free\",\"id\":{id}}}\n"));
    const LAYERS: usize = 48;
    // Channel widths and spatial sizes of a ResNet-like stack.
    let layer_bytes: Vec<u64> = (0..LAYERS)
        .map(|l| {
            let c = 64u64 << (l / 12);
            let hw = 56u64 >> (l / 12);
            c * hw * hw * 4
        })
        .collect();
    for (l, &b) in layer_bytes.iter().enumerate() {
        alloc(&mut lines, b / 8 + 4096, &format!("model/layer{l:02}/kernel"), -1);
        alloc(&mut lines, b / 8 + 4096, &format!("model/layer{l:02}/kernel/Adam"), -1);
    }
    let mut step = 0i64;
    // Each step writes 1 + 48 * 4 + 1 + 48 * 9 + 1 events.
    let events_per_step = 1 + LAYERS * 4 + 1 + LAYERS * 9 + 1;
    let mut events = 2 * LAYERS;
    while events < scale(1_000_000) {
        events += events_per_step;
        lines.push_str(&format!("{{\"ev\":\"step\",\"step\":{step}}}\n"));
        let batch = if step % 7 == 6 { 24 + rng.next() % 8 } else { 32 };
        let mut acts = Vec::with_capacity(LAYERS);
        for (l, &b) in layer_bytes.iter().enumerate() {
            let ws =
                alloc(&mut lines, 1 << (16 + rng.next() % 8), &format!("model/layer{l:02}/Conv2D/workspace"), step);
            acts.push(alloc(&mut lines, b * batch, &format!("model/layer{l:02}/Conv2D"), step));
            let bn = alloc(&mut lines, b * batch, &format!("model/layer{l:02}/FusedBatchNorm"), step);
            free(&mut lines, ws);
            acts.push(bn);
        }
        let mut grad = alloc(&mut lines, layer_bytes[LAYERS - 1] * batch, "gradients/loss", step);
        for l in (0..LAYERS).rev() {
            let ws = alloc(
                &mut lines,
                1 << (16 + rng.next() % 8),
                &format!("gradients/model/layer{l:02}/Conv2D_grad/workspace"),
                step,
            );
            let g = alloc(
                &mut lines,
                layer_bytes[l] * batch,
                &format!("gradients/model/layer{l:02}/Conv2D_grad/Conv2DBackpropInput"),
                step,
            );
            let wg = alloc(
                &mut lines,
                layer_bytes[l] / 8 + 4096,
                &format!("gradients/model/layer{l:02}/Conv2D_grad/Conv2DBackpropFilter"),
                step,
            );
            free(&mut lines, ws);
            free(&mut lines, acts.pop().expect("bn"));
            free(&mut lines, acts.pop().expect("conv"));
            free(&mut lines, grad);
            let upd = alloc(&mut lines, layer_bytes[l] / 8 + 4096, &format!("Adam/update_layer{l:02}/mul"), step);
            free(&mut lines, upd);
            free(&mut lines, wg);
            grad = g;
        }
        free(&mut lines, grad);
        step += 1;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-training.jsonl");
    std::fs::write(&path, &lines).expect("write the bench trace");
    let trace = trace::parse_str(&path, &lines).expect("the generated trace parses");
    let allocs = trace.allocs as u64;
    let ops = trace
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Alloc { meta, .. } => Some(trace.names.op(meta.op).to_string()),
            _ => None,
        })
        .collect();
    Workload { jsonl_bytes: lines.len() as u64, trace, jsonl_path: path, allocs, ops }
}

fn bfc(history: usize) -> Bfc {
    let mut o = Options::new(LIMIT);
    o.allow_growth = true;
    o.history = history;
    Bfc::new(o, Box::new(SimDevice::new(LIMIT, 0)))
}

/// Replays the trace through a single-threaded core (`alloc`, `free`, `step` are its calls);
/// `record` passes each event's metadata (op, dtype, step, time) and keeps a 10 000-event
/// history.
fn replay_with<C>(
    c: &mut C,
    t: &Trace,
    record: bool,
    alloc: impl Fn(&mut C, u64, Meta) -> Option<u64>,
    free: impl Fn(&mut C, u64, u64),
    step: impl Fn(&mut C, i64, u64),
) -> u64 {
    let mut addrs = vec![0u64; t.allocs as usize];
    let mut failed = 0;
    for e in &t.events {
        match *e {
            Event::Alloc { alloc: id, bytes, meta, .. } => {
                let meta = if record { meta } else { Meta::default() };
                match alloc(c, bytes, meta) {
                    Some(a) => addrs[id as usize] = a,
                    None => failed += 1,
                }
            }
            Event::Free { alloc: id, t_ns, .. } => free(c, addrs[id as usize], t_ns),
            Event::Step { step: s, t_ns } => {
                if record {
                    step(c, s, t_ns)
                }
            }
        }
    }
    assert_eq!(failed, 0, "the bench limit fits the trace");
    addrs.len() as u64
}

fn replay_core(b: &mut Bfc, t: &Trace, record: bool) -> u64 {
    replay_with(
        b,
        t,
        record,
        |b, bytes, meta| b.allocate(bytes, meta).ok(),
        |b, a, t_ns| {
            let _ = b.free(a, t_ns);
        },
        |b, s, t_ns| b.mark_step(s, t_ns),
    )
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_core_no_recording(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| bfc(0))
        .bench_local_refs(|b| replay_core(b, &w.trace, false));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_core_recording(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| bfc(10_000))
        .bench_local_refs(|b| replay_core(b, &w.trace, true));
}

fn caching(history: usize) -> Caching {
    let mut o = CachingOptions::new(0);
    o.history = history;
    Caching::new(Settings::default(), o, Box::new(SimDevice::new(LIMIT, 0)))
}

/// The same replay through PyTorch's caching allocator (one stream).
fn replay_caching(c: &mut Caching, t: &Trace, record: bool) -> u64 {
    replay_with(
        c,
        t,
        record,
        |c, bytes, meta| c.allocate(bytes, 0, meta).ok(),
        |c, a, t_ns| {
            let _ = c.free(a, t_ns);
        },
        |c, s, t_ns| c.mark_step(s, t_ns),
    )
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_caching_core_no_recording(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| caching(0))
        .bench_local_refs(|c| replay_caching(c, &w.trace, false));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_caching_core_recording(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| caching(10_000))
        .bench_local_refs(|c| replay_caching(c, &w.trace, true));
}

/// The benchmark trace as a PyTorch snapshot's trace records it: `alloc`, then
/// `free_requested` and `free_completed` for each free (a fresh address per allocation, as
/// the replay maps recorded addresses to its own).
static SNAPSHOT_TRACE: LazyLock<oomscope_sim::torch_replay::SnapshotTrace> = LazyLock::new(|| {
    use oomscope_sim::torch_replay::{Action, Entry, SettingsFrom, SnapshotTrace};
    let w = &*WORKLOAD;
    let mut entries = Vec::new();
    // Op names once each, as reading a snapshot leaves them.
    let mut ops = vec![String::from("(allocated before recording began)")];
    let mut ids: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let entry = |action, alloc: u32, size, t_ns, op: u32| Entry {
        action,
        addr: (u64::from(alloc) + 1) << 12,
        size,
        stream: 0,
        t_ns,
        op,
    };
    for e in &w.trace.events {
        match *e {
            Event::Alloc { alloc, bytes, meta, .. } => {
                let name = &w.ops[alloc as usize];
                let next = ops.len() as u32;
                let id = *ids.entry(name.clone()).or_insert(next);
                if id == next {
                    ops.push(name.clone());
                }
                entries.push(entry(Action::Alloc, alloc, bytes, meta.t_ns, id))
            }
            Event::Free { alloc, t_ns, .. } => {
                entries.push(entry(Action::FreeRequested, alloc, 0, t_ns, 0));
                entries.push(entry(Action::FreeCompleted, alloc, 0, t_ns, 0));
            }
            Event::Step { .. } => {}
        }
    }
    SnapshotTrace {
        path: "bench".into(),
        device: 0,
        segments: Vec::new(),
        entries,
        kinds: vec![Default::default(); ops.len()],
        ops,
        settings: Settings::default(),
        settings_from: SettingsFrom::Recorded,
    }
});

/// `oomscope replay SNAPSHOT` after reading: every entry through the caching allocator,
/// with op names, and the final state compared.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn replay_snapshot_trace(bench: Bencher) {
    use oomscope_sim::torch_replay::{Limit, Options, run};
    let t = &*SNAPSHOT_TRACE;
    let opts = Options::on(Settings::default(), Some(Limit::Device(LIMIT)), true);
    bench.counter(ItemsCount::new(t.entries.len())).bench_local(|| run(t, &opts, |_| {}).allocs);
}

/// A real snapshot of 24 298 trace entries (a transformer trained 22 steps on an H100 with
/// PyTorch 2.11, `fixtures/torch-snapshots/long.pickle`), read and replayed as
/// `oomscope replay` does.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn import_and_replay_real_snapshot(bench: Bencher) {
    use oomscope_sim::torch_replay::{Options, SnapshotTrace, run};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/torch-snapshots/long.pickle");
    let bytes = std::fs::read(&path).expect("the recorded snapshot");
    let t = SnapshotTrace::read(&path, &bytes, None).expect("a snapshot");
    eprintln!("real snapshot: {} trace entries, {} bytes", t.entries.len(), bytes.len());
    bench.counter(ItemsCount::new(t.entries.len())).bench_local(|| {
        let bytes = std::fs::read(&path).expect("read");
        let t = SnapshotTrace::read(&path, &bytes, None).expect("a snapshot");
        let opts = Options::on(t.settings.clone(), None, true);
        run(&t, &opts, |_| {}).placed
    });
}

/// The thread-safe API as a training process calls it: a lock per call, the op name as a
/// string (interned on each allocation) or as an id interned once (`ids`), a timestamp,
/// the step.
fn replay_api(a: &Allocator, w: &Workload, events: usize, ids: Option<&[u32]>) {
    let mut addrs = vec![0u64; w.allocs as usize];
    for e in &w.trace.events[..events] {
        match *e {
            Event::Alloc { alloc, bytes, .. } => {
                let req = match ids {
                    Some(ids) => Request::new(bytes).op_id(ids[alloc as usize]),
                    None => Request::new(bytes).op(&w.ops[alloc as usize]),
                };
                addrs[alloc as usize] = a.allocate(&req.dtype("float32")).expect("fits");
            }
            Event::Free { alloc, .. } => {
                let _ = a.free(addrs[alloc as usize]);
            }
            Event::Step { step, .. } => a.mark_step(step),
        }
    }
}

fn api(recording: Recording) -> Allocator {
    let mut o = Options::new(LIMIT);
    o.allow_growth = true;
    Allocator::with_recording(o, Box::new(SimDevice::new(LIMIT, 0)), recording)
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_api_op_names(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| api(Recording { ops: true, stacks: false }))
        .bench_local_refs(|a| replay_api(a, w, w.trace.events.len(), None));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_api_op_ids(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| {
            let a = api(Recording { ops: true, stacks: false });
            let ids: Vec<u32> = w.ops.iter().map(|op| a.intern_op(op)).collect();
            (a, ids)
        })
        .bench_local_refs(|(a, ids)| replay_api(a, w, w.trace.events.len(), Some(ids)));
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_api_no_recording(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| api(Recording { ops: false, stacks: false }))
        .bench_local_refs(|a| replay_api(a, w, w.trace.events.len(), None));
}

/// The same with the live feed on: a sampler thread publishing every `interval_ms` (100 ms
/// is the default; 10 ms shows how the cost grows) and a viewer reading it, as
/// `oomscope tui --attach` does. The target is under 5% more than `pair_api_op_names`.
#[divan::bench(args = [100, 10], sample_count = 10, sample_size = 1)]
fn pair_api_op_names_published(bench: Bencher, interval_ms: u64) {
    use oomscope_live::{self as live, Feed, Publisher, Sampler};
    use std::sync::Arc;
    let w = &*WORKLOAD;
    let dir = std::env::temp_dir().join(format!("oomscope-bench-live-{}", std::process::id()));
    live::private_dir(&dir).expect("a private directory");
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| {
            let a = Arc::new(api(Recording { ops: true, stacks: false }));
            let path = dir.join("bench.sock");
            let hello = live::Hello { protocol: live::PROTOCOL.into(), ..live::Hello::default() };
            let p = Arc::new(Publisher::bind(&path, hello).expect("bound"));
            let mut feed = Feed::connect(&path).expect("connected");
            let viewer = std::thread::spawn(move || {
                let mut n = 0u64;
                while let Ok(Some(_)) = feed.next_message() {
                    n += 1;
                }
                n
            });
            let interval = std::time::Duration::from_millis(interval_ms);
            let s = Sampler::start(Arc::clone(&a), Arc::clone(&p), interval).expect("started");
            (a, p, s, viewer)
        })
        .bench_local_refs(|(a, _, _, _)| replay_api(a, w, w.trace.events.len(), None));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same alloc/free sequence through `liboomscope.so`'s C ABI (`oomscope_malloc` /
/// `oomscope_free`, as PyTorch calls them) on the simulated device, with each allocation's
/// op name set by a scope push and pop, as the PyTorch hook does around every op.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_c_abi_with_scopes(bench: Bencher) {
    use ffi::{oomscope_free, oomscope_malloc, oomscope_scope_pop, oomscope_scope_push};
    let w = &*WORKLOAD;
    let names: Vec<std::ffi::CString> =
        w.ops.iter().map(|o| std::ffi::CString::new(o.as_str()).expect("no NUL")).collect();
    bench.counter(ItemsCount::new(w.allocs)).bench_local(|| {
        let mut addrs = vec![std::ptr::null_mut(); w.allocs as usize];
        for e in &w.trace.events {
            match *e {
                Event::Alloc { alloc, bytes, .. } => {
                    // SAFETY: a NUL-terminated name.
                    unsafe { oomscope_scope_push(names[alloc as usize].as_ptr()) };
                    addrs[alloc as usize] = oomscope_malloc(bytes as isize, 0, std::ptr::null_mut());
                    oomscope_scope_pop();
                }
                Event::Free { alloc, .. } => oomscope_free(addrs[alloc as usize], 0, 0, std::ptr::null_mut()),
                Event::Step { .. } => {}
            }
        }
    });
}

/// Stack capture costs microseconds per allocation; the first 200 000 events suffice.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn pair_api_stacks(bench: Bencher) {
    let w = &*WORKLOAD;
    let events = 200_000.min(w.trace.events.len());
    let allocs = w.trace.events[..events].iter().filter(|e| matches!(e, Event::Alloc { .. })).count();
    bench
        .counter(ItemsCount::new(allocs))
        .with_inputs(|| api(Recording { ops: true, stacks: true }))
        .bench_local_refs(|a| replay_api(a, w, events, None));
}

const UNIT: u64 = 256;

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_peer_offset_allocator(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| offset_allocator::Allocator::<u32>::new((LIMIT / UNIT) as u32))
        .bench_local_refs(|a| {
            let mut live = vec![None; w.allocs as usize];
            for e in &w.trace.events {
                match *e {
                    Event::Alloc { alloc, bytes, .. } => {
                        live[alloc as usize] = a.allocate(bytes.div_ceil(UNIT) as u32);
                        assert!(live[alloc as usize].is_some());
                    }
                    Event::Free { alloc, .. } => {
                        if let Some(x) = live[alloc as usize].take() {
                            a.free(x);
                        }
                    }
                    Event::Step { .. } => {}
                }
            }
        });
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn pair_peer_buddy_system_allocator(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(ItemsCount::new(w.allocs))
        .with_inputs(|| {
            let mut a = buddy_system_allocator::FrameAllocator::<33>::new();
            a.add_frame(0, (LIMIT / UNIT) as usize);
            a
        })
        .bench_local_refs(|a| {
            let mut live = vec![(0usize, 0usize); w.allocs as usize];
            for e in &w.trace.events {
                match *e {
                    Event::Alloc { alloc, bytes, .. } => {
                        let frames = bytes.div_ceil(UNIT).max(1) as usize;
                        let at = a.alloc(frames).expect("fits");
                        live[alloc as usize] = (at, frames);
                    }
                    Event::Free { alloc, .. } => {
                        let (at, frames) = live[alloc as usize];
                        a.dealloc(at, frames);
                    }
                    Event::Step { .. } => {}
                }
            }
        });
}

/// The whole `oomscope replay` path after parsing: allocator, events, final snapshot.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn replay_events(bench: Bencher) {
    let w = &*WORKLOAD;
    let mut o = Options::new(LIMIT);
    o.allow_growth = true;
    let settings = oomscope_replay::replay::Settings::new(o);
    bench
        .counter(ItemsCount::new(w.trace.events.len()))
        .bench_local(|| oomscope_replay::replay::replay(&w.trace, &settings, None, |_| {}).failures);
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn parse_trace_jsonl(bench: Bencher) {
    let w = &*WORKLOAD;
    bench
        .counter(divan::counter::BytesCount::new(w.jsonl_bytes))
        .bench_local(|| trace::read(&w.jsonl_path).expect("parses").events.len());
}

/// An allocator holding 1M live 1 KiB allocations under 200 op names.
fn million_live() -> Bfc {
    let mut b = Bfc::new(Options::new(2 << 30), Box::new(SimDevice::new(2 << 30, 0)));
    let ops: Vec<u32> = (0..200).map(|i| b.names_mut().ops.intern(&format!("model/block{i:03}/Conv2D"))).collect();
    let shape = b.names_mut().shapes.intern(&[16i64, 16][..]);
    for i in 0..scale(1_000_000) as u64 {
        let meta = Meta { op: ops[(i % 200) as usize], shape, step: (i / 10_000) as i64, ..Meta::default() };
        b.allocate(1000, meta).expect("fits");
    }
    b
}

// A Mutex only because statics must be Sync; the benches are single-threaded.
static MILLION: LazyLock<Mutex<Bfc>> = LazyLock::new(|| Mutex::new(million_live()));

fn dump_path() -> PathBuf {
    std::env::temp_dir().join(format!("oomscope-bench-{}.json", std::process::id()))
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn dump_1m_snapshot_and_write(bench: Bencher) {
    let b = MILLION.lock().expect("not poisoned");
    let path = dump_path();
    bench.bench_local(|| dump::write_atomic(&path, &b.snapshot(Source::default())).expect("written"));
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn dump_1m_read(bench: Bencher) {
    let path = dump_path();
    dump::write_atomic(&path, &MILLION.lock().expect("not poisoned").snapshot(Source::default())).expect("written");
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!("dump with {} live allocations: {size} bytes", scale(1_000_000));
    bench.bench_local(|| dump::read(&path).expect("read back").regions.len());
    let _ = std::fs::remove_file(&path);
}

/// How long one malloc+free waits while the live feed's sampler copies a state of 1M chunks
/// over and over: with no sampler, with the copy in one hold of the lock (as it was), and
/// in slices of `SLOTS_PER_HOLD` chunk slots (the sampler's own copy). Prints the longest wait, the 99.99th
/// percentile, the waits over 1 ms and the copies made; the timed body is the whole run.
#[divan::bench(args = ["no sampler", "one hold", "slices"], sample_count = 1, sample_size = 1)]
fn live_copy_1m_chunks_longest_malloc_wait(bench: Bencher, how: &str) {
    use oomscope_core::Engine;
    use oomscope_live::Capture;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let alloc = Arc::new(Allocator::from_engine(Engine::Bfc(million_live()), Recording::default()));
    let run_for = if *FULL { Duration::from_secs(2) } else { Duration::from_millis(100) };
    bench.bench_local(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let copies = Arc::new(AtomicU64::new(0));
        let sampler = {
            let (alloc, stop, copies, one) =
                (Arc::clone(&alloc), Arc::clone(&stop), Arc::clone(&copies), how == "one hold");
            let idle = how == "no sampler";
            std::thread::spawn(move || {
                let mut capture = Capture::new();
                while !stop.load(Ordering::Relaxed) && !idle {
                    let raw = if one {
                        alloc.with_engine(|e| capture.take(e, 0))
                    } else {
                        oomscope_live::sampler::copy(&alloc, &mut capture).0
                    };
                    divan::black_box(capture.build(raw));
                    copies.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let (started, mut waits) = (Instant::now(), Vec::new());
        while started.elapsed() < run_for {
            let t = Instant::now();
            let a = alloc.allocate(&Request::new(1000)).expect("fits");
            alloc.free(a).expect("frees");
            waits.push(t.elapsed());
        }
        waits.sort_unstable();
        let pairs = waits.len();
        let longest = waits.last().copied().unwrap_or_default();
        let p9999 = waits[(pairs * 9999 / 10_000).min(pairs - 1)];
        let over_1ms = waits.iter().filter(|w| **w > Duration::from_millis(1)).count();
        stop.store(true, Ordering::Relaxed);
        sampler.join().expect("the sampler runs");
        eprintln!(
            "{how}: longest malloc+free wait {longest:?}, 99.99th percentile {p9999:?}, {over_1ms} waits over 1 ms, \
             {pairs} pairs, {} state copies of {} chunks",
            copies.load(Ordering::Relaxed),
            scale(1_000_000)
        );
    });
}
