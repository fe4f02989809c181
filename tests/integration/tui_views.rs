//! The terminal UI drawn on ratatui's TestBackend: every view at 80×24 and 160×48 from a
//! dump fixture (golden files, reviewed by hand), and every kind of dump the project writes
//! opened and drawn.

use crate::common::{assert_golden, oomscope, root, stderr, temp_dir};
use oomscope_format as dump;
use oomscope_report::view_report;
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
    App::new(vec![from_dump(&d, "dump fixtures/dumps/unet-b2.dump.json", view_report(&d))])
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
    let mut app = App::new(vec![from_dump(&d, "dump seed-003.dump.json", view_report(&d))]);
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
        let mut app = App::new(vec![from_dump(&d, &path.display().to_string(), view_report(&d))]);
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

/// The last line of the screen: the status bar.
fn footer(screen: &str) -> &str {
    screen.lines().last().unwrap_or("")
}

fn live_unet() -> oomscope_tui::Device {
    let d = dump::read(&root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    let mut device = from_dump(&d, "a live process", view_report(&d));
    device.status = oomscope_tui::Status::Live;
    device
}

/// Space on a live device pauses it, and the status bar says so and how to resume, even
/// when an earlier space (before the device arrived) had nothing to pause.
#[test]
fn pausing_a_live_device_and_the_status_bar_agree() {
    let mut app = App::new(Vec::new());
    press(&mut app, &[KeyCode::Char(' ')]);
    assert!(footer(&screen(&app, 80, 24)).contains("nothing to pause"), "no device yet");
    app.apply(oomscope_tui::Update::Device { id: 0, device: Box::new(live_unet()) });
    press(&mut app, &[KeyCode::Char(' ')]);
    assert!(app.paused);
    let s = screen(&app, 80, 24);
    assert!(s.lines().nth(1).unwrap().contains("PAUSED"), "{s}");
    assert!(!footer(&s).contains("nothing to pause"), "{s}");
    assert!(footer(&s).contains("space resumes"), "{s}");
    // With the message gone, the keys say the same.
    press(&mut app, &[KeyCode::Char('2')]);
    let s = screen(&app, 80, 24);
    assert!(footer(&s).contains("space resume") && !footer(&s).contains("space pause"), "{s}");
    press(&mut app, &[KeyCode::Char(' ')]);
    assert!(!app.paused);
    let s = screen(&app, 80, 24);
    assert!(s.lines().nth(1).unwrap().contains("LIVE") && footer(&s).contains("space pause"), "{s}");
}

/// Enter on a node lists its allocations: the status bar then speaks of the Allocations
/// view and its filter; `/` starts a new filter instead of adding to the node's name; Esc
/// clears the filter before it quits.
#[test]
fn the_allocations_of_a_node_and_a_new_filter() {
    let mut app = unet();
    app.update(oomscope_tui::Action::Show(View::Nodes));
    press(&mut app, &[KeyCode::Char('s'), KeyCode::Char('s')]);
    assert!(footer(&screen(&app, 80, 24)).contains("nodes sorted by name"));
    press(&mut app, &[KeyCode::End, KeyCode::Enter]);
    assert_eq!(app.view, View::Allocations);
    let node = app.allocs.filter.text.clone();
    assert!(!node.is_empty());
    let s = screen(&app, 80, 24);
    let bar = footer(&s);
    assert!(!bar.contains("nodes"), "the Allocations view's keys, not the Nodes view's: {bar}");
    assert!(bar.contains("Enter detail") && bar.contains("Esc clear"), "{bar}");
    assert!(s.contains(&format!("filter \"{}", &node[..node.len().min(20)])), "{s}");

    press(&mut app, &[KeyCode::Char('/')]);
    for c in "unet_05".chars() {
        press(&mut app, &[KeyCode::Char(c)]);
    }
    press(&mut app, &[KeyCode::Enter]);
    assert_eq!(app.allocs.filter.text, "unet_05", "a new filter, not {node} followed by it");
    let s = screen(&app, 80, 24);
    assert!(s.contains("filter \"unet_05\": 18"), "{s}");

    press(&mut app, &[KeyCode::Esc]);
    assert!(!app.quit && !app.allocs.filter.is_active(), "Esc clears the filter first");
    press(&mut app, &[KeyCode::Esc]);
    assert!(app.quit, "then it quits");
}

/// `/` in the Report view searches it: the letters typed are the search (q among them),
/// Enter goes to the first match, n and N to the next and previous, and the matches are
/// marked.
#[test]
fn the_report_is_searched_with_slash_and_n() {
    let mut app = unet();
    app.update(oomscope_tui::Action::Show(View::Report));
    let _ = screen(&app, 80, 24);
    press(&mut app, &[KeyCode::Char('/')]);
    for c in "requested".chars() {
        press(&mut app, &[KeyCode::Char(c)]);
    }
    assert!(!app.quit, "the q of the search is a letter");
    assert_eq!(app.search.text, "requested");
    assert!(footer(&screen(&app, 80, 24)).contains("search:  requested"));
    press(&mut app, &[KeyCode::Enter]);
    let (first, _) = app.report_match.expect("the report says requested");
    let report = app.device().unwrap().report.clone().unwrap();
    let line = |i: usize| report.lines().nth(i).unwrap().to_lowercase();
    assert!(line(first).contains("requested"), "{}", line(first));
    assert!(report.lines().take(first).all(|l| !l.to_lowercase().contains("requested")), "the first match");
    let s = screen(&app, 80, 24);
    assert!(s.contains("search \"requested\""), "{s}");
    assert!(footer(&s).contains(&format!("on line {}", first + 1)), "{s}");
    assert_golden("tui-unet-report-search-80x24.txt", &s);
    // The match on screen is marked.
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| oomscope_tui::draw(f, &app)).unwrap();
    let buf = t.backend().buffer();
    let marked: String = (0..24)
        .flat_map(|y| (0..80).map(move |x| (x, y)))
        .filter(|&(x, y)| buf[(x, y)].bg == oomscope_tui::ratatui::style::Color::Magenta)
        .map(|(x, y)| buf[(x, y)].symbol().to_string())
        .collect();
    assert_eq!(marked.to_lowercase(), "requested");

    press(&mut app, &[KeyCode::Char('n')]);
    let (second, _) = app.report_match.unwrap();
    assert!(second > first && line(second).contains("requested"), "{first} then {second}");
    press(&mut app, &[KeyCode::Char('N')]);
    assert_eq!(app.report_match.unwrap().0, first);
    press(&mut app, &[KeyCode::Char('N')]);
    let last = app.report_match.unwrap().0;
    assert!(last > second, "N from the first wraps to the last");
    assert!(footer(&screen(&app, 80, 24)).contains("wrapped to the bottom"));

    // A search for nothing says so; Esc ends the search, then quits.
    press(&mut app, &[KeyCode::Char('/')]);
    for c in "no such text".chars() {
        press(&mut app, &[KeyCode::Char(c)]);
    }
    press(&mut app, &[KeyCode::Enter]);
    assert!(footer(&screen(&app, 80, 24)).contains("no match for \"no such text\""));
    press(&mut app, &[KeyCode::Esc]);
    assert!(!app.quit && !app.search.is_active());
    press(&mut app, &[KeyCode::Esc]);
    assert!(app.quit);
}

/// Op names with a right-to-left override and an escape sequence (from a snapshot or log
/// anyone could have written) reach no terminal raw: every view shows the text as written,
/// without the controls, and `report` writes them out (`\u{202e}`).
#[test]
fn direction_overrides_and_escapes_in_names_are_not_sent_to_the_terminal() {
    let mut d = dump::read(&root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    let hostile = "shared_model/\u{202e}gnp.exe\u{1b}]0;pwned\u{7}/Conv2D";
    d.usage_by_node[0].op = hostile.into();
    for r in &mut d.regions {
        for c in &mut r.chunks {
            if c.in_use {
                c.op = Some(hostile.into());
            }
        }
    }
    let mut app = App::new(vec![from_dump(&d, "dump hostile", view_report(&d))]);
    for v in View::ALL {
        app.update(oomscope_tui::Action::Show(v));
        let s = screen(&app, 160, 48);
        assert!(!s.contains(oomscope_base::text::unsafe_char), "{v:?}: {s:?}");
        if v == View::Nodes {
            assert!(s.contains("gnp.exe"), "the name stays readable: {s}");
        }
    }
    let dir = temp_dir("tui-hostile-names");
    let path = dir.join("hostile.dump.json");
    dump::write_atomic(&path, &d).unwrap();
    let o = oomscope(&["report", path.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains(oomscope_base::text::unsafe_char), "{out}");
    assert!(out.contains("shared_model/\\u{202e}gnp.exe\\x1b]0;pwned\\x07/Conv2D"), "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}
