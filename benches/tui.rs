//! `cargo bench --bench tui`: the terminal UI on a dump with 1M live allocations (opening
//! it, and drawing each view), the targets being under 2 s to open and under 16 ms a frame.
//! Figures go to `docs/performance.md`.

#![allow(clippy::unwrap_used)]

use divan::Bencher;
use oomscope_core::bfc::{Bfc, Options};
use oomscope_core::device::SimDevice;
use oomscope_core::record::Meta;
use oomscope_format::{self as dump, Source};
use oomscope_tui::ratatui::Terminal;
use oomscope_tui::ratatui::backend::TestBackend;
use oomscope_tui::source::from_dump;
use oomscope_tui::{Action, App, View};
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

fn main() {
    divan::main();
    if LazyLock::get(&DUMP).is_some() {
        let _ = std::fs::remove_file(&*DUMP);
    }
}

/// `cargo bench` passes `--bench`; under `cargo test` each benchmark runs once on 1/100.
static FULL: LazyLock<bool> = LazyLock::new(|| std::env::args().any(|a| a == "--bench"));

fn live_allocations() -> u64 {
    if *FULL { 1_000_000 } else { 10_000 }
}

/// A dump of 1M live allocations under 200 op names, with an OOM on top, written once.
static DUMP: LazyLock<PathBuf> = LazyLock::new(|| {
    let n = live_allocations();
    let limit = n * 1024 + (64 << 20);
    let mut b = Bfc::new(Options::new(limit), Box::new(SimDevice::new(limit, 0)));
    let ops: Vec<u32> =
        (0..200).map(|i| b.names_mut().ops.intern(&format!("model/block{:02}/layer{i:03}/Conv2D", i % 20))).collect();
    let shape = b.names_mut().shapes.intern(&[16i64, 16][..]);
    for i in 0..n {
        let meta = Meta { op: ops[(i % 200) as usize], shape, step: (i / 10_000) as i64, ..Meta::default() };
        b.allocate(1000, meta).expect("fits");
    }
    let failure = b.allocate(limit, Meta::default()).expect_err("too large");
    let mut d = b.snapshot(Source::default());
    d.oom = Some(oomscope_core::bfc::oom_record(&failure, b.names()));
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    let path = std::env::temp_dir().join(format!("oomscope-bench-tui-{}.json", std::process::id()));
    dump::write_atomic(&path, &d).expect("written");
    path
});

/// What `oomscope tui DUMP` does before the first frame: read, explain, convert, derive.
fn open() -> App {
    let mut d = dump::read(&DUMP).expect("read");
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    App::new(vec![from_dump(&d, "bench", oomscope_report::view_report(&d))])
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn open_dump_1m(bench: Bencher) {
    bench.bench_local(open);
}

static APP: LazyLock<Mutex<App>> = LazyLock::new(|| Mutex::new(open()));

fn draw(bench: Bencher, view: View, (w, h): (u16, u16)) {
    let mut app = APP.lock().expect("not poisoned");
    app.update(Action::Show(view));
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    bench.bench_local(|| {
        terminal.draw(|f| oomscope_tui::draw(f, &app)).expect("drawn");
    });
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_overview(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Overview, size);
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_nodes(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Nodes, size);
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_bins(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Bins, size);
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_map(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Map, size);
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_allocations(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Allocations, size);
}

#[divan::bench(args = [(160, 48), (80, 24)], sample_count = 20)]
fn frame_report(bench: Bencher, size: (u16, u16)) {
    draw(bench, View::Report, size);
}

/// A key in the allocations view re-filters and re-sorts all 1M rows: the slowest key.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn key_filter_allocations(bench: Bencher) {
    let mut app = APP.lock().expect("not poisoned");
    app.update(Action::Show(View::Allocations));
    app.update(Action::FilterStart);
    bench.bench_local(|| {
        app.update(Action::FilterInput('7'));
        app.update(Action::FilterBackspace);
    });
    app.update(Action::FilterDone);
}
