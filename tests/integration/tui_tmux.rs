//! The real binary driven in tmux (`send-keys`, `capture-pane`): what a user sees, and that
//! the terminal is usable afterwards whether the user quits, presses Ctrl-C, the attached
//! process dies, or the UI panics. Ignored, with the reason, where tmux is missing (`.ci/run`
//! installs it).

use crate::common::{live_dir, require, root, temp_dir};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
}

impl Tmux {
    /// A tmux server of our own (the test fails when tmux cannot run).
    fn new() -> Tmux {
        static N: AtomicUsize = AtomicUsize::new(0);
        require("tmux");
        Tmux { socket: format!("oomscope-test-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)) }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .current_dir(root())
            .output()
            .expect("tmux runs")
    }

    /// Starts `command` in a detached session of `w`×`h`; the pane stays after it exits.
    fn start(&self, w: u16, h: u16, command: &str) {
        let cmd = format!("{command}; echo \"EXIT=$?\"; sleep 600");
        let o = self.run(&["new-session", "-d", "-s", "t", "-x", &w.to_string(), "-y", &h.to_string(), &cmd]);
        assert!(o.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&o.stderr));
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// The screen with what it is drawn in, as SGR escapes (`capture-pane -e`).
    fn screen_escaped(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-e", "-p", "-t", "t"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", "t", k]);
        }
    }

    /// Waits until the screen contains `text`; returns the screen.
    fn wait_for(&self, text: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("waited {secs}s for {text:?}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn format(&self, f: &str) -> String {
        String::from_utf8_lossy(&self.run(&["display-message", "-p", "-t", "t", f]).stdout).trim().to_string()
    }

    /// The terminal is back to normal: main screen, cursor shown.
    fn assert_restored(&self) {
        assert_eq!(self.format("#{alternate_on}"), "0", "left the alternate screen");
        assert_eq!(self.format("#{cursor_flag}"), "1", "the cursor is visible");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_oomscope")
}

#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn demo_tui_shows_memory_climb_to_the_oom_then_prints_the_report() {
    let t = Tmux::new();
    t.start(100, 30, &format!("{} demo --tui --seconds 4", bin()));
    let climbing = t.wait_for("REPLAYING", 20);
    assert!(climbing.contains("in use and pool"), "{climbing}");
    let done = t.wait_for("FINISHED", 30);
    assert!(done.contains("OOM: 450.00MiB requested by shared_model/unet_10/FusedBatchNorm"), "{done}");
    assert!(done.contains("verdict: true peak") && done.contains("fix: train at batch 1"), "{done}");
    t.keys(&["2"]);
    let nodes = t.wait_for("ResizeBilinear", 10);
    assert!(nodes.contains("900.00MiB"), "{nodes}");
    t.keys(&["4"]);
    t.wait_for("memory map: 8.00GiB", 10);
    t.keys(&["6"]);
    t.wait_for("BFCAllocator dump for GPU_0_bfc", 10);
    t.keys(&["q"]);
    let after = t.wait_for("EXIT=0", 10);
    // The report is printed once the UI is gone, as without --tui.
    assert!(after.contains("Verdict: true peak") && after.contains("out of memory after"), "{after}");
    t.assert_restored();
}

/// Ctrl-C in `demo --tui` exits 130, as a shell reports an interrupted program, while the run
/// plays and after it ends, without the report; q still exits 0.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn ctrl_c_in_demo_tui_exits_130() {
    let t = Tmux::new();
    t.start(100, 30, &format!("{} demo --tui --seconds 20", bin()));
    t.wait_for("REPLAYING", 20);
    t.keys(&["C-c"]);
    let s = t.wait_for("EXIT=", 10);
    assert!(s.contains("EXIT=130"), "{s}");
    assert!(s.contains("oomscope: interrupted") && !s.contains("Verdict:"), "no report: {s}");
    t.assert_restored();

    let t = Tmux::new();
    t.start(100, 30, &format!("{} demo --tui --seconds 2", bin()));
    t.wait_for("FINISHED", 30);
    t.keys(&["C-c"]);
    let s = t.wait_for("EXIT=", 10);
    assert!(s.contains("EXIT=130"), "after the end too: {s}");
    t.assert_restored();
}

#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn attach_follows_a_live_process_and_keeps_its_last_state_when_it_dies() {
    let t = Tmux::new();
    let dir = live_dir("tmux-attach");
    let base = dir.parent().unwrap().to_path_buf();
    t.start(100, 30, &format!("OOMSCOPE_LIVE_DIR={} {} tui --attach", dir.display(), bin()));
    t.wait_for("waiting for a process to publish", 20);
    let mut publisher = publisher(&dir, "3");
    let live = t.wait_for(" LIVE ", 20);
    assert!(live.contains(&format!("pid {}", publisher.id())), "{live}");
    assert!(publisher.wait().unwrap().success());
    let gone = t.wait_for("DISCONNECTED", 20);
    assert!(gone.contains("OOM: 450.00MiB"), "the post-mortem stays on screen: {gone}");
    assert!(gone.contains("verdict: true peak"), "{gone}");
    // Ctrl-C ends the viewer as an interrupt ends a program: exit status 130.
    t.keys(&["C-c"]);
    t.wait_for("EXIT=130", 10);
    t.assert_restored();
    std::fs::remove_dir_all(base).unwrap();
}

#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn a_dump_opens_redraws_on_resize_and_shows_help() {
    let t = Tmux::new();
    t.start(160, 48, &format!("{} tui fixtures/dumps/unet-b2.dump.json", bin()));
    // The first frame may be captured half drawn: wait for what it ends with.
    let big = t.wait_for("verdict: true peak", 20);
    assert!(big.contains("POST-MORTEM"), "{big}");
    t.run(&["resize-window", "-t", "t", "-x", "80", "-y", "24"]);
    let small = t.wait_for("fix: train at batch 1", 10);
    assert!(small.lines().all(|l| l.chars().count() <= 80), "redrawn for 80 columns:\n{small}");
    t.keys(&["?"]);
    t.wait_for("any key closes this help", 10);
    t.keys(&["Escape"]);
    let closed = {
        std::thread::sleep(Duration::from_millis(300));
        t.screen()
    };
    assert!(!closed.contains("any key closes this help"), "{closed}");
    t.keys(&["5", "/", "u", "n", "e", "t", "_", "0", "5", "Enter"]);
    t.wait_for("filter \"unet_05\": 18", 10);
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
}

/// `oomscope run --tui`: the wrapped program's allocator appears live, its OOM stays on
/// screen after it exits, and the program's output went to the log file named at the end.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn run_tui_watches_a_wrapped_program() {
    let t = Tmux::new();
    require("python3");
    let dumps = temp_dir("tmux-run");
    t.start(
        100,
        30,
        &format!(
            "PYTHONPATH=tests/python {} run --tui --device sim:1GiB --dump-dir {} -- python3 tests/python/slow_oom.py",
            bin(),
            dumps.display()
        ),
    );
    let live = t.wait_for(" LIVE ", 30);
    assert!(live.contains("pytorch_caching_allocator"), "PyTorch's allocator by default: {live}");
    let gone = t.wait_for("DISCONNECTED", 30);
    assert!(gone.contains("OOM: 64.00MiB requested by model/block"), "{gone}");
    t.keys(&["2"]);
    t.wait_for("model/block0", 10);
    t.keys(&["q"]);
    let after = t.wait_for("EXIT=0", 20);
    assert!(after.contains("the program's output is in") && after.contains("an OOM dump was written"), "{after}");
    t.assert_restored();
    let log = crate::common::files_in(&dumps).into_iter().find(|f| f.ends_with(".log")).expect("a log file");
    let text = std::fs::read_to_string(dumps.join(log)).unwrap();
    assert!(text.contains("out of memory at step 16"), "the program's output: {text}");
    std::fs::remove_dir_all(dumps).unwrap();
}

/// A TF log pasted from an issue is a TUI session in one command.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn a_tf_log_opens_in_one_command() {
    let t = Tmux::new();
    t.start(100, 30, &format!("{} tui fixtures/logs/seed-001-mnist.txt", bin()));
    let s = t.wait_for("POST-MORTEM", 20);
    assert!(s.contains("TF log fixtures/logs/seed-001-mnist.txt"), "{s}");
    assert!(s.contains("OOM: 957.03MiB requested by Conv2D"), "{s}");
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
}

#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn a_panic_leaves_the_terminal_usable() {
    let t = Tmux::new();
    t.start(100, 30, &format!("OOMSCOPE_TUI_TEST_PANIC=1 {} tui fixtures/dumps/unet-b2.dump.json", bin()));
    let s = t.wait_for("EXIT=", 20);
    assert!(s.contains("panicking on purpose"), "the panic message is readable: {s}");
    assert!(!s.contains("EXIT=0"), "a panic is a failure: {s}");
    t.assert_restored();
}

/// The pid of the `oomscope` process the pane's shell runs.
fn viewer_pid(t: &Tmux) -> i32 {
    let shell = t.format("#{pane_pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = Command::new("pgrep").args(["-P", &shell, "oomscope"]).output().expect("pgrep runs");
        if let Some(pid) = String::from_utf8_lossy(&o.stdout).lines().next().and_then(|l| l.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no oomscope process under the pane's shell {shell}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM, SIGHUP and SIGQUIT end the UI as they end other programs, and the terminal is
/// put back first: main screen, cursor, echo and line editing on.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn terminating_signals_restore_the_terminal() {
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGHUP, "HUP"), (libc::SIGQUIT, "QUIT")] {
        let t = Tmux::new();
        // After the UI: the shell prints the exit status and the terminal's echo and
        // canonical-mode flags.
        t.start(
            100,
            30,
            &format!(
                "ulimit -c 0; {} tui fixtures/dumps/unet-b2.dump.json; code=$?; \
                 flags=$(stty -a | tr ' ;' '\\n\\n' | grep -x -e echo -e -echo -e icanon -e -icanon | tr '\\n' ' '); \
                 echo \"FLAGS=$flags EXIT=$code.\"",
                bin()
            ),
        );
        t.wait_for("POST-MORTEM", 20);
        let pid = viewer_pid(&t);
        // SAFETY: kill(2) to the viewer this test started.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
        let s = t.wait_for("FLAGS=", 10);
        assert!(s.contains(&format!("EXIT={}.", 128 + sig)), "SIG{name}: the signal ends it as usual: {s}");
        assert!(
            s.contains("icanon echo") || s.contains("echo icanon"),
            "SIG{name}: echo and line editing are back: {s}"
        );
        assert!(!s.contains("-echo") && !s.contains("-icanon"), "SIG{name}: {s}");
        t.assert_restored();
    }
}

/// A hostile publisher sending one endless line: the viewer shows why it stopped reading,
/// stays responsive, and quits cleanly.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn a_viewer_attached_to_a_hostile_socket_stops_at_the_line_cap() {
    use std::io::Write;
    let t = Tmux::new();
    let dir = live_dir("tmux-hostile");
    let base = dir.parent().unwrap().to_path_buf();
    let path = dir.join("666.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = oomscope_format::live::Message::Hello(Box::new(oomscope_format::live::Hello {
            protocol: oomscope_format::live::PROTOCOL.into(),
            pid: 666,
            command: "hostile".into(),
            ..Default::default()
        }));
        s.write_all(hello.to_line().as_bytes()).unwrap();
        let block = vec![b'x'; 1 << 20];
        let mut sent = 0usize;
        while sent < 1 << 30 && s.write_all(&block).is_ok() {
            sent += block.len();
        }
        sent
    });
    // Wide enough for the status line with the socket's path in it.
    t.start(250, 30, &format!("{} tui --attach {}", bin(), path.display()));
    t.wait_for("666.sock line 2: a message longer than 256 MiB", 60);
    let sent = server.join().unwrap();
    assert!(sent < 1 << 30, "the viewer hung up at the cap: {sent} bytes sent");
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
    std::fs::remove_dir_all(base).unwrap();
}

/// A new user's first screen of `oomscope demo` on a terminal: the story, the verdict and
/// the fix, before TensorFlow's long report.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn the_demos_first_screen_on_a_terminal_shows_the_verdict_and_the_fix() {
    let t = Tmux::new();
    t.start(100, 30, &format!("{} demo", bin()));
    t.wait_for("EXIT=0", 30);
    // The whole output from its first line: what the user saw before it scrolled.
    let all = String::from_utf8_lossy(&t.run(&["capture-pane", "-p", "-S", "-", "-t", "t"]).stdout).into_owned();
    let first: String =
        all.lines().skip_while(|l| !l.contains("oomscope demo unet")).take(30).collect::<Vec<_>>().join("\n");
    assert!(first.contains("Verdict: true peak"), "{first}");
    assert!(first.contains("Fix: train at batch 1"), "{first}");
    let at = |text: &str| all.find(text).unwrap_or(usize::MAX);
    assert!(at("Fix: train at batch 1") < at("Bin (256)"), "the allocator's bins come after the answer: {all}");
    // TF's text still follows, and piped output is TF's text alone.
    assert!(all.contains("Bin (256)") && all.contains("Current usage from device"), "{all}");
    let piped = crate::common::oomscope(&["demo"]);
    assert!(crate::common::stdout(&piped).starts_with("Allocator (GPU_0_bfc) ran out of memory"));
}

/// The SGR sequences of `s` (`ESC [ params m`), each as its parameters.
fn sgr(s: &str) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find("\x1b[") {
        rest = &rest[at + 2..];
        let end = rest.find(|c: char| !c.is_ascii_digit() && c != ';').unwrap_or(rest.len());
        if rest[end..].starts_with('m') {
            out.push(rest[..end].split(';').map(|p| p.parse().unwrap_or(0)).collect());
        }
        rest = &rest[end..];
    }
    out
}

/// The SGR sequences of `s` that set a colour: foreground or background, 8, 16, 256 colours
/// or RGB. Bold, dim, reverse and the resets to the terminal's own colours (39, 49) are none.
fn colour_escapes(s: &str) -> Vec<Vec<u32>> {
    sgr(s).into_iter().filter(|p| p.iter().any(|&n| matches!(n, 30..=38 | 40..=48 | 90..=97 | 100..=107))).collect()
}

/// Each character of `line` (one line of `capture-pane -e`) with the foreground colour it is
/// drawn in, as its SGR parameters (empty: the terminal's own).
fn coloured_chars(line: &str) -> Vec<(char, Vec<u32>)> {
    let mut out = Vec::new();
    let mut fg: Vec<u32> = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push((c, fg.clone()));
            continue;
        }
        let mut seq = String::from(c);
        for d in chars.by_ref() {
            seq.push(d);
            if d.is_ascii_alphabetic() {
                break;
            }
        }
        for p in sgr(&seq) {
            let mut i = 0;
            while i < p.len() {
                match p[i] {
                    0 | 39 => fg.clear(),
                    n @ (30..=37 | 90..=97) => fg = vec![n],
                    38 => {
                        let len = if p.get(i + 1) == Some(&5) { 3 } else { 5 };
                        fg = p[i..(i + len).min(p.len())].to_vec();
                        i += len - 1;
                    }
                    48 => i += if p.get(i + 1) == Some(&5) { 2 } else { 4 },
                    _ => {}
                }
                i += 1;
            }
        }
    }
    out
}

/// NO_COLOR (set to anything) and `--color never` draw every view without colour, the
/// selection still standing out (reversed); by default, and with NO_COLOR empty, there is
/// colour.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn no_color_and_color_never_draw_without_colour() {
    let dump = "fixtures/dumps/unet-b2.dump.json";
    for (how, command) in [
        ("NO_COLOR=1", format!("NO_COLOR=1 {} tui {dump}", bin())),
        ("--color never", format!("env -u NO_COLOR {} tui --color never {dump}", bin())),
        ("--color never before the command", format!("env -u NO_COLOR {} --color never tui {dump}", bin())),
    ] {
        let t = Tmux::new();
        t.start(100, 30, &command);
        t.wait_for("verdict: true peak", 20);
        for (key, shows) in [
            ("1", "verdict: true peak"),
            ("2", "ResizeBilinear"),
            ("3", "bins: chunks by size"),
            ("4", "under the cursor"),
            ("5", "requested"),
            ("6", "BFCAllocator dump"),
        ] {
            t.keys(&[key]);
            t.wait_for(shows, 10);
            std::thread::sleep(Duration::from_millis(200));
            let s = t.screen_escaped();
            assert_eq!(colour_escapes(&s), Vec::<Vec<u32>>::new(), "{how}, view {key}: no colour:\n{s}");
            assert!(sgr(&s).iter().any(|p| p.contains(&7)), "{how}, view {key}: the tab on screen is reversed:\n{s}");
        }
        t.keys(&["q"]);
        t.wait_for("EXIT=0", 10);
    }
    for (how, env) in [("by default", "env -u NO_COLOR"), ("NO_COLOR empty", "env NO_COLOR=")] {
        let t = Tmux::new();
        t.start(100, 30, &format!("{env} {} tui {dump}", bin()));
        t.wait_for("verdict: true peak", 20);
        std::thread::sleep(Duration::from_millis(200));
        let s = t.screen_escaped();
        assert!(!colour_escapes(&s).is_empty(), "{how}: colour:\n{s}");
        t.keys(&["q"]);
        t.wait_for("EXIT=0", 10);
    }
}

/// The map colours each op's chunks in its own colour, named in the legend below the grid.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn the_map_draws_two_ops_chunks_in_different_colours() {
    let t = Tmux::new();
    t.start(120, 40, &format!("env -u NO_COLOR {} tui fixtures/dumps/unet-b2.dump.json", bin()));
    t.wait_for("verdict: true peak", 20);
    t.keys(&["4"]);
    t.wait_for("under the cursor", 10);
    std::thread::sleep(Duration::from_millis(200));
    let s = t.screen_escaped();
    let legend = s.lines().find(|l| l.contains('■')).unwrap_or_else(|| panic!("a legend:\n{s}"));
    let swatches: Vec<Vec<u32>> =
        coloured_chars(legend).into_iter().filter(|(c, _)| *c == '■').map(|(_, fg)| fg).collect();
    assert!(swatches.len() >= 2, "{legend}");
    let plain: String = coloured_chars(legend).into_iter().map(|(c, _)| c).collect();
    assert!(plain.contains("ResizeBilinear 900.00MiB"), "the largest op first: {plain}");
    assert!(!swatches[0].is_empty() && swatches[0] != swatches[1], "two ops, two colours: {swatches:?}");
    // The grid has chunks in each of them.
    let grid: Vec<(char, Vec<u32>)> =
        s.lines().skip(3).take_while(|l| !l.contains('■')).flat_map(coloured_chars).collect();
    for colour in &swatches[..2] {
        assert!(grid.iter().any(|(c, fg)| *c == '█' && fg == colour), "chunks in {colour:?}");
    }
    // c: back to the state colours, one for every in-use cell.
    t.keys(&["c"]);
    t.wait_for("map coloured by state", 10);
    let s = t.screen_escaped();
    let used: std::collections::BTreeSet<Vec<u32>> =
        s.lines().skip(3).flat_map(coloured_chars).filter(|(c, _)| *c == '█').map(|(_, fg)| fg).collect();
    assert_eq!(used.len(), 1, "{used:?}");
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
}

/// `/` where a view has no filter of its own opens the one that applies (the overview's ops
/// in Nodes, the bins' chunks in Allocations, the map's own), so what follows is text, not
/// keys: `q` does not quit, `t` does not fold.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn slash_then_letters_types_a_filter_in_every_view() {
    let t = Tmux::new();
    t.start(100, 30, &format!("{} tui fixtures/dumps/unet-b2.dump.json", bin()));
    t.wait_for("verdict: true peak", 20);
    for (view, letters, shows) in [
        ("1", "tq", " filter:  tq"),
        ("3", "sq", " filter:  sq"),
        ("4", "hq", " map filter:  hq"),
        ("2", "gq", " filter:  gq"),
        ("5", "nq", " filter:  nq"),
        ("6", "jq", " search:  jq"),
    ] {
        t.keys(&[view]);
        std::thread::sleep(Duration::from_millis(200));
        t.keys(&["/"]);
        for l in letters.chars() {
            t.keys(&[&l.to_string()]);
        }
        let s = t.wait_for(shows, 10);
        assert!(!s.contains("EXIT="), "view {view}: q was a letter: {s}");
        t.keys(&["Escape"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The map's filter marks an op's chunks; n goes from one to the next.
    t.keys(&["4", "/"]);
    for l in "resizebilinear".chars() {
        t.keys(&[&l.to_string()]);
    }
    t.keys(&["Enter"]);
    let s = t.wait_for("n N next/previous", 10);
    assert!(s.contains("\"resizebilinear\": 2 chunk(s), 1.32GiB"), "{s}");
    let under = |s: &str| s.lines().find(|l| l.contains("│op ")).unwrap_or_default().to_string();
    assert!(under(&s).contains("ResizeBilinear"), "the cursor on the first: {s}");
    assert!(s.contains('█') && s.contains('░'), "its chunks stand out, the others are shaded: {s}");
    let first = under(&s);
    t.keys(&["n"]);
    std::thread::sleep(Duration::from_millis(300));
    let next = t.screen();
    assert!(under(&next).contains("ResizeBilinear") && under(&next) != first, "n: the other one: {next}");
    t.keys(&["Escape", "q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
}

/// A demo publishing its live feed into `dir` for `seconds`.
fn publisher(dir: &std::path::Path, seconds: &str) -> std::process::Child {
    Command::new(bin())
        .args(["demo", "--publish", "--seconds", seconds])
        .env("OOMSCOPE_LIVE_DIR", dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// `tui --attach` with no process named: when the process it shows ends and another starts
/// publishing (the program run again), the viewer moves to the new one and says so. With a
/// pid named, it stays on that process and says it ended.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn attach_follows_the_next_process_unless_one_was_named() {
    let dir = live_dir("tmux-follow");
    let base = dir.parent().unwrap().to_path_buf();
    let publish = |seconds: &str| publisher(&dir, seconds);

    let t = Tmux::new();
    t.start(200, 30, &format!("OOMSCOPE_LIVE_DIR={} {} tui --attach", dir.display(), bin()));
    t.wait_for("waiting for a process to publish", 20);
    let mut first = publish("2");
    let live = t.wait_for(" LIVE ", 20);
    assert!(live.contains(&format!("pid {}", first.id())), "{live}");
    assert!(first.wait().unwrap().success());
    let ended = t.wait_for("its last state stays until another process publishes", 20);
    assert!(ended.contains("DISCONNECTED") && ended.contains(&format!("pid {} ended", first.id())), "{ended}");
    let mut second = publish("2");
    let now = t.wait_for(&format!("now following pid {}", second.id()), 20);
    assert!(
        now.contains("[2/2]") && now.contains(&format!("pid {}: ", second.id())),
        "the new one is on screen: {now}"
    );
    assert!(now.contains(&format!("the next process after pid {} ended", first.id())), "{now}");
    assert!(second.wait().unwrap().success());
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();

    // Named: it stays.
    let mut first = publish("3");
    let socket = oomscope_live::socket_path(&dir, first.id(), None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", socket.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Tmux::new();
    t.start(110, 30, &format!("OOMSCOPE_LIVE_DIR={} {} tui --attach {}", dir.display(), bin(), first.id()));
    t.wait_for(" LIVE ", 20);
    assert!(first.wait().unwrap().success());
    t.wait_for(&format!("pid {} ended: its last state stays on screen", first.id()), 20);
    let mut second = publish("2");
    std::thread::sleep(Duration::from_secs(2));
    let s = t.screen();
    assert!(s.contains(&format!("pid {}", first.id())) && !s.contains(&format!("pid {}", second.id())), "{s}");
    assert!(second.wait().unwrap().success());
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    std::fs::remove_dir_all(base).unwrap();
}

/// Paused while the process on screen ends and the next starts: the screen stays, the status
/// bar says the new one started, and resuming moves to it as if the frames came then.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn attach_paused_moves_to_the_next_process_on_resume() {
    let dir = live_dir("tmux-follow-paused");
    let base = dir.parent().unwrap().to_path_buf();
    let publish = |seconds: &str| publisher(&dir, seconds);
    let t = Tmux::new();
    t.start(200, 30, &format!("OOMSCOPE_LIVE_DIR={} {} tui --attach", dir.display(), bin()));
    t.wait_for("waiting for a process to publish", 20);
    let mut first = publish("3");
    t.wait_for(" LIVE ", 20);
    t.keys(&["Space"]);
    t.wait_for(" PAUSED ", 10);
    assert!(first.wait().unwrap().success());
    let mut second = publish("3");
    let paused = t.wait_for(&format!("pid {} started publishing: [ and ] show it", second.id()), 20);
    assert!(paused.contains("[1/2]") && paused.contains(&format!("pid {}: ", first.id())), "held: {paused}");
    t.keys(&["Space"]);
    let now = t.wait_for(&format!("pid {} ended; now following pid {}", first.id(), second.id()), 10);
    assert!(now.contains("[2/2]") && now.contains(&format!("pid {}: ", second.id())), "{now}");
    assert!(second.wait().unwrap().success());
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
    std::fs::remove_dir_all(base).unwrap();
}

/// On a terminal the answer's labels are coloured (`Verdict:`, `Fix:`); NO_COLOR takes the
/// colour away and leaves the same text.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
fn the_demo_on_a_terminal_colours_the_verdict_unless_no_color() {
    let mut seen = Vec::new();
    for env in ["env -u NO_COLOR", "env NO_COLOR=1"] {
        let t = Tmux::new();
        t.start(100, 30, &format!("{env} {} demo", bin()));
        t.wait_for("EXIT=0", 30);
        let all =
            String::from_utf8_lossy(&t.run(&["capture-pane", "-e", "-p", "-S", "-", "-t", "t"]).stdout).into_owned();
        let verdict = all.lines().find(|l| l.contains("Verdict:")).unwrap_or_else(|| panic!("{all}")).to_string();
        let fix = all.lines().find(|l| l.contains("Fix:")).unwrap_or_else(|| panic!("{all}")).to_string();
        seen.push((colour_escapes(&verdict).len(), colour_escapes(&fix).len()));
    }
    assert!(seen[0].0 > 0 && seen[0].1 > 0, "coloured on a terminal: {seen:?}");
    assert_eq!(seen[1], (0, 0), "not with NO_COLOR");
}

/// `oomscope tui DIR` on a job's dumps: the Job view first (the first rank to fail, the job's
/// verdict, every rank), Enter opens a rank in the other views, named as a rank.
#[test]
#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux, which is not installed (.ci/run installs it)")]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_jobs_ranks_open_side_by_side() {
    require("python3");
    let dir = temp_dir("tmux-job");
    for rank in 0..3 {
        let o = Command::new("python3")
            .arg(root().join("tests/python/jobs/rank_state.py"))
            .env("OOMSCOPE_LIB", crate::common::library())
            .env("OOMSCOPE_DEVICE", "sim:128MiB")
            .env("OOMSCOPE_DUMP_DIR", &dir)
            .env("OOMSCOPE_QUIET", "1")
            .envs([("RANK", rank.to_string()), ("LOCAL_RANK", rank.to_string())])
            .envs([("WORLD_SIZE", "3"), ("LOCAL_WORLD_SIZE", "3"), ("TORCHELASTIC_RUN_ID", "tui-job")])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let t = Tmux::new();
    t.start(100, 30, &format!("{} tui {}", bin(), dir.display()));
    let s = t.wait_for("what sets rank 1 apart", 20);
    assert!(s.contains("0 Job"), "the Job view's tab: {s}");
    assert!(s.contains("rank 1 ran out of memory first"), "{s}");
    assert!(s.contains("Verdict: one rank's data or work: rank 1 held"), "{s}");
    assert!(s.contains("!1 "), "rank 1 marked first to fail: {s}");
    assert!(s.contains("randn: 40.00MiB here, 4.00MiB on the others"), "{s}");
    // The cursor starts on rank 1; down to rank 2, Enter: its overview, named as a rank.
    t.keys(&["Down", "Enter"]);
    let s = t.wait_for("rank 2 of 3", 10);
    assert!(s.contains("1 Overview") && s.contains("[3/3]"), "{s}");
    t.keys(&["0"]);
    t.wait_for("ranks at the failure", 10);
    t.keys(&["q"]);
    t.wait_for("EXIT=0", 10);
    t.assert_restored();
    std::fs::remove_dir_all(dir).unwrap();
}
