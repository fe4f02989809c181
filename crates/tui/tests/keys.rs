//! Keys and updates change the state as a user expects; drawing every state never panics.

use oomscope_format::{BinInfo as Bin, NodeUsage as Node};
use oomscope_tui::app::{AllocSort, NodeSort};
use oomscope_tui::model::{Device, Region, Span, Stats, Status, Update};
use oomscope_tui::ratatui::Terminal;
use oomscope_tui::ratatui::backend::TestBackend;
use oomscope_tui::ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use oomscope_tui::{Action, App, View};

fn key(app: &mut App, code: KeyCode) {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
    // Every state draws, at the smallest supported size and a large one.
    for (w, h) in [(80, 24), (160, 48), (20, 6)] {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| oomscope_tui::draw(f, app)).unwrap();
    }
}

fn keys(app: &mut App, s: &str) {
    for c in s.chars() {
        key(app, KeyCode::Char(c));
    }
}

/// A device with a small scope tree and three regions' worth of spans.
fn device(name: &str, status: Status) -> Device {
    let ops = ["", "model/conv1/Conv2D", "model/conv1/Relu", "model/conv2/Conv2D", "input"];
    let mut spans = Vec::new();
    let mut addr = 0x1000_0000;
    let mut regions = Vec::new();
    for r in 0..3u64 {
        let start = spans.len();
        let base = addr;
        for i in 0..4u64 {
            let used = (i + r) % 3 != 0;
            let size = (1 + i) << 20;
            spans.push(Span {
                address: addr,
                size,
                requested: if used { size - 4096 } else { 0 },
                in_use: if used { size } else { 0 },
                chunks: 1,
                op: if used { 1 + ((i + r) % 4) as u32 } else { 0 },
                shape: 0,
                stack: 0,
                step: used.then_some(r as i64),
            });
            addr += size;
        }
        regions.push(Region { address: base, size: addr - base, spans: start..spans.len() });
    }
    let mut nodes: Vec<Node> = Vec::new();
    for s in spans.iter().filter(|s| s.is_used()) {
        let name = ops[s.op as usize].to_string();
        match nodes.iter_mut().find(|n| n.op == name) {
            Some(n) => {
                n.bytes += s.in_use;
                n.requested += s.requested;
                n.count += 1;
            }
            None => nodes.push(Node { op: name, bytes: s.in_use, requested: s.requested, count: 1 }),
        }
    }
    nodes.sort_by_key(|n| std::cmp::Reverse(n.bytes));
    Device {
        name: name.into(),
        status,
        stats: Stats {
            limit: 64 << 20,
            allocator: oomscope_format::Stats { bytes_in_use: 20 << 20, ..Default::default() },
            known: true,
            ..Stats::default()
        },
        nodes,
        bins: (0..21).map(|i| Bin { index: i, size: 256 << i, ..Bin::default() }).collect(),
        regions,
        spans,
        ops: ops.iter().map(|s| s.to_string()).collect(),
        shapes: vec![String::new()],
        stacks: vec![Vec::new()],
        report: Some((0..100).map(|i| format!("line {i}\n")).collect()),
        ..Device::default()
    }
}

#[test]
fn views_by_tab_numbers_and_back() {
    let mut app = App::new(vec![device("GPU_0_bfc", Status::PostMortem)]);
    assert_eq!(app.view, View::Overview);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.view, View::Nodes);
    key(&mut app, KeyCode::BackTab);
    key(&mut app, KeyCode::BackTab);
    assert_eq!(app.view, View::Report, "Shift-Tab wraps around");
    keys(&mut app, "4");
    assert_eq!(app.view, View::Map);
    keys(&mut app, "9");
    assert_eq!(app.view, View::Map, "keys without a meaning do nothing");
    assert!(!app.quit);
}

#[test]
fn quit_keys_and_what_escape_closes_first() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "?");
    assert!(app.help);
    key(&mut app, KeyCode::Esc);
    assert!(!app.help && !app.quit, "Esc closes the help first");
    keys(&mut app, "5");
    key(&mut app, KeyCode::Enter);
    assert!(app.allocs.detail);
    key(&mut app, KeyCode::Esc);
    assert!(!app.allocs.detail && !app.quit, "then the detail pane");
    key(&mut app, KeyCode::Esc);
    assert!(app.quit, "then it quits");

    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "q");
    assert!(app.quit && !app.interrupted);
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert!(app.quit, "Ctrl-C quits even in raw mode");
    assert!(app.interrupted, "as an interrupt: the command exits 130");
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "6/");
    app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert!(app.quit && app.interrupted, "even while a search is typed");
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    app.handle_key(KeyEvent::new(KeyCode::Char('d'), KeyModifiers::CONTROL));
    assert!(app.quit && !app.interrupted, "Ctrl-D quits as q does");
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "2/");
    keys(&mut app, "q");
    assert!(!app.quit, "q while typing a filter is a letter");
    assert_eq!(app.nodes.filter.text, "q");
}

#[test]
fn nodes_sort_filter_and_enter_to_allocations() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "2");
    let names = |app: &App| app.slot().unwrap().node_rows.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    let by_bytes = names(&app);
    let rows = &app.slot().unwrap().node_rows;
    assert!(rows.windows(2).all(|w| w[0].bytes >= w[1].bytes), "largest first");
    keys(&mut app, "s");
    assert_eq!(app.nodes.sort, NodeSort::Count);
    keys(&mut app, "s");
    assert_eq!(app.nodes.sort, NodeSort::Name);
    let mut sorted = by_bytes.clone();
    sorted.sort();
    assert_eq!(names(&app), sorted);
    keys(&mut app, "s");
    assert_eq!(app.nodes.sort, NodeSort::Bytes);

    keys(&mut app, "/conv1");
    assert!(app.nodes.filter.editing);
    assert_eq!(names(&app).len(), 2, "{:?}", names(&app));
    assert!(names(&app).iter().all(|n| n.contains("conv1")), "{:?}", names(&app));
    key(&mut app, KeyCode::Backspace);
    assert_eq!(app.nodes.filter.text, "conv");
    key(&mut app, KeyCode::Enter);
    assert!(!app.nodes.filter.editing && app.nodes.filter.is_active(), "Enter keeps the filter");
    let first = names(&app)[0].clone();
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.view, View::Allocations, "Enter on a node lists its allocations");
    assert_eq!(app.allocs.filter.text, first);
    let d = app.device().unwrap();
    let rows = &app.slot().unwrap().alloc_rows;
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|&i| d.op(&d.spans[i as usize]).contains(&first)));
}

#[test]
fn the_tree_folds_by_scope() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "2t");
    assert!(app.nodes.tree);
    let labels = |app: &App| {
        app.slot().unwrap().node_rows.iter().map(|r| format!("{}{}", " ".repeat(r.depth), r.label)).collect::<Vec<_>>()
    };
    // Roots open, scopes below folded.
    let shown = labels(&app);
    assert!(shown.contains(&"model".to_string()) && shown.contains(&" conv1".to_string()), "{shown:?}");
    assert!(!shown.iter().any(|l| l.trim() == "Relu"), "conv1 is folded: {shown:?}");
    let conv1 = shown.iter().position(|l| l == " conv1").unwrap();
    app.nodes.list.selected = conv1;
    key(&mut app, KeyCode::Right);
    assert!(labels(&app).iter().any(|l| l == "  Relu"), "→ unfolds: {:?}", labels(&app));
    key(&mut app, KeyCode::Left);
    assert!(!labels(&app).iter().any(|l| l == "  Relu"), "← folds");
    key(&mut app, KeyCode::Enter);
    assert!(labels(&app).iter().any(|l| l == "  Relu"), "Enter toggles");
    // ← on a leaf goes to its scope.
    app.nodes.list.selected = labels(&app).iter().position(|l| l == "  Relu").unwrap();
    key(&mut app, KeyCode::Left);
    assert_eq!(app.nodes.list.selected, conv1);
    // The scope's bytes are the sum of its ops.
    let rows = &app.slot().unwrap().node_rows;
    let d = app.device().unwrap();
    let conv1_bytes: u64 = d.nodes.iter().filter(|n| n.op.starts_with("model/conv1/")).map(|n| n.bytes).sum();
    assert_eq!(rows[conv1].bytes, conv1_bytes);
}

#[test]
fn allocations_sort_filter_and_detail() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "5");
    let d = app.device().unwrap().clone();
    let sizes =
        |app: &App| app.slot().unwrap().alloc_rows.iter().map(|&i| d.spans[i as usize].in_use).collect::<Vec<_>>();
    let s = sizes(&app);
    assert_eq!(s.len(), d.spans.iter().filter(|s| s.is_used()).count(), "every live allocation");
    assert!(s.windows(2).all(|w| w[0] >= w[1]), "largest first: {s:?}");
    keys(&mut app, "s");
    assert_eq!(app.allocs.sort, AllocSort::Address);
    let addrs: Vec<u64> = app.slot().unwrap().alloc_rows.iter().map(|&i| d.spans[i as usize].address).collect();
    assert!(addrs.windows(2).all(|w| w[0] < w[1]));
    keys(&mut app, "/RELU");
    key(&mut app, KeyCode::Enter);
    assert!(
        app.slot().unwrap().alloc_rows.iter().all(|&i| d.op(&d.spans[i as usize]) == "model/conv1/Relu"),
        "case-insensitive"
    );
    assert_eq!(app.slot().unwrap().alloc_rows.len(), 3, "i + r is 1 or 5");
    key(&mut app, KeyCode::End);
    let n = app.slot().unwrap().alloc_rows.len();
    assert_eq!(app.allocs.list.selected, n - 1);
    key(&mut app, KeyCode::Down);
    assert_eq!(app.allocs.list.selected, n - 1, "stops at the end");
    key(&mut app, KeyCode::Home);
    assert_eq!(app.allocs.list.selected, 0);
}

#[test]
fn the_map_cursor_walks_chunks_and_opens_the_allocation() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "4");
    assert_eq!(app.map.cursor, 0);
    key(&mut app, KeyCode::Right);
    key(&mut app, KeyCode::Right);
    assert_eq!(app.map.cursor, 2);
    key(&mut app, KeyCode::Left);
    assert_eq!(app.map.cursor, 1);
    key(&mut app, KeyCode::Down);
    assert!(app.map.cursor > 1, "↓ moves a row down the map");
    key(&mut app, KeyCode::End);
    let n = app.device().unwrap().spans.len();
    assert_eq!(app.map.cursor, n - 1);
    // The last span of region 3 (i = 3, r = 2: (3 + 2) % 3 != 0) is in use.
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.view, View::Allocations);
    assert!(app.allocs.detail);
    let row = app.slot().unwrap().alloc_rows[app.allocs.list.selected];
    assert_eq!(row as usize, n - 1, "the allocation under the cursor is selected");
}

#[test]
fn pause_holds_live_updates_and_devices_switch() {
    let mut app = App::new(vec![device("a", Status::Live)]);
    keys(&mut app, " ");
    assert!(app.paused);
    let mut newer = device("a", Status::Live);
    newer.stats.allocator.bytes_in_use = 42;
    app.apply(Update::Device { id: 0, device: Box::new(newer) });
    assert_eq!(app.device().unwrap().stats.allocator.bytes_in_use, 20 << 20, "paused: the screen keeps its state");
    assert_eq!(app.slot().unwrap().held_count, 1);
    app.apply(Update::Status { id: 0, status: Status::Disconnected("gone".into()) });
    assert_eq!(app.device().unwrap().status, Status::Disconnected("gone".into()), "a disconnect shows even paused");
    keys(&mut app, " ");
    assert!(!app.paused);
    assert_eq!(app.device().unwrap().stats.allocator.bytes_in_use, 42, "resumed: the held update applies");
    assert_eq!(app.device().unwrap().status, Status::Disconnected("gone".into()));

    // A dump cannot be paused.
    let mut app = App::new(vec![device("a", Status::PostMortem)]);
    keys(&mut app, " ");
    assert!(!app.paused);
    assert!(app.message.as_deref().unwrap().contains("nothing to pause"));

    // Several devices: [ and ] switch, wrapping.
    app.apply(Update::Device { id: 1, device: Box::new(device("b", Status::Live)) });
    assert_eq!(app.device().unwrap().name, "a");
    keys(&mut app, "]");
    assert_eq!(app.device().unwrap().name, "b");
    keys(&mut app, "]");
    assert_eq!(app.device().unwrap().name, "a");
    keys(&mut app, "[");
    assert_eq!(app.device().unwrap().name, "b");
}

#[test]
fn the_report_scrolls_within_its_lines() {
    let mut app = App::new(vec![device("a", Status::PostMortem)]);
    keys(&mut app, "6");
    key(&mut app, KeyCode::PageDown);
    assert!(app.report.selected > 0);
    key(&mut app, KeyCode::End);
    let top = app.report.selected;
    key(&mut app, KeyCode::Down);
    assert_eq!(app.report.selected, top, "the last page stays the last page");
    assert!(top < 100);
    key(&mut app, KeyCode::Right);
    assert_eq!(app.report_column, oomscope_tui::app::REPORT_STEP);
    key(&mut app, KeyCode::Left);
    key(&mut app, KeyCode::Left);
    assert_eq!(app.report_column, 0);
}

#[test]
fn an_empty_app_waits_and_actions_on_nothing_are_harmless() {
    let mut app = App::new(Vec::new());
    app.waiting = Some("waiting for a process".into());
    for a in
        [Action::NextView, Action::Enter, Action::Down, Action::Sort, Action::Tree, Action::FilterStart, Action::Pause]
    {
        app.update(a);
    }
    for v in View::ALL {
        app.update(Action::Show(v));
        key(&mut app, KeyCode::Enter);
        key(&mut app, KeyCode::Right);
    }
    assert!(!app.quit);
    app.apply(Update::Message("hello".into()));
    assert_eq!(app.message.as_deref(), Some("hello"));
}

#[test]
fn the_report_search_goes_from_match_to_match() {
    let mut app = App::new(vec![device("a", Status::PostMortem)]);
    keys(&mut app, "6/LINE 9");
    assert!(app.editing() && app.search.text == "LINE 9", "the letters are the search");
    key(&mut app, KeyCode::Enter);
    assert!(!app.editing());
    // Case ignored; lines "line 9", "line 90".."line 99" match, in order, then wrap.
    assert_eq!(app.report_match, Some((9, 0)));
    keys(&mut app, "n");
    assert_eq!(app.report_match, Some((90, 0)));
    assert!(app.report.selected > 0, "scrolled to the match");
    for _ in 0..10 {
        keys(&mut app, "n");
    }
    assert_eq!(app.report_match, Some((9, 0)), "wrapped to the first");
    assert!(app.message.as_deref().unwrap().starts_with("wrapped to the top"));
    keys(&mut app, "N");
    assert_eq!(app.report_match, Some((99, 0)));
    // Outside the Report view n is not a search.
    keys(&mut app, "1n");
    assert!(app.message.as_deref().unwrap().contains("Report"));
    assert_eq!(oomscope_tui::app::find_ignore_case("Die Größe, die GRÖSSE", "grö"), vec![(4, 3), (15, 3)]);
    assert_eq!(oomscope_tui::app::find_ignore_case("aaaa", "aa"), vec![(0, 2), (2, 2)]);
}

fn drawn(app: &App, w: u16, h: u16) -> oomscope_tui::ratatui::buffer::Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| oomscope_tui::draw(f, app)).unwrap();
    t.backend().buffer().clone()
}

/// `/` opens a filter in every view (the overview's is the Nodes view's, the bins' the
/// Allocations view's, the map's its own), so what is typed after it is text, never keys.
#[test]
fn slash_opens_a_filter_in_every_view_so_letters_are_never_keys() {
    for (v, lands) in [
        (View::Overview, View::Nodes),
        (View::Nodes, View::Nodes),
        (View::Bins, View::Allocations),
        (View::Map, View::Map),
        (View::Allocations, View::Allocations),
        (View::Report, View::Report),
    ] {
        let mut app = App::new(vec![device("d", Status::PostMortem)]);
        app.update(Action::Show(v));
        keys(&mut app, "/tsq");
        assert!(!app.quit, "{v:?}: q after / is a letter");
        assert_eq!(app.view, lands, "{v:?}");
        let typing = [&app.nodes.filter, &app.allocs.filter, &app.map.filter, &app.search];
        let typed: Vec<&str> = typing.iter().filter(|f| f.editing).map(|f| f.text.as_str()).collect();
        assert_eq!(typed, ["tsq"], "{v:?}: one filter takes the letters");
        assert!(!app.nodes.tree && app.nodes.sort == NodeSort::Bytes, "{v:?}: t and s were letters");
        key(&mut app, KeyCode::Esc);
        assert!(!app.editing() && !app.quit, "{v:?}: Esc leaves the filter");
    }
}

#[test]
fn the_map_filter_marks_an_ops_chunks_and_n_walks_them() {
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "4/relu");
    assert!(app.map.filter.editing);
    key(&mut app, KeyCode::Enter);
    assert!(!app.editing());
    let d = app.device().unwrap().clone();
    let relu: Vec<usize> = (0..d.spans.len()).filter(|&i| d.op(&d.spans[i]) == "model/conv1/Relu").collect();
    assert_eq!(relu.len(), 3);
    assert_eq!(app.map.cursor, relu[0], "Enter goes to the first match");
    assert!(app.message.as_deref().unwrap().contains("3 chunk(s)"), "{:?}", app.message);
    keys(&mut app, "n");
    assert_eq!(app.map.cursor, relu[1]);
    keys(&mut app, "NN");
    assert_eq!(app.map.cursor, relu[2], "N wraps to the last");
    let text: String = drawn(&app, 80, 24).content.iter().map(|c| c.symbol()).collect();
    assert!(text.contains('░'), "other ops' chunks are shaded");
    assert!(text.contains("\"relu\": 3 chunk(s)"), "the title says what the filter holds");
    key(&mut app, KeyCode::Esc);
    assert!(!app.map.filter.is_active() && !app.quit, "Esc clears the filter first");
    key(&mut app, KeyCode::Esc);
    assert!(app.quit);
}

/// In-use cells take their op's colour, `c` goes back to the state colours, and without
/// colour nothing on screen has one: the selection and the cursor are reversed instead.
#[test]
fn the_map_is_coloured_by_op_by_state_or_not_at_all() {
    use oomscope_tui::ratatui::style::{Color, Modifier};
    let mut app = App::new(vec![device("d", Status::PostMortem)]);
    keys(&mut app, "4");
    let used_colours = |app: &App| {
        let buf = drawn(app, 80, 24);
        let mut c: Vec<String> =
            buf.content.iter().filter(|c| c.symbol() == "█").map(|c| format!("{:?}", c.fg)).collect();
        c.sort();
        c.dedup();
        c
    };
    let by_op = used_colours(&app);
    assert!(by_op.len() >= 3, "the ops' colours: {by_op:?}");
    keys(&mut app, "c");
    assert!(app.map.by_state);
    assert_eq!(used_colours(&app), [format!("{:?}", Color::Green)], "by state: one colour for in use");
    keys(&mut app, "c");
    assert!(!app.map.by_state);

    app.monochrome = true;
    for v in View::ALL {
        app.update(Action::Show(v));
        let buf = drawn(&app, 80, 24);
        assert!(buf.content.iter().all(|c| c.fg == Color::Reset && c.bg == Color::Reset), "{v:?} has no colour");
        // The tab on screen stands out by reversal.
        let tab = v.title();
        let row: String = (0..80).map(|x| buf[(x, 0)].symbol().to_string()).collect();
        let at = row.chars().collect::<Vec<_>>().windows(tab.len()).position(|w| w.iter().collect::<String>() == tab);
        let x = at.unwrap() as u16;
        assert!(buf[(x, 0)].modifier.contains(Modifier::REVERSED), "{v:?}: its tab is reversed");
    }
    app.update(Action::Show(View::Map));
    let buf = drawn(&app, 80, 24);
    // The first cell of the grid (the title's legend has one too).
    let cursor = &buf[(1, 3)];
    assert_eq!(cursor.symbol(), "▒");
    assert!(cursor.modifier.contains(Modifier::REVERSED), "the map's cursor is reversed");
}

/// Attached to whatever publishes: when the process on screen has ended and another starts
/// (the user ran the program again), the new one takes its place; one the user named stays.
#[test]
fn a_process_that_starts_after_the_one_on_screen_ended_takes_its_place() {
    let process = |pid: u32, status: Status| {
        let mut d = device("GPU_0_bfc", status);
        d.origin = format!("pid {pid}: python train.py");
        Box::new(d)
    };
    let gone = || Status::Disconnected("the process closed the feed (it exited)".into());
    let mut app = App::new(Vec::new());
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    app.apply(Update::Device { id: 1, device: process(200, Status::Live) });
    assert_eq!(app.current, 0, "a process alongside does not take the screen");
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    assert_eq!(app.current, 0, "an ended process stays on screen");
    assert!(app.message.as_deref().unwrap().contains("pid 100 ended"), "{:?}", app.message);
    app.apply(Update::Device { id: 2, device: process(300, Status::Live) });
    assert_eq!(app.current, 2, "the process started since is shown");
    let msg = app.message.clone().unwrap();
    assert!(msg.contains("now following pid 300") && msg.contains("[ shows pid 100"), "{msg}");
    let header: String = {
        let buf = drawn(&app, 160, 48);
        (0..160).map(|x| buf[(x, 1)].symbol().to_string()).collect()
    };
    assert!(header.contains("[3/3]") && header.contains("the next process after pid 100 ended"), "{header}");
    keys(&mut app, "[");
    assert_eq!(app.current, 1, "[ still goes back");

    // Paused: the screen keeps what the user looks at. The attach source says a process
    // ended as it says everything, with a whole frame (`Update::Device`), which pausing holds.
    let mut app = App::new(Vec::new());
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    keys(&mut app, " ");
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    assert_eq!(app.device().unwrap().status, Status::Live, "the frame saying it ended is held");
    app.apply(Update::Device { id: 1, device: process(300, Status::Live) });
    assert_eq!(app.current, 0);
    let footer = |app: &App| {
        let buf = drawn(app, 160, 48);
        (0..160).map(|x| buf[(x, 47)].symbol().to_string()).collect::<String>()
    };
    assert!(footer(&app).contains("pid 300 started publishing: [ and ] show it"), "{}", footer(&app));
    // Resuming applies the held frames as if they came now: pid 100 ended, pid 300 follows.
    keys(&mut app, " ");
    assert!(!app.paused);
    assert_eq!(app.current, 1, "resuming moves to the process that started since");
    assert!(matches!(app.devices[0].device.status, Status::Disconnected(_)));
    let msg = app.message.clone().unwrap();
    assert!(msg.contains("pid 100 ended; now following pid 300"), "{msg}");
    assert_eq!(app.devices[1].note.as_deref(), Some("the next process after pid 100 ended"));

    // Paused after it ended (another process alongside is still live): the same on resume.
    let mut app = App::new(Vec::new());
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    app.apply(Update::Device { id: 1, device: process(200, Status::Live) });
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    keys(&mut app, " ");
    assert!(app.paused);
    app.apply(Update::Device { id: 2, device: process(300, Status::Live) });
    assert_eq!(app.current, 0);
    assert!(app.message.as_deref().unwrap().contains("pid 300 started publishing"), "{:?}", app.message);
    keys(&mut app, " ");
    assert_eq!(app.current, 2);

    // Paused, it ends and nothing starts: resuming says it ended.
    let mut app = App::new(Vec::new());
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    keys(&mut app, " ");
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    keys(&mut app, " ");
    assert_eq!(app.message.as_deref(), Some("pid 100 ended: its last state stays until another process publishes"));

    // Paused, the user moved to another process with ]: resuming leaves them there.
    let mut app = App::new(Vec::new());
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    app.apply(Update::Device { id: 1, device: process(200, Status::Live) });
    keys(&mut app, " ");
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    app.apply(Update::Device { id: 2, device: process(300, Status::Live) });
    keys(&mut app, "] ");
    assert_eq!(app.current, 1, "the user's choice stays");

    // Named on the command line: it stays, and the footer says it ended.
    let mut app = App::new(Vec::new());
    app.pinned = true;
    app.apply(Update::Device { id: 0, device: process(100, Status::Live) });
    app.apply(Update::Device { id: 0, device: process(100, gone()) });
    assert_eq!(app.message.as_deref(), Some("pid 100 ended: its last state stays on screen"));
    app.apply(Update::Device { id: 1, device: process(300, Status::Live) });
    assert_eq!(app.current, 0);
}
