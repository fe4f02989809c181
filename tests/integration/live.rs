//! The live feed over a real Unix socket: a publisher in one thread, viewers in others.

use crate::common::{live_dir, temp_dir};
use oomscope_core::Allocator;
use oomscope_core::Recording;
use oomscope_core::Request;
use oomscope_core::bfc::Options;
use oomscope_core::device::SimDevice;
use oomscope_core::scope;
use oomscope_format::live::{Hello, Message, PROTOCOL};
use oomscope_live::{self as live, Feed, Publisher, Sampler};
use oomscope_report as render;
use oomscope_tui::model::Status;
use oomscope_tui::source::Live;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

fn allocator(limit: u64, stacks: bool) -> Arc<Allocator> {
    let mut o = Options::new(limit);
    o.allow_growth = true;
    Arc::new(Allocator::with_recording(o, Box::new(SimDevice::new(limit, 0)), Recording { ops: true, stacks }))
}

fn hello() -> Hello {
    Hello { protocol: PROTOCOL.into(), pid: std::process::id(), command: "test".into(), ..Hello::default() }
}

/// Reads messages on a thread until `until` says stop or the feed ends; gives them back.
fn read_until(path: &Path, until: impl Fn(&Message) -> bool + Send + 'static) -> mpsc::Receiver<Vec<Message>> {
    let (tx, rx) = mpsc::channel();
    let mut feed = Feed::connect(path).unwrap();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        while let Ok(Some(m)) = feed.next_message() {
            let stop = until(&m);
            got.push(m);
            if stop {
                break;
            }
        }
        let _ = tx.send(got);
    });
    rx
}

#[test]
fn a_viewer_follows_states_steps_and_the_oom_then_the_goodbye() {
    let dir = live_dir("live-follow");
    let path = live::socket_path(&dir, std::process::id(), None);
    let alloc = allocator(64 << 20, true);
    let publisher = Arc::new(Publisher::bind(&path, hello()).unwrap());
    let sampler = Sampler::start(Arc::clone(&alloc), Arc::clone(&publisher), Duration::from_millis(10)).unwrap();
    let seen = read_until(&path, |m| matches!(m, Message::Bye { .. }));
    // The viewer is registered once the publisher has accepted it; what was sent before
    // is not replayed (except the hello, the latest state and the OOMs).
    while publisher.viewers() == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }

    let mut held = Vec::new();
    for step in 0..3 {
        alloc.mark_step(step);
        scope::with("model/layer1", || {
            held.push(alloc.allocate(&Request::new(4 << 20).op("Conv2D").shape(&[8, 64, 32, 32])).unwrap());
        });
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut oom = scope::with("model/head", || alloc.allocate(&Request::new(60 << 20).op("MatMul"))).unwrap_err();
    // The caller attaches the verdict, renders, and hands the OOM to the feed.
    oomscope_report::verdict::attach(&mut oom.dump, &mut oomscope_replay::what_if::from_history);
    let report = render::render(&oom.dump, render::Format::Tf);
    sampler.oom(Arc::from(oom.dump.clone()), report);
    // Let the sampler publish the OOM, then stop it and the feed.
    std::thread::sleep(Duration::from_millis(60));
    drop(sampler);
    drop(publisher);
    assert!(!path.exists(), "the socket is removed when the feed stops");

    let msgs = seen.recv_timeout(Duration::from_secs(20)).expect("the viewer ends with the feed");
    let Message::Hello(h) = &msgs[0] else { panic!("the first message is the hello: {:?}", msgs[0]) };
    assert_eq!(h.protocol, PROTOCOL);
    assert_eq!(h.pid, std::process::id());
    let states: Vec<&oomscope_format::live::State> =
        msgs.iter().filter_map(|m| if let Message::State(s) = m { Some(&**s) } else { None }).collect();
    assert!(states.len() >= 3, "{} states", states.len());
    assert!(states.windows(2).all(|w| w[0].seq < w[1].seq), "frames in order");
    let last = states.last().unwrap();
    assert_eq!(last.nodes[0].op, "model/layer1/Conv2D", "scoped names reach the viewer");
    assert_eq!(last.nodes[0].count, 3);
    assert!(last.samples.iter().any(|s| s[1] >= 12 << 20), "the samples saw the 12 MiB");
    assert!(!last.stacks.is_empty() && last.stacks.iter().skip(1).all(|s| !s.is_empty()), "stacks are symbolized");
    let steps: Vec<i64> =
        msgs.iter().filter_map(|m| if let Message::Step(s) = m { Some(s.step) } else { None }).collect();
    assert_eq!(steps, [0, 1, 2], "every step mark, once");
    let ooms: Vec<_> = msgs.iter().filter_map(|m| if let Message::Oom(o) = m { Some(o) } else { None }).collect();
    assert_eq!(ooms.len(), 1);
    assert_eq!(ooms[0].dump.oom.as_ref().unwrap().op.as_deref(), Some("model/head/MatMul"));
    assert_eq!(ooms[0].dump, *oom.dump, "the feed carries the dump the caller got");
    assert!(ooms[0].report.contains("12.00MiB from model/layer1/Conv2D"), "{}", ooms[0].report);
    assert!(matches!(msgs.last(), Some(Message::Bye { .. })));

    // The viewer's model: the post-mortem with the verdict, and a clear goodbye.
    let mut view = Live::new("", Status::Live);
    for m in msgs {
        view.apply(m);
    }
    let d = view.device();
    assert_eq!(d.oom.as_ref().unwrap().op.as_deref(), Some("model/head/MatMul"));
    assert!(d.verdict.is_some() && d.report.is_some());
    assert!(matches!(d.status, Status::Disconnected(_)));
    assert!(d.timeline.samples.len() >= 3 && d.timeline.steps.len() == 3);
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn a_stalled_viewer_does_not_block_allocation_and_learns_what_it_missed() {
    let dir = live_dir("live-stall");
    let path = dir.join("stall.sock");
    let alloc = allocator(1 << 30, false);
    // Thousands of live chunks make frames of a few hundred KiB: the socket fills fast.
    let names: Vec<String> = (0..300).map(|i| format!("model/block{}/op{}", i % 30, i)).collect();
    let keep: Vec<u64> = (0..6000)
        .map(|i| alloc.allocate(&Request::new(4096 + (i % 7) * 512).op(&names[i as usize % 300])).unwrap())
        .collect();
    let publisher = Arc::new(Publisher::bind(&path, hello()).unwrap());
    let stalled = UnixStream::connect(&path).unwrap(); // connected, never read (yet)
    let sampler = Sampler::start(Arc::clone(&alloc), Arc::clone(&publisher), Duration::from_millis(1)).unwrap();

    // The training loop, watched by a watchdog: publishing must never make it wait.
    let (done_tx, done_rx) = mpsc::channel();
    let a = Arc::clone(&alloc);
    std::thread::spawn(move || {
        for i in 0..200_000u64 {
            let p = a.allocate(&Request::new(256 + (i % 64) * 256).op("loop/op")).unwrap();
            a.free(p).unwrap();
        }
        let _ = done_tx.send(());
    });
    done_rx.recv_timeout(Duration::from_secs(120)).expect("allocation went on while the viewer stalled");
    // Give the sampler a few more frames so the stalled queue overflows for sure.
    let mut waited = 0;
    while publisher.dropped() == 0 && waited < 200 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    assert!(publisher.dropped() > 0, "frames for the stalled viewer were dropped, not queued without end");
    assert_eq!(publisher.viewers(), 1, "a slow viewer is not disconnected for dropped state frames");
    drop(sampler);

    // The stalled viewer starts reading: it is told how many frames it missed.
    let mut lines = BufReader::new(stalled).lines();
    let mut missed = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Ok(Message::Dropped { frames }) = serde_json::from_str::<Message>(&line) {
            missed = Some(frames);
            break;
        }
    }
    assert!(missed.unwrap_or(0) > 0, "a dropped notice with a count");
    drop(publisher);
    for p in keep {
        alloc.free(p).unwrap();
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn viewers_come_and_go_and_a_late_one_gets_the_state_at_once() {
    let dir = live_dir("live-late");
    let path = dir.join("late.sock");
    let alloc = allocator(64 << 20, false);
    let _x = alloc.allocate(&Request::new(1 << 20).op("weights")).unwrap();
    let publisher = Arc::new(Publisher::bind(&path, hello()).unwrap());
    // One frame now, the next only in a minute.
    let sampler = Sampler::start(Arc::clone(&alloc), Arc::clone(&publisher), Duration::from_secs(60)).unwrap();
    std::thread::sleep(Duration::from_millis(100));

    for _ in 0..3 {
        let mut feed = Feed::connect(&path).unwrap();
        assert!(matches!(feed.next_message().unwrap(), Some(Message::Hello(_))));
        let Some(Message::State(s)) = feed.next_message().unwrap() else { panic!("the latest state comes at once") };
        assert_eq!(s.nodes[0].op, "weights");
        drop(feed);
    }
    // Departed viewers are noticed when a write to them fails, and forgotten.
    let mut tries = 0;
    while publisher.viewers() > 0 && tries < 500 {
        publisher.send(&Message::Step(Default::default()));
        std::thread::sleep(Duration::from_millis(10));
        tries += 1;
    }
    assert_eq!(publisher.viewers(), 0);
    drop(sampler);
    drop(publisher);
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn the_socket_directory_and_path_are_checked() {
    let base = temp_dir("live-dir");
    // A directory others can open is refused, with what to do.
    std::fs::create_dir_all(base.join("open")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = Publisher::bind(&base.join("open/x.sock"), hello()).unwrap_err().to_string();
    assert!(e.contains("chmod 700"), "{e}");

    let dir = live_dir("live-path");
    let path = dir.join("p.sock");
    // A socket left by a dead process is replaced.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let p = Publisher::bind(&path, hello()).unwrap();
    // One still served is not taken over.
    let e = Publisher::bind(&path, hello()).unwrap_err().to_string();
    assert!(e.contains("another process publishes"), "{e}");
    drop(p);
    let e = Feed::connect(&path).unwrap_err().to_string();
    assert!(e.contains("p.sock") && e.contains("no such socket"), "{e}");
    std::fs::remove_dir_all(base).unwrap();
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A feed that is not an oomscope feed, or a newer one, or cut short: a clear error naming
/// the socket and the line, never a panic.
#[test]
fn bad_feeds_give_errors_with_the_line() {
    let dir = live_dir("live-bad");
    for (name, content, expect) in [
        ("garbage", "hello there\n", "line 1: not an oomscope-live/1 message"),
        (
            "newer",
            "{\"type\":\"hello\",\"protocol\":\"oomscope-live/2\",\"pid\":1,\"command\":\"x\",\"device\":{\"kind\":\"\",\"name\":\"\",\"model\":\"\",\"total\":0,\"free\":0,\"others\":0},\"allocator\":{\"name\":\"\",\"limit\":0,\"allow_growth\":false,\"garbage_collection\":false,\"fragmentation_fraction\":0.0,\"max_internal_fragmentation\":0,\"curr_region_allocation_bytes\":0},\"started_unix\":0,\"interval_ms\":0}\n",
            "use the same oomscope version",
        ),
        ("cut", "{\"type\":\"step\",\"step\":1,", "ended in the middle of a message"),
        ("wrong", "{\"type\":\"state\",\"seq\":\"x\"}\n", "line 1"),
    ] {
        let path = dir.join(format!("{name}.sock"));
        let listener = UnixListener::bind(&path).unwrap();
        let content = content.to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(content.as_bytes()).unwrap();
        });
        let mut feed = Feed::connect(&path).unwrap();
        server.join().unwrap();
        let e = feed.next_message().unwrap_err().to_string();
        assert!(e.contains(&format!("{name}.sock")) && e.contains(expect), "{name}: {e}");
    }
    // A type from a newer publisher is skipped, not an error.
    let path = dir.join("future.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(b"{\"type\":\"hologram\",\"x\":1}\n{\"type\":\"bye\",\"reason\":\"done\"}\n").unwrap();
    });
    let mut feed = Feed::connect(&path).unwrap();
    server.join().unwrap();
    assert_eq!(feed.next_message().unwrap(), Some(Message::Unknown));
    assert_eq!(feed.next_message().unwrap(), Some(Message::Bye { reason: "done".into() }));
    assert_eq!(feed.next_message().unwrap(), None);
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A program using the library that exits normally says goodbye on its feed and removes its
/// socket, so a viewer tells a clean exit from a crash and sockets do not pile up.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_program_using_the_library_says_goodbye_and_removes_its_socket_at_exit() {
    crate::common::require("python3");
    let dir = live_dir("live-bye");
    let go = dir.parent().unwrap().join("go");
    let lib = crate::common::library();
    let script = format!(
        "import ctypes, os, time\n\
         lib = ctypes.CDLL({lib:?})\n\
         lib.oomscope_malloc.restype = ctypes.c_void_p\n\
         assert lib.oomscope_malloc(1 << 20, 0, None)\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n",
        lib = lib.to_str().unwrap(),
        go = go.to_str().unwrap()
    );
    /// Kills the program if the test fails before it ends.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Reap(
        std::process::Command::new("python3")
            .args(["-c", &script])
            .env("OOMSCOPE_DEVICE", "sim:1GiB")
            .env("OOMSCOPE_LIVE", "1")
            .env("OOMSCOPE_LIVE_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The socket file appears a moment before it listens: retry until it answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let socket = loop {
        if let Some(s) = live::sockets_in(&dir).unwrap().into_iter().next()
            && Feed::connect(&s).is_ok()
        {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no socket answered in {}", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    };
    let got = read_until(&socket, |m| matches!(m, Message::Bye { .. }));
    std::fs::write(&go, b"").unwrap();
    assert!(child.0.wait().unwrap().success());
    let got = got.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(got.first(), Some(Message::Hello(_))), "{got:?}");
    assert!(matches!(got.last(), Some(Message::Bye { .. })), "the last message is the goodbye: {got:?}");
    assert!(!socket.exists(), "the socket is removed at exit");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A publisher that never ends its line: the viewer stops at the cap with a clear error
/// instead of reading until memory runs out.
#[test]
fn an_endless_line_is_cut_off_at_the_cap() {
    let dir = live_dir("live-endless");
    let path = dir.join("endless.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = Message::Hello(Box::new(hello())).to_line();
        s.write_all(hello.as_bytes()).unwrap();
        let block = vec![b'a'; 1 << 20];
        let mut sent = 0usize;
        // Until the viewer hangs up (or far past any cap).
        while sent < 2 * oomscope_live::attach::MAX_LINE && s.write_all(&block).is_ok() {
            sent += block.len();
        }
        sent
    });
    let mut feed = Feed::connect(&path).unwrap();
    assert!(matches!(feed.next_message().unwrap(), Some(Message::Hello(_))));
    let e = feed.next_message().unwrap_err().to_string();
    assert!(e.contains("endless.sock line 2") && e.contains("longer than 256 MiB"), "{e}");
    drop(feed);
    let sent = server.join().unwrap();
    assert!(sent < 2 * oomscope_live::attach::MAX_LINE, "the viewer hung up at the cap ({sent} bytes sent)");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A state frame far larger than any allocator sends is refused, not built into a model.
#[test]
fn an_oversized_state_frame_is_refused() {
    let dir = live_dir("live-huge-frame");
    let path = dir.join("huge.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let spans = vec![oomscope_format::live::Span(0, 1, 0, 0, 0, 0, 0, 0); 300_000];
        let state = oomscope_format::live::State {
            regions: vec![oomscope_format::live::MapRegion { address: 0, size: 300_000, spans }],
            ..Default::default()
        };
        let _ = s.write_all(Message::State(Box::new(state)).to_line().as_bytes());
    });
    let mut feed = Feed::connect(&path).unwrap();
    let e = feed.next_message().unwrap_err().to_string();
    assert!(e.contains("300000 spans") && e.contains("larger than any allocator sends"), "{e}");
    server.join().unwrap();
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// The viewer checks the socket's directory as the publisher does: another user may have
/// made a world-writable one and put a socket of theirs in it.
#[test]
fn a_viewer_refuses_a_socket_in_a_directory_others_control() {
    use std::os::unix::fs::PermissionsExt;
    let base = temp_dir("live-foreign");
    let open = base.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = open.join("1.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let e = Feed::connect(&path).unwrap_err().to_string();
    assert!(e.contains("not connecting") && e.contains("mode 777"), "{e}");
    // Through the command: exit 2 with the reason, before any terminal is needed.
    let o = crate::common::oomscope(&["tui", "--attach", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", crate::common::stderr(&o));
    assert!(crate::common::stderr(&o).contains("not connecting"), "{}", crate::common::stderr(&o));
    // A directory owned by someone else (root can make one).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = base.join("theirs");
        oomscope_live::private_dir(&theirs).unwrap();
        let sock = theirs.join("2.sock");
        let _l2 = UnixListener::bind(&sock).unwrap();
        let c = std::ffi::CString::new(theirs.to_str().unwrap()).unwrap();
        // SAFETY: a valid path; 65534 is `nobody`.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let e = Feed::connect(&sock).unwrap_err().to_string();
        assert!(e.contains("owned by another user (uid 65534)"), "{e}");
    }
    drop(listener);
    std::fs::remove_dir_all(base).unwrap();
}
