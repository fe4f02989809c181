//! Every command that takes a file recognises what it was given: each kind of input
//! (a dump, a trace, a model file, a TensorFlow log, a PyTorch snapshot, an out-of-memory
//! message, none of these), under its own name and under a name that says another kind, fed
//! to each command. A command reads it, or refuses it (exit 2) saying what the file is and
//! which command reads it.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The kinds, as the refusals name them, and the command named first as reading each.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Dump,
    Trace,
    Workload,
    TfLog,
    Snapshot,
    Message,
    None,
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::Dump => "is an oomscope dump",
            Kind::Trace => "is an allocation trace",
            Kind::Workload => "is a model file (a workload)",
            Kind::TfLog => "is a TensorFlow log with an out-of-memory report",
            Kind::Snapshot => "is a PyTorch memory snapshot",
            Kind::Message => "is an out-of-memory message",
            Kind::None => "is none of the files oomscope reads",
        }
    }

    /// The command a refusal names first.
    fn reader(self) -> &'static str {
        match self {
            Kind::Dump => "report",
            Kind::Trace => "replay",
            Kind::Workload => "demo",
            Kind::TfLog | Kind::Snapshot | Kind::Message => "import",
            Kind::None => "",
        }
    }
}

/// The commands that take a file, and the kinds each reads.
const COMMANDS: &[(&str, &[Kind])] = &[
    ("replay", &[Kind::Trace, Kind::Workload, Kind::Snapshot]),
    ("report", &[Kind::Dump]),
    ("import", &[Kind::TfLog, Kind::Snapshot, Kind::Message]),
    ("export", &[Kind::Dump]),
    ("diff", &[Kind::Dump]),
    ("tui", &[Kind::Dump, Kind::TfLog, Kind::Snapshot, Kind::Message]),
    ("fit", &[Kind::Trace, Kind::Workload]),
    ("demo", &[Kind::Workload]),
];

/// A value of a Python pickle.
enum Py {
    Int(i32),
    Str(&'static str),
    List(Vec<Py>),
    Dict(Vec<(&'static str, Py)>),
}

impl Py {
    /// Protocol 2, as `pickle.dumps(value, protocol=2)` writes it (without the memo).
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Py::Int(i) => {
                out.push(b'J');
                out.extend_from_slice(&i.to_le_bytes());
            }
            Py::Str(s) => {
                out.push(b'X');
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Py::List(items) => {
                out.extend_from_slice(b"](");
                for v in items {
                    v.write(out);
                }
                out.push(b'e');
            }
            Py::Dict(items) => {
                out.extend_from_slice(b"}(");
                for (k, v) in items {
                    Py::Str(k).write(out);
                    v.write(out);
                }
                out.push(b'u');
            }
        }
    }
}

/// A small PyTorch memory snapshot: one 2 MiB segment with one 1 MiB tensor in it, and
/// the trace that made them.
fn snapshot() -> Vec<u8> {
    const A: i32 = 1 << 30;
    const MIB: i32 = 1 << 20;
    let block = |address, size, state| {
        Py::Dict(vec![("address", Py::Int(address)), ("size", Py::Int(size)), ("state", Py::Str(state))])
    };
    let entry = |action, size| {
        Py::Dict(vec![
            ("action", Py::Str(action)),
            ("addr", Py::Int(A)),
            ("size", Py::Int(size)),
            ("stream", Py::Int(0)),
        ])
    };
    let s = Py::Dict(vec![
        (
            "segments",
            Py::List(vec![Py::Dict(vec![
                ("device", Py::Int(0)),
                ("address", Py::Int(A)),
                ("total_size", Py::Int(2 * MIB)),
                ("stream", Py::Int(0)),
                ("segment_type", Py::Str("large")),
                ("blocks", Py::List(vec![block(A, MIB, "active_allocated"), block(A + MIB, MIB, "inactive")])),
            ])]),
        ),
        ("device_traces", Py::List(vec![Py::List(vec![entry("segment_alloc", 2 * MIB), entry("alloc", MIB)])])),
    ]);
    let mut out = vec![0x80, 2];
    s.write(&mut out);
    out.push(b'.');
    out
}

/// Every kind of input, under its own name and under a misleading one.
fn inputs(dir: &Path) -> Vec<(PathBuf, Kind)> {
    let copy = |from: &str, to: &str| {
        let p = dir.join(to);
        std::fs::copy(root().join(from), &p).unwrap();
        p
    };
    let write = |to: &str, bytes: &[u8]| {
        let p = dir.join(to);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let pickle = snapshot();
    vec![
        (PathBuf::from("fixtures/dumps/unet-b2.dump.json"), Kind::Dump),
        (copy("fixtures/dumps/unet-b2.dump.json", "dump.jsonl"), Kind::Dump),
        (copy("fixtures/dumps/unet-b2.dump.json", "dump"), Kind::Dump),
        (PathBuf::from("fixtures/traces/fragmentation.jsonl"), Kind::Trace),
        (copy("fixtures/traces/fragmentation.jsonl", "trace.json"), Kind::Trace),
        (PathBuf::from("fixtures/workloads/mnist-eval.json"), Kind::Workload),
        (copy("fixtures/workloads/mnist-eval.json", "model.jsonl"), Kind::Workload),
        (PathBuf::from("fixtures/logs/seed-001-mnist.txt"), Kind::TfLog),
        (copy("fixtures/logs/seed-000-preallocate.txt", "train.json"), Kind::TfLog),
        (write("snapshot.pickle", &pickle), Kind::Snapshot),
        (write("snapshot.json", &pickle), Kind::Snapshot),
        (PathBuf::from("fixtures/messages/pytorch-59778-free-large.txt"), Kind::Message),
        (copy("fixtures/messages/pytorch-59778-free-large.txt", "error.jsonl"), Kind::Message),
        (write("notes.txt", b"epoch 1 loss 0.31\nepoch 2 loss 0.27\n"), Kind::None),
        (write("picture.json", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01"), Kind::None),
    ]
}

/// `oomscope COMMAND FILE` with what the command needs besides.
fn run(command: &str, file: &str, dir: &Path, kind: Kind) -> Output {
    let out = dir.join("out").display().to_string();
    let args: Vec<&str> = match command {
        // A snapshot's replay takes the device's size; a trace's, the allocator's limit.
        "replay" if kind == Kind::Snapshot => vec!["replay", file, "--device", "8GiB"],
        "replay" => vec!["replay", file, "--limit", "8GiB"],
        "export" => vec!["export", file, "--format", "perfetto", "-o", &out],
        "diff" => vec!["diff", file, "fixtures/dumps/unet-b2.dump.json"],
        "fit" => vec!["fit", file, "--device", "8GiB"],
        _ => vec![command, file],
    };
    oomscope(&args)
}

fn assert_no_internals(what: &str, err: &str) {
    for word in ["../shared", "panicked", "issue", "RUST_BACKTRACE"] {
        assert!(!err.contains(word), "{what}: {word:?} in {err}");
    }
}

/// Each kind of input fed to each command: read (exit 0 or 1; the terminal UI then stops
/// for want of a terminal), or refused with exit 2, the file, what it is and the command
/// that reads it.
#[test]
fn every_command_reads_its_kinds_and_names_the_reader_of_the_others() {
    let dir = temp_dir("input-kinds");
    for (path, kind) in inputs(&dir) {
        let file = path.display().to_string();
        for (command, reads) in COMMANDS {
            let what = format!("oomscope {command} {file} ({kind:?})");
            let o = run(command, &file, &dir, kind);
            let err = stderr(&o);
            assert_no_internals(&what, &err);
            if reads.contains(&kind) {
                if *command == "tui" {
                    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
                    assert!(err.contains("needs a terminal"), "{what}: read, then no terminal: {err}");
                } else {
                    assert!(matches!(o.status.code(), Some(0 | 1)), "{what}: read: {err}");
                }
                continue;
            }
            assert_eq!(o.status.code(), Some(2), "{what}: {err}");
            assert!(o.stdout.is_empty(), "{what}: nothing on stdout");
            assert!(err.contains(&file), "{what}: names the file: {err}");
            if kind == Kind::None {
                // Not a kind: the command's own reader says what it looked for.
                let said = err.contains(Kind::None.words()) || err.contains("no out-of-memory error found");
                assert!(said, "{what}: {err}");
                continue;
            }
            assert!(err.contains(&format!("{file} {}", kind.words())), "{what}: says what it is: {err}");
            assert!(err.contains(&format!("`oomscope {} {file}", kind.reader())), "{what}: names the reader: {err}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// What a new user met: a model file, a dump, a log and a dump again, each given to a
/// command that does not read it, or under a name that said another kind.
#[test]
fn the_reported_cases_say_what_the_file_is() {
    let dir = temp_dir("reported-cases");
    // A model file saved under a trace's name was read as a trace: "the line ends inside a
    // JSON value". It is a workload, by its content.
    let model = dir.join("unet.jsonl");
    std::fs::copy(root().join("fixtures/workloads/unet.json"), &model).unwrap();
    let m = model.to_str().unwrap();
    for file in ["fixtures/workloads/unet.json", m] {
        let o = oomscope(&["replay", file]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(&format!("{file}: a workload needs --limit SIZE")), "{}", stderr(&o));
        let o = oomscope(&["replay", file, "--limit", "8GiB", "--format", "summary"]);
        assert_eq!(o.status.code(), Some(1), "replayed, out of memory at batch 2: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("out of memory at {file}:")), "{}", stderr(&o));
    }

    // A dump given to replay: "not a trace event at column 91251".
    let dump = dir.join("unet.dump.jsonl");
    std::fs::copy(root().join("fixtures/dumps/unet-b2.dump.json"), &dump).unwrap();
    let d = dump.to_str().unwrap();
    for args in [vec!["replay", d], vec!["replay", d, "--limit", "8GiB"]] {
        let o = oomscope(&args);
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(
            stderr(&o),
            format!(
                "oomscope: error: {d} is an oomscope dump (the allocator's state at one moment), not a trace, a \
                 workload or a PyTorch snapshot to replay; `oomscope report {d}` or `oomscope tui {d}` reads it\n"
            )
        );
    }

    // A TensorFlow log given to report: "not JSON".
    let o = oomscope(&["report", "fixtures/logs/seed-003-unet.txt"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "oomscope: error: fixtures/logs/seed-003-unet.txt is a TensorFlow log with an out-of-memory report, not an \
         oomscope dump; `oomscope import fixtures/logs/seed-003-unet.txt` or `oomscope tui \
         fixtures/logs/seed-003-unet.txt` reads it\n"
    );

    // oomscope's own dump given to import: "no out-of-memory error found".
    let o = oomscope(&["import", "fixtures/dumps/unet-b2.dump.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "oomscope: error: fixtures/dumps/unet-b2.dump.json is an oomscope dump (the allocator's state at one moment), \
         not a TensorFlow log, a PyTorch snapshot or an out-of-memory message; `oomscope report \
         fixtures/dumps/unet-b2.dump.json` or `oomscope tui fixtures/dumps/unet-b2.dump.json` reads it\n"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Recognition does not hide a damaged file of the right kind: its errors keep their file,
/// line and column. A file that is no kind at all keeps the parser's words, and says so.
#[test]
fn damaged_files_of_the_right_kind_keep_their_precise_errors() {
    let dir = temp_dir("damaged-kinds");
    let good = std::fs::read_to_string(root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    let cut = dir.join("cut.dump.json");
    std::fs::write(&cut, &good[..good.len() / 2]).unwrap();
    let c = cut.to_str().unwrap();
    for args in [vec!["report", c], vec!["export", c, "--format", "perfetto"], vec!["diff", c, c]] {
        let o = oomscope(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(&format!("{c}:1:")), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("the dump ends early (truncated file?)"), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("none of the files"), "{args:?}: {}", stderr(&o));
    }
    // A trace cut short, and one broken on its second line, under a model's name too.
    let trace = dir.join("trace.json");
    std::fs::copy(root().join("fixtures/traces/bad/truncated.jsonl"), &trace).unwrap();
    for file in ["fixtures/traces/bad/truncated.jsonl", trace.to_str().unwrap()] {
        for args in [vec!["replay", file, "--limit", "1GiB"], vec!["fit", file, "--device", "1GiB"]] {
            let o = oomscope(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?}");
            let expected = format!("{file}:2: the line ends inside a JSON value (truncated?) at column 26");
            assert!(stderr(&o).contains(&expected), "{args:?}: {}", stderr(&o));
        }
    }
    // A model file cut short.
    let o = oomscope(&["fit", "fixtures/workloads/bad/truncated.json", "--device", "1GiB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("fixtures/workloads/bad/truncated.json:"), "{}", stderr(&o));
    assert!(stderr(&o).contains("docs/workload-format.md"), "{}", stderr(&o));
    // A snapshot cut short: the pickle reader's error.
    let pickle = snapshot();
    let snap = dir.join("cut.pickle");
    std::fs::write(&snap, &pickle[..pickle.len() / 2]).unwrap();
    let s = snap.to_str().unwrap();
    for command in ["import", "replay"] {
        let o = oomscope(&[command, s]);
        assert_eq!(o.status.code(), Some(2), "{command}");
        assert!(stderr(&o).contains(s) && stderr(&o).contains("pickle"), "{command}: {}", stderr(&o));
        assert!(!stderr(&o).contains(Kind::Snapshot.words()), "{command}: {}", stderr(&o));
    }
    // Nothing oomscope reads: the parser's position, then what the file is not.
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "epoch 1 loss 0.31\n").unwrap();
    let n = notes.to_str().unwrap();
    let o = oomscope(&["report", n]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(&format!("{n}:1:1: not JSON, so not an oomscope dump")), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{n} is none of the files oomscope reads")), "{}", stderr(&o));
    let o = oomscope(&["replay", n]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("--limit"), "no limit is asked of a file that cannot be replayed: {}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Standard input, which `import` reads, is named as such, and the commands say FILE.
#[test]
fn import_from_standard_input_names_it() {
    let dump = std::fs::read(root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    let o = oomscope_with_stdin(&["import", "-"], dump);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("standard input is an oomscope dump") && err.contains("`oomscope report FILE`"), "{err}");
}

/// A log whose first line is a JSON object (a config it printed) is a log: the object's
/// keys do not make it a model file or a dump.
#[test]
fn a_log_that_starts_with_a_json_line_is_read_as_a_log() {
    let dir = temp_dir("json-first-line");
    let log = std::fs::read_to_string(root().join("fixtures/logs/seed-001-mnist.txt")).unwrap();
    for (name, first) in [
        ("model-line.txt", r#"{"input": [28,28,1], "batch": 64}"#),
        ("dump-line.txt", r#"{"version": 2, "device": "cuda:0"}"#),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, format!("{first}\n{log}")).unwrap();
        let p = path.to_str().unwrap();
        let o = oomscope(&["import", p, "--format", "summary"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("read {p} as a TensorFlow log")), "{name}: {}", stderr(&o));
        let o = oomscope(&["report", p]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        assert!(stderr(&o).contains(&format!("{p} {}", Kind::TfLog.words())), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("`oomscope import {p}`")), "{name}: {}", stderr(&o));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `import --from FORMAT` reads the file as that format, whatever its JSON keys look like.
#[test]
fn import_from_a_named_format_is_not_refused() {
    let dir = temp_dir("import-from");
    let bug = dir.join("bug.json");
    std::fs::write(
        &bug,
        r#"{"input":"x","batch":8,"error":"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 3.00 MiB is free."}"#,
    )
    .unwrap();
    let b = bug.to_str().unwrap();
    // Unnamed, its keys say a model file.
    let o = oomscope(&["import", b]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(Kind::Workload.words()), "{}", stderr(&o));
    let o = oomscope(&["import", "--from", "message", b, "--format", "summary"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("read {b} as an out-of-memory message")), "{}", stderr(&o));
    // A named format that does not fit: its reader says why, not the recogniser.
    let o = oomscope(&["import", "--from", "message", "fixtures/dumps/unet-b2.dump.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains(Kind::Dump.words()), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A trace of `n` allocations, each freed: `2 * n` events, well over what is read to
/// recognise it.
fn long_trace(n: usize) -> String {
    let mut t = String::new();
    for i in 0..n {
        t.push_str(&format!(
            "{{\"ev\":\"alloc\",\"id\":\"t{i}\",\"bytes\":{},\"op\":\"layer{i}/Conv2D\"}}\n",
            4096 * (1 + i % 7)
        ));
        t.push_str(&format!("{{\"ev\":\"free\",\"id\":\"t{i}\"}}\n"));
    }
    t
}

/// `oomscope ARGS` with `{}` in them standing for a FIFO (named without an extension, as
/// `<(...)` is) that a thread feeds with `content`.
fn through_a_fifo(dir: &Path, args: &[&str], content: Vec<u8>) -> Output {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let fifo = dir.join(format!("pipe{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", fifo.display());
    let f = fifo.clone();
    // Blocks until oomscope opens the FIFO; a second open (the bug) finds no writer and
    // hangs, which the guard turns into a failure.
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&f) {
            let _ = w.write_all(&content);
        }
    });
    let p = fifo.to_str().unwrap();
    let args: Vec<&str> = args.iter().map(|a| if *a == "{}" { p } else { a }).collect();
    let o = oomscope_bounded(&args, None, std::time::Duration::from_secs(120));
    writer.join().unwrap();
    o
}

/// A pipe is read once: what was read to recognise it is not lost to the replay, and an
/// empty one is refused, not replayed as fitting.
#[test]
fn a_pipe_is_read_once() {
    let dir = temp_dir("pipes");
    let trace = long_trace(3000);
    assert!(trace.len() > 64 << 10);
    let file = dir.join("long.jsonl");
    std::fs::write(&file, &trace).unwrap();
    let f = file.to_str().unwrap();

    let o = through_a_fifo(&dir, &["replay", "{}", "--limit", "1GiB", "--format", "json"], trace.clone().into_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("replayed 6000 events with no failed allocation"), "{}", stderr(&o));
    let o = through_a_fifo(&dir, &["fit", "{}", "--device", "1GiB"], trace.clone().into_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("(6000 events)"), "{}", stdout(&o));
    let fitted = oomscope(&["fit", f, "--device", "1GiB"]);
    let line = |s: String| s.lines().find(|l| l.contains("peak in use")).map(str::to_string);
    assert_eq!(line(stdout(&o)), line(stdout(&fitted)));
    assert!(line(stdout(&o)).is_some_and(|l| !l.ends_with(" 0B")), "{}", stdout(&o));

    // A workload and a snapshot through a pipe.
    let model = std::fs::read(root().join("fixtures/workloads/mnist-eval.json")).unwrap();
    let o = through_a_fifo(&dir, &["fit", "{}", "--device", "1GiB"], model);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Largest evaluation chunk that fits"), "{}", stdout(&o));
    let o = through_a_fifo(&dir, &["replay", "{}", "--format", "summary"], snapshot());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // What replay does not read is refused by what it is, as a file is.
    let dump = std::fs::read(root().join("fixtures/dumps/unet-b2.dump.json")).unwrap();
    let o = through_a_fifo(&dir, &["replay", "{}", "--limit", "1GiB"], dump);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(Kind::Dump.words()), "{}", stderr(&o));

    // Empty: nothing to replay or fit (exit 2), not "fits".
    for args in [&["replay", "{}", "--limit", "1GiB"][..], &["fit", "{}", "--device", "1GiB"]] {
        let o = through_a_fifo(&dir, args, Vec::new());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains("is empty: no trace or workload to"), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    for args in
        [["replay", empty.to_str().unwrap(), "--limit", "1GiB"], ["fit", empty.to_str().unwrap(), "--device", "1GiB"]]
    {
        let o = oomscope(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains(&format!("{} is empty", args[1])), "{args:?}: {}", stderr(&o));
    }

    // Standard input, as `cat trace | oomscope replay /dev/stdin` gives it.
    let o = oomscope_with_stdin(&["replay", "/dev/stdin", "--limit", "1GiB", "--format", "json"], trace.into_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("replayed 6000 events"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A large log is recognised by its beginning and its end, not read whole: a sparse file
/// of 64 GiB (a few blocks on disk) with its out-of-memory message at the end.
#[test]
fn a_large_log_is_recognised_by_its_end() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = temp_dir("large-log");
    let path = dir.join("train.log");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all("epoch 1 loss 0.31\n".repeat(8000).as_bytes()).unwrap();
    let message = b"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 3.00 MiB is free.\n";
    f.seek(SeekFrom::Start((64u64 << 30) - message.len() as u64)).unwrap();
    f.write_all(message).unwrap();
    drop(f);
    let p = path.to_str().unwrap();
    for args in [vec!["report", p], vec!["fit", p, "--device", "1GiB"]] {
        let o = oomscope_bounded(&args, None, std::time::Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(&format!("{p} {}", Kind::Message.words())), "{args:?}: {}", stderr(&o));
    }
    std::fs::remove_dir_all(dir).unwrap();
}
