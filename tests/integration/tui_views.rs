//! The terminal UI drawn on ratatui's TestBackend: every view at 80×24 and 160×48 from a
//! dump fixture (golden files, reviewed by hand), and every kind of dump the project writes
//! opened and drawn.

use crate::common::{assert_golden, oomscope, root, stderr, temp_dir};
use oomscope_analysis::render::post_mortem;
use oomscope_dump as dump;
use oomscope_tui::ratatui::Terminal;
use oomscope_tui::ratatui::backend::TestBackend;
use oomscope_tui::ratatui::buffer::Buffer;
use oomscope_tui::ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use oomscope_tui::source::from_dump;
use oomscope_tui::{App, View};

/// The screen as text: one line per row, trailing spaces cut.
fn text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| oomscope_tui::draw(f, app)).unwrap();
    text(t.backend().buffer())
}

fn press(app: &mut App, keys: &[KeyCode]) {
    for &k in keys {
        app.handle_key(KeyEvent::new(k, KeyModifiers::NONE));
    }
}

fn unet() -> App {
    let d = dump::read(&root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    App::new(vec![from_dump(&d, "dump fixtures/dumps/unet-b2.dump.json", post_mortem(&d))])
}

#[test]
fn every_view_of_the_unet_dump_at_80x24_and_160x48() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut app = unet();
        for v in View::ALL {
            app.update(oomscope_tui::Action::Show(v));
            let s = screen(&app, w, h);
            assert_golden(&format!("tui-unet-{}-{w}x{h}.txt", v.title().to_lowercase()), &s);
        }
    }
}

#[test]
fn what_the_unet_views_say() {
    let mut app = unet();
    let overview = screen(&app, 80, 24);
    // The OOM, the figures users compare with TF's report, and the verdict with its fix.
    assert!(overview.contains("OOM: 450.00MiB requested by shared_model/unet_10/FusedBatchNorm"), "{overview}");
    assert!(overview.contains("limit 8.00GiB") && overview.contains("in use 7.57GiB"), "{overview}");
    assert!(overview.contains("verdict: true peak"), "{overview}");
    assert!(overview.contains("fix: train at batch 1"), "the fix shows even at 80x24:\n{overview}");
    assert!(overview.contains("event"), "no clock in this dump: the chart counts events:\n{overview}");

    app.update(oomscope_tui::Action::Show(View::Nodes));
    let nodes = screen(&app, 80, 24);
    let first = nodes.lines().find(|l| l.contains("MiB")).unwrap();
    assert!(first.contains("900.00MiB") && first.contains("ResizeBilinear"), "largest first: {first}");

    // The map's cursor on the 900 MiB tensor shows its op and shape.
    app.update(oomscope_tui::Action::Show(View::Map));
    let d = app.device().unwrap().clone();
    let big = d.spans.iter().position(|s| s.in_use == 900 << 20).unwrap();
    for _ in 0..big {
        press(&mut app, &[KeyCode::Right]);
    }
    let map = screen(&app, 80, 24);
    assert!(map.contains("900.00MiB · in use"), "{map}");
    assert!(map.contains("op shared_model/resize_images_1/ResizeBilinear"), "{map}");
    assert!(map.contains("[2,720,1280,128]"), "{map}");
    assert_golden("tui-unet-map-cursor-80x24.txt", &map);
    // Enter: the same tensor in the allocations view, its detail open.
    press(&mut app, &[KeyCode::Enter]);
    assert_eq!(app.view, View::Allocations);
    let allocs = screen(&app, 80, 24);
    assert!(allocs.contains("detail (Enter closes)") && allocs.contains("900.00MiB (requested 900.00MiB"), "{allocs}");
    assert_golden("tui-unet-allocations-detail-80x24.txt", &allocs);

    // The tree folds the 193 ops into scopes.
    app.update(oomscope_tui::Action::Show(View::Nodes));
    press(&mut app, &[KeyCode::Char('t')]);
    let tree = screen(&app, 80, 24);
    assert!(tree.contains("▾ shared_model") && tree.contains("▸ unet_09"), "{tree}");
    assert_golden("tui-unet-nodes-tree-80x24.txt", &tree);
}

/// The map draws each chunk where its bytes are: with one region across the grid, the
/// free tail of the unet pool (437.65 MiB of 8 GiB, about 5%) is the last cells.
#[test]
fn the_map_puts_bytes_where_they_are() {
    let mut app = unet();
    app.update(oomscope_tui::Action::Show(View::Map));
    let s = screen(&app, 160, 48);
    let grid: String =
        s.lines().skip(3).take(48 - 3 - 1 - 6 - 1).map(|l| l.trim_start_matches('│').trim_end_matches('│')).collect();
    let free = grid.chars().filter(|&c| c == '·').count();
    let used = grid.chars().filter(|&c| c == '█').count();
    let share = free as f64 / (free + used) as f64;
    assert!((0.045..0.06).contains(&share), "free share {share:.3} ({free} free, {used} used)");
    assert!(grid.trim_end().ends_with('·'), "the free chunk is at the end of the region");
}

#[test]
fn a_partial_tf_log_shows_what_it_has_and_says_what_it_lacks() {
    let dir = temp_dir("tui-log");
    let out = dir.join("seed-003.dump.json");
    let o = oomscope(&["import", "fixtures/logs/seed-003-unet.txt", "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d = dump::read(&out).unwrap();
    let mut app = App::new(vec![from_dump(&d, "dump seed-003.dump.json", post_mortem(&d))]);
    let overview = screen(&app, 80, 24);
    assert!(overview.contains("no history in this source"), "{overview}");
    assert!(overview.contains("imported from a TensorFlow log"), "{overview}");
    assert_golden("tui-seed-003-overview-80x24.txt", &overview);
    app.update(oomscope_tui::Action::Show(View::Nodes));
    let nodes = screen(&app, 80, 24);
    assert!(nodes.contains("Remaining"), "the log's 'Remaining N nodes' line is kept: {nodes}");
    app.update(oomscope_tui::Action::Show(View::Report));
    let report = screen(&app, 80, 24);
    assert!(report.contains("Current usage from device"), "the sections the log had: {report}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Every kind of dump the project writes opens, and every view draws at every size with
/// the keys pressed.
#[test]
fn every_kind_of_dump_opens_in_the_ui() {
    let dir = temp_dir("tui-any");
    let mut made = Vec::new();
    let mut run = |name: &str, args: &[&str]| {
        let path = dir.join(format!("{name}.dump.json"));
        let mut a: Vec<&str> = args.to_vec();
        let p = path.to_str().unwrap().to_string();
        a.extend(["-o", &p]);
        let o = oomscope(&a);
        assert!(path.exists(), "{name}: {}", stderr(&o));
        made.push(path);
    };
    run("demo-unet", &["demo", "unet"]);
    run("demo-mnist", &["demo", "mnist-eval"]);
    run("demo-preallocate", &["demo", "preallocate"]);
    run("demo-fits", &["demo", "unet", "--batch", "1"]);
    run("replay-fragmentation", &["replay", "fixtures/traces/fragmentation.jsonl", "--limit", "1GiB"]);
    run(
        "replay-growth",
        &["replay", "fixtures/traces/steps-growth.jsonl", "--limit", "1GiB", "--allow-growth", "--keep-going"],
    );
    run("replay-empty", &["replay", "fixtures/traces/tf-reference.jsonl", "--limit", "64GiB"]);
    for log in ["seed-000-preallocate", "seed-001-mnist", "seed-003-unet"] {
        run(&format!("import-{log}"), &["import", &format!("fixtures/logs/{log}.txt")]);
    }
    for path in &made {
        let d = dump::read(path).unwrap();
        let mut app = App::new(vec![from_dump(&d, &path.display().to_string(), post_mortem(&d))]);
        for v in View::ALL {
            app.update(oomscope_tui::Action::Show(v));
            for keys in [&[][..], &[KeyCode::Down, KeyCode::Right, KeyCode::End, KeyCode::Enter][..]] {
                press(&mut app, keys);
                for (w, h) in [(80, 24), (160, 48), (40, 12)] {
                    let s = screen(&app, w, h);
                    assert!(s.contains("oomscope"), "{}: {v:?} at {w}x{h}:\n{s}", path.display());
                }
            }
            press(&mut app, &[KeyCode::Esc]);
        }
        let overview = {
            app.update(oomscope_tui::Action::Show(View::Overview));
            screen(&app, 160, 48)
        };
        assert!(overview.contains(&d.allocator.name), "{}:\n{overview}", path.display());
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The UI's sizes are TF's (`oomscope_base::size::human`), even though the UI crate cannot use
/// that function.
#[test]
fn the_ui_prints_sizes_as_tf_does() {
    let mut n: u64 = 1;
    while n < u64::MAX / 3 {
        for v in [n - 1, n, n + 1, n * 3 / 2] {
            assert_eq!(oomscope_tui::fmt::bytes(v), oomscope_base::size::human(v), "{v}");
        }
        n = n * 2 + 1;
    }
}
