//! The `oomscope` binary as a user meets it: exit codes, the dump round trip, and bad input
//! (each refused with the file and line, exit code 2, and nothing written).

use crate::common::*;
use std::io::Write;
use std::process::{Command, Stdio};

const REFERENCE: &str = "fixtures/traces/tf-reference.jsonl";

#[test]
fn replay_prints_the_report_writes_the_dump_and_report_re_renders_it() {
    let dir = temp_dir("roundtrip");
    let dump = dir.join("ref.dump.json");
    let dump_s = dump.to_str().unwrap();
    for format in ["tf", "summary", "json"] {
        let replay = oomscope(&["replay", REFERENCE, "--limit", "18995773440", "--format", format, "-o", dump_s]);
        assert_eq!(replay.status.code(), Some(1), "an OOM exits 1: {}", stderr(&replay));
        assert!(
            stderr(&replay).contains("out of memory at fixtures/traces/tf-reference.jsonl:6"),
            "{}",
            stderr(&replay)
        );
        assert!(stderr(&replay).contains(&format!("dump written to {dump_s}")));
        let report = oomscope(&["report", dump_s, "--format", format]);
        assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
        assert_eq!(stdout(&report), stdout(&replay), "report --format {format} equals what replay printed");
    }
    assert_eq!(files_in(&dir), vec!["ref.dump.json"], "no temporary files are left");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    for key in ["version", "allocator", "stats", "oom", "ooms", "usage_by_node", "bins", "regions"] {
        assert!(json.get(key).is_some(), "the dump has {key}");
    }
    assert_eq!(json["oom"]["requested"], 4_000_000_000u64);
    assert_eq!(json["oom"]["op"], "model/decoder/MatMul");
    assert_eq!(json["bins"].as_array().unwrap().len(), 21);
}

/// A directory holding one dump that is no rank's (a single process's run) is that dump's
/// report; with several, the error names the newest to read.
#[test]
fn report_of_a_directory_with_one_dump_reports_it() {
    let dir = temp_dir("one-dump-dir");
    std::fs::copy(root().join("fixtures/dumps/unet-b2.dump.json"), dir.join("oomscope-42-gpu0-oom1.dump.json"))
        .unwrap();
    let d = dir.to_str().unwrap();
    let o = oomscope(&["report", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds one dump, not a job's"), "{}", stderr(&o));
    let file = oomscope(&["report", dir.join("oomscope-42-gpu0-oom1.dump.json").to_str().unwrap()]);
    assert_eq!(stdout(&o), stdout(&file), "the same report as the file's own");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::copy(root().join("fixtures/dumps/unet-b2.dump.json"), dir.join("oomscope-43-gpu0-oom1.dump.json"))
        .unwrap();
    let o = oomscope(&["report", d]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 dumps here, none a job's rank's"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn replay_without_an_oom_exits_zero() {
    let out = oomscope(&["replay", REFERENCE, "--limit", "32GiB", "--format", "summary"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("No allocation failed in GPU_0_bfc: peak 18.63GiB in use of a 32.00GiB limit"));
    assert!(stderr(&out).contains("replayed 7 events with no failed allocation"));
}

#[test]
fn keep_going_lists_every_failure_and_ignores_frees_of_failed_ids() {
    let dir = temp_dir("keep-going");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"ev\":\"alloc\",\"id\":\"big\",\"bytes\":2097152,\"op\":\"too/big\"}\n\
         {\"ev\":\"free\",\"id\":\"big\"}\n\
         {\"ev\":\"alloc\",\"id\":\"ok\",\"bytes\":1024,\"op\":\"fits\"}\n\
         {\"ev\":\"alloc\",\"id\":\"big2\",\"bytes\":3145728,\"op\":\"too/big2\"}\n",
    )
    .unwrap();
    let t = trace.to_str().unwrap();
    let stop = oomscope(&["replay", t, "--limit", "1MiB", "--format", "json"]);
    assert_eq!(stop.status.code(), Some(1));
    let d: serde_json::Value = serde_json::from_slice(&stop.stdout).unwrap();
    assert_eq!(d["ooms"].as_array().unwrap().len(), 1, "stops at the first failure");
    assert_eq!(d["stats"]["num_allocs"], 0);

    let go = oomscope(&["replay", t, "--limit", "1MiB", "--format", "json", "--keep-going"]);
    assert_eq!(go.status.code(), Some(1));
    let d: serde_json::Value = serde_json::from_slice(&go.stdout).unwrap();
    let ops: Vec<&str> = d["ooms"].as_array().unwrap().iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(ops, vec!["too/big", "too/big2"]);
    assert_eq!(d["oom"]["op"], "too/big", "oom is the first failure");
    assert_eq!(d["stats"]["num_allocs"], 1, "the state at the end holds the allocation that fit");
    assert!(stderr(&go).contains("2 of 3 allocations failed (the first on line 1)"), "{}", stderr(&go));
}

#[test]
fn bad_traces_are_refused_with_file_line_and_no_output() {
    let dir = temp_dir("bad-traces");
    let dump = dir.join("out.json");
    std::fs::write(&dump, "previous dump").unwrap();
    let cases = [
        ("malformed.jsonl", ":2: the line ends inside a JSON value (truncated?) at column 44"),
        ("truncated.jsonl", ":2: the line ends inside a JSON value (truncated?) at column 26"),
        ("unknown-event.jsonl", ":2: unknown event \"malloc\""),
        ("negative-bytes.jsonl", ":1: \"bytes\" is -1024; a size must be a non-negative integer"),
        ("reused-id.jsonl", ":3: id \"a\" is already live (allocated on line 1 and not freed)"),
    ];
    for (file, expected) in cases {
        let path = format!("fixtures/traces/bad/{file}");
        let out = oomscope(&["replay", &path, "--limit", "1GiB", "-o", dump.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        let err = stderr(&out);
        assert!(err.contains(&format!("{path}{expected}")), "{file}: {err}");
        assert!(err.contains("docs/trace-format.md"), "says where the format is documented: {err}");
        assert!(out.stdout.is_empty(), "{file}: nothing on stdout");
        assert_eq!(std::fs::read_to_string(&dump).unwrap(), "previous dump", "{file}: the old dump is untouched");
        assert_eq!(files_in(&dir), vec!["out.json"], "{file}: no temporary file");
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn usage_errors_exit_two_and_say_what_is_accepted() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["replay", "fixtures/traces/nope.jsonl", "--limit", "1GiB"],
            "fixtures/traces/nope.jsonl: cannot open the trace",
        ),
        (&["replay", REFERENCE, "--limit", "16GB"], "ambiguous"),
        (&["replay", REFERENCE, "--limit", "lots"], "is not a size"),
        (&["replay", REFERENCE], "a trace needs --limit SIZE"),
        (&["replay", REFERENCE, "--limit", "1GiB", "--format", "xml"], "possible values: tf, summary, json"),
        (&["replay", REFERENCE, "--limit", "1GiB", "--bogus"], "unexpected argument '--bogus'"),
        (
            &["replay", REFERENCE, "--limit", "1GiB", "--others", "2GiB"],
            "--others 2.00GiB is more than the device's 1.00GiB",
        ),
        (&["replay", REFERENCE, "--limit", "1GiB", "--fragmentation-fraction", "3"], "not a fraction between 0 and 1"),
        (&["report"], "<DUMP>"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ];
    for (args, expected) in cases {
        let out = oomscope(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn writing_the_dump_into_a_missing_directory_fails_cleanly() {
    let out = oomscope(&["replay", REFERENCE, "--limit", "18995773440", "-o", "/nonexistent-dir/x.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent-dir/x.json"), "{}", stderr(&out));
}

#[test]
fn corrupt_dumps_are_refused_with_file_line_and_column() {
    let dir = temp_dir("bad-dumps");
    let good = dir.join("good.json");
    let out = oomscope(&["replay", REFERENCE, "--limit", "18995773440", "-o", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = std::fs::read_to_string(&good).unwrap();
    let newer = text.replacen("\"version\":1", "\"version\":99", 1);
    let cases: Vec<(&str, String, &str)> = vec![
        ("empty.json", String::new(), ":1:0: the file is empty"),
        ("truncated.json", text[..text.len() / 2].to_string(), "the dump ends early (truncated file?)"),
        ("notjson.json", "Bin (256): \tTotal Chunks: 0".into(), ":1:1: not JSON, so not an oomscope dump"),
        ("otherjson.json", "{\"traceEvents\": []}".into(), "JSON, but not an oomscope dump: missing field `version`"),
        ("newer.json", newer, "dump format version 99 is newer than this oomscope reads (version 1); upgrade oomscope"),
    ];
    for (name, content, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let out = oomscope(&["report", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = stderr(&out);
        assert!(err.contains(path.to_str().unwrap()) && err.contains(expected), "{name}: {err}");
        assert!(out.stdout.is_empty());
    }
    let missing = oomscope(&["report", "no/such/dump.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no/such/dump.json: No such file or directory"), "{}", stderr(&missing));
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    // A report far larger than a pipe's buffer, read by nobody.
    let dir = temp_dir("pipe");
    let trace = dir.join("many.jsonl");
    let mut f = std::fs::File::create(&trace).unwrap();
    for i in 0..20_000 {
        writeln!(f, "{{\"ev\":\"alloc\",\"id\":{i},\"bytes\":{},\"op\":\"layer_{i}/Conv2D\"}}", 1024 + i).unwrap();
    }
    drop(f);
    let mut child = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["replay", trace.to_str().unwrap(), "--limit", "1GiB", "--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// The terminal UI's entry points refuse bad input and a missing terminal with what to do,
/// before touching the terminal.
#[test]
fn tui_refuses_bad_input_and_a_missing_terminal_clearly() {
    let dir = temp_dir("tui-cli");
    let no_args = oomscope(&["tui"]);
    assert_eq!(no_args.status.code(), Some(2));
    assert!(stderr(&no_args).contains("oomscope tui --attach"), "{}", stderr(&no_args));

    let bad = dir.join("bad.dump.json");
    std::fs::write(&bad, "{\"version\": 1,\n  \"tool\": ").unwrap();
    let o = oomscope(&["tui", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.dump.json:2"), "the file and line: {}", stderr(&o));

    // Tests run without a terminal: a good dump is refused for that reason, not another.
    let o = oomscope(&["tui", "fixtures/dumps/unet-b2.dump.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs a terminal") && stderr(&o).contains("oomscope report"), "{}", stderr(&o));
    let o = oomscope(&["demo", "--tui"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs a terminal"), "{}", stderr(&o));

    // Not a dump: imported as `oomscope import` would, with its errors.
    let text = dir.join("notes.txt");
    std::fs::write(&text, "epoch 1 loss 0.3\nepoch 2 loss 0.2\n").unwrap();
    let o = oomscope(&["tui", text.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("notes.txt") && stderr(&o).contains("Bin ("),
        "says what it looked for: {}",
        stderr(&o)
    );
    let o = oomscope(&["tui", "fixtures/logs/seed-001-mnist.txt"]);
    assert!(stderr(&o).contains("needs a terminal"), "a log is read, then the terminal is missing: {}", stderr(&o));

    let o = oomscope(&["tui", "--attach", "/nonexistent/oomscope.sock"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/oomscope.sock"), "{}", stderr(&o));
    let live = dir.join("live");
    oomscope_live::private_dir(&live).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["tui", "--attach", "4242424"])
        .env("OOMSCOPE_LIVE_DIR", &live)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("process 4242424 does not publish"), "{}", stderr(&o));
    assert!(stderr(&o).contains("oomscope run --live"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("run --tui"), "run --tui keeps its feed to its own UI: {}", stderr(&o));
    // A socket nobody serves any more (its process died).
    let stale = live.join("1.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let o = oomscope(&["tui", "--attach", stale.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("the process has exited"), "{}", stderr(&o));
    let o = oomscope(&["tui", "fixtures/dumps/unet-b2.dump.json", "--attach"]);
    assert_eq!(o.status.code(), Some(2), "a dump and --attach do not go together");
    let o = oomscope(&["demo", "--publish", "--seconds", "99999"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("between 0 and 3600"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `demo --publish` plays the run on the live feed and still prints the report, the same
/// as without it.
#[test]
fn demo_publish_prints_the_same_report() {
    let dir = temp_dir("publish");
    let live = dir.join("live");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["demo", "--publish", "--seconds", "0.5"])
        .env("OOMSCOPE_LIVE_DIR", &live)
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("publishing on") && stderr(&o).contains("oomscope tui --attach"), "{}", stderr(&o));
    let plain = oomscope(&["demo"]);
    assert_eq!(stdout(&o), stdout(&plain), "the played run ends in the same report");
    assert!(files_in(&live).is_empty(), "the socket is removed at the end");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_gives_the_program_ctrl_c_and_passes_sigterm_on() {
    // The program starts with SIGINT's default disposition (oomscope ignores it only in
    // itself): bit 1 of the kernel's ignored-signals mask is SIGINT.
    let o = oomscope(&["run", "--device", "sim:1GiB", "--", "grep", "SigIgn", "/proc/self/status"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mask = out.split_whitespace().nth(1).map(|m| u64::from_str_radix(m, 16).unwrap()).expect(&out);
    assert_eq!(mask & 0b10, 0, "SIGINT is ignored in the program: {out}");

    // SIGTERM to oomscope ends the program too, and oomscope cleans up after it.
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--", "sleep", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let hook = std::env::temp_dir().join(format!("oomscope-run-{}", run.id()));
    let t = std::time::Instant::now();
    while !hook.exists() && t.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The program is started right after the hook's files are written.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let k = std::process::Command::new("kill").args(["-TERM", &run.id().to_string()]).status().unwrap();
    assert!(k.success());
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        if t.elapsed().as_secs() > 20 {
            let _ = run.kill();
            panic!("oomscope run did not end after SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143), "the program's own exit: killed by SIGTERM");
    assert!(!hook.exists(), "{} is left behind", hook.display());
}

#[test]
fn escape_sequences_in_a_pasted_log_are_shown_not_sent_to_the_terminal() {
    let dir = temp_dir("escapes");
    let hostile = "shared_model/unet_00/Conv2D\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let log = std::fs::read_to_string(root().join("fixtures/logs/seed-003-unet.txt"))
        .unwrap()
        .replace("shared_model/unet_00/Conv2D", hostile);
    let path = dir.join("hostile.log");
    std::fs::write(&path, log).unwrap();
    let dump = dir.join("hostile.dump.json");
    let o = oomscope(&["import", path.to_str().unwrap(), "-o", dump.to_str().unwrap()]);
    assert!(o.status.success() || o.status.code() == Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("shared_model/unet_00/Conv2D\\x1b]0;pwned\\x07\\x1b[2J"), "{text}");
    for (name, out) in [
        ("import", o.stdout.clone()),
        ("report", oomscope(&["report", dump.to_str().unwrap()]).stdout),
        ("report summary", oomscope(&["report", dump.to_str().unwrap(), "--format", "summary"]).stdout),
    ] {
        assert!(!out.is_empty(), "{name}");
        assert!(!out.iter().any(|&b| b == 0x1b || b == 0x07), "{name} printed a raw control character");
    }
    // The dump keeps the name as the log had it.
    assert!(std::fs::read_to_string(&dump).unwrap().contains("Conv2D\\u001b]0;pwned\\u0007"));
}

/// References to how oomscope was made, which a user cannot follow: the development data
/// beside the repository, its numbered sources, issues and stories, and the sessions that
/// wrote it. Each hit is returned with the text around it.
fn internal_references(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let around = |i: usize| {
        let start = lower.floor_char_boundary(i.saturating_sub(30));
        let end = lower.ceil_char_boundary((i + 50).min(lower.len()));
        lower[start..end].to_string()
    };
    let mut hits = Vec::new();
    for phrase in
        ["../shared", "shared/data", "shared/reference", "tf-bfc", "this session", "same session", "sessions so far"]
    {
        hits.extend(lower.match_indices(phrase).map(|(i, _)| around(i)));
    }
    // A word and a number: "seed 003", "seeds 000/002", "issue 5", "issue #5", "story 2".
    for word in ["seed ", "seeds ", "seed-", "issue ", "issue #", "story ", "story #"] {
        for (i, _) in lower.match_indices(word) {
            let rest = &lower[i + word.len()..];
            if !rest.starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            // Fixture files keep their names (`seed-003-unet.txt`); prose may name the file.
            let token: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
            if word == "seed-" && token.ends_with(".txt") {
                continue;
            }
            hits.push(around(i));
        }
    }
    hits
}

#[test]
fn internal_reference_finder_finds_them() {
    for text in ["see ../shared/data", "seed 003's U-Net", "seeds 000/002", "(issue 5)", "story 2", "tf-bfc.md"] {
        assert!(!internal_references(text).is_empty(), "{text}");
    }
    for text in ["`seed-003-unet.txt`", "a TensorFlow user's story", "shared_model/unet_00", "an issue tracker"] {
        assert!(internal_references(text).is_empty(), "{text}: {:?}", internal_references(text));
    }
}

/// What a user reads (every `--help`, the demos, README.md, docs/, fixtures/README.md and
/// the built-in workloads) names nothing a user does not have.
#[test]
fn help_demos_and_docs_have_no_internal_references() {
    let mut texts: Vec<(String, String)> = Vec::new();
    let top = oomscope(&["--help"]);
    assert!(top.status.success());
    // Every command the top-level help lists, so that a new one is checked too.
    let commands: Vec<String> = stdout(&top)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A command's line is indented by two; a wrapped description, further.
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 9 && commands.iter().any(|c| c == "demo"), "{commands:?}");
    texts.push(("--help".into(), stdout(&top)));
    texts.push(("-h".into(), stdout(&oomscope(&["-h"]))));
    for c in &commands {
        let o = oomscope(&[c, "--help"]);
        assert!(o.status.success(), "{c} --help: {}", stderr(&o));
        texts.push((format!("{c} --help"), stdout(&o)));
    }
    let demo_help = stdout(&oomscope(&["demo", "--help"]));
    let mut demos: Vec<Vec<&str>> = vec![vec!["demo"]];
    for b in oomscope_sim::workload::builtin::BUILTINS {
        assert!(demo_help.contains(b.name), "demo --help lists {}", b.name);
        demos.push(vec!["demo", b.name]);
    }
    for args in &demos {
        let o = oomscope(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        texts.push((args.join(" "), format!("{}{}", stdout(&o), stderr(&o))));
    }
    let mut files = vec![root().join("README.md"), root().join("fixtures/README.md")];
    // The built-in workloads' files too: their descriptions are compiled into the binary.
    for (dir, ext) in [("docs", "md"), ("fixtures/workloads", "json")] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == ext) {
                files.push(path);
            }
        }
    }
    for f in files {
        texts.push((f.display().to_string(), std::fs::read_to_string(&f).unwrap()));
    }
    let found: Vec<String> = texts
        .iter()
        .flat_map(|(name, text)| internal_references(text).into_iter().map(move |h| format!("{name}: ...{h}...")))
        .collect();
    assert!(found.is_empty(), "internal references:\n{}", found.join("\n"));
}

#[test]
fn completions_and_the_man_page_are_generated() {
    for (shell, registers) in
        [("bash", "complete -F _oomscope"), ("zsh", "#compdef oomscope"), ("fish", "complete -c oomscope")]
    {
        let o = oomscope(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        assert!(script.contains(registers), "{shell}: {script}");
        assert!(script.contains("attach"), "{shell}: options of the commands are completed");
    }
    let o = oomscope(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));

    let o = oomscope(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.lines().any(|l| l.starts_with(".TH oomscope 1")), "{page}");
    assert!(page.trim_start().starts_with(".TH") || page.contains("\n.TH "), "{page}");
    for c in ["demo", "replay", "import", "run", "tui", "completions"] {
        assert!(page.contains(&format!("oomscope\\-{c}(1)")), "the page lists {c}: {page}");
    }
    let o = oomscope(&["man", "run"]);
    let page = stdout(&o);
    assert!(page.lines().any(|l| l.starts_with(".TH oomscope-run 1")) && page.contains("\\-\\-live"), "{page}");
    let o = oomscope(&["man", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("one of demo, fit, replay"), "{}", stderr(&o));
}

/// `--version` names the commit it was built from, when built from a git checkout.
#[test]
fn version_names_the_build() {
    let o = oomscope(&["--version"]);
    assert!(o.status.success());
    let v = stdout(&o);
    assert!(v.starts_with(&format!("oomscope {}", env!("CARGO_PKG_VERSION"))), "{v}");
    let git = Command::new("git").args(["log", "-1", "--format=%h"]).current_dir(root()).output();
    if root().join(".git").exists() && git.is_ok_and(|g| g.status.success()) {
        // `oomscope 0.1.0 (abc1234 2026-11-23)`
        let inner = v.trim().strip_prefix(&format!("oomscope {} (", env!("CARGO_PKG_VERSION"))).unwrap_or_else(|| {
            panic!("{v}: no commit");
        });
        let (commit, date) = inner.trim_end_matches(')').split_once(' ').unwrap();
        assert!(commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{v}");
        assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-', "{v}");
    } else {
        assert_eq!(v.trim(), format!("oomscope {}", env!("CARGO_PKG_VERSION")));
    }
}

/// A program that cannot start exits as a shell would have it: 127 not found, 126 not
/// executable; the message names the command.
#[test]
fn run_exits_127_for_a_missing_command_and_126_for_one_not_executable() {
    let o = oomscope(&["run", "--device", "sim:1GiB", "--", "oomscope-no-such-command", "--flag"]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("oomscope-no-such-command: command not found"), "{}", stderr(&o));
    let o = oomscope(&["run", "--device", "sim:1GiB", "--", "/nonexistent/train.sh"]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/train.sh"), "{}", stderr(&o));

    let dir = temp_dir("run-noexec");
    let script = dir.join("train.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let o = oomscope(&["run", "--device", "sim:1GiB", "--", script.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{}: found but not executable", script.display())), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--attach` on a file that is not a socket says so, whatever its directory, instead of
/// "nothing listens on this socket"; and a pid that does not publish is told the flag that
/// publishes without a UI.
#[test]
fn tui_attach_names_what_it_expects() {
    let dir = temp_dir("attach-file");
    let file = dir.join("unet.dump.json");
    std::fs::copy(root().join("fixtures/dumps/unet-b2.dump.json"), &file).unwrap();
    for mode in [0o700, 0o755] {
        // In a private directory the socket checks would pass; in an open one they would
        // complain about the directory first.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let o = oomscope(&["tui", "--attach", file.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains("not a socket (give a socket, a directory of sockets, or a pid)"), "{mode:o}: {e}");
        assert!(e.contains(&format!("oomscope tui {}", file.display())), "{mode:o}: {e}");
        assert!(!e.contains("nothing listens"), "{e}");
    }
    // The hint for an unknown pid (run --live) is checked with the other attach errors.
    std::fs::remove_dir_all(dir).unwrap();
}

/// Without `-o` there is no dump to speak of: the closing line says what shows the state.
#[test]
fn replay_speaks_of_a_dump_only_when_it_wrote_one() {
    let o = oomscope(&["replay", REFERENCE, "--limit", "18995773440"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the report shows the state at that moment"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("the dump is"), "{}", stderr(&o));
    let dir = temp_dir("replay-dump-words");
    let dump = dir.join("r.dump.json");
    let o = oomscope(&["replay", REFERENCE, "--limit", "18995773440", "-o", dump.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the dump is the state at that moment"), "{}", stderr(&o));
    let o = oomscope(&["replay", REFERENCE, "--limit", "18995773440", "--keep-going"]);
    assert!(stderr(&o).contains("the report shows the state at the end"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `run --device` errors quote what the user typed, and a size with a decimal unit is
/// explained the same under `--device` as under `--limit`.
#[test]
fn device_errors_echo_the_input_and_explain_sizes() {
    let o = oomscope(&["run", "--device", "gpu", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("--device gpu:") && !e.contains("sim:gpu"), "{e}");
    assert!(e.contains("`cuda`") && e.contains("sim:SIZE"), "says what is accepted: {e}");

    let limit = stderr(&oomscope(&["demo", "--limit", "16GB"]));
    assert!(limit.contains("decimal units"), "{limit}");
    for args in [
        &["demo", "--device", "16GB"][..],
        &["fit", "unet", "--device", "16GB"],
        &["run", "--device", "16GB", "--", "true"],
        &["run", "--device", "sim:16GB", "--", "true"],
    ] {
        let o = oomscope(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("decimal units (KB, MB, GB, TB) are ambiguous"), "{args:?}: {e}");
        assert!(e.contains("gtx-1080"), "{args:?}: cards are still named: {e}");
    }
    let e = stderr(&oomscope(&["run", "--device", "16GB", "--", "true"]));
    assert!(e.contains("--device 16GB:") && !e.contains("sim:16GB"), "{e}");
}

/// `--color always` colours the verdict's and the fix's labels even in a pipe (NO_COLOR or
/// not); by default a pipe gets the text as before, byte for byte, and JSON is never painted.
#[test]
fn color_always_paints_piped_text_and_the_default_pipe_stays_plain() {
    let run = |args: &[&str], no_color: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_oomscope"));
        c.args(args).current_dir(root()).env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let o = c.output().unwrap();
        assert!(o.status.code().is_some_and(|c| c <= 1), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    let dump = "fixtures/dumps/unet-b2.dump.json";
    let plain = run(&["report", dump], None);
    assert!(!plain.contains('\x1b'), "a pipe gets no escapes by default");
    assert_eq!(run(&["report", dump, "--color", "never"], None), plain);
    assert_eq!(run(&["report", "--color", "auto", dump], Some("1")), plain);

    let painted = run(&["report", dump, "--color", "always"], None);
    assert!(painted.contains("\x1b[1;31mVerdict:\x1b[0m \x1b[1mtrue peak\x1b[0m\n"), "{painted}");
    assert!(painted.contains("\x1b[1;32mFix:\x1b[0m train at batch 1"), "{painted}");
    let unpainted = painted.replace("\x1b[1;31m", "").replace("\x1b[1;32m", "").replace("\x1b[1m", "");
    assert_eq!(unpainted.replace("\x1b[0m", ""), plain, "only escapes are added");
    assert_eq!(
        run(&["--color", "always", "report", dump], Some("1")),
        painted,
        "a flag before the command, NO_COLOR set"
    );
    assert!(run(&["demo", "--color", "always"], None).contains("\x1b[1;31mVerdict:"));

    let json = run(&["report", dump, "--format", "json", "--color", "always"], None);
    assert!(!json.contains('\x1b') && json.starts_with('{'), "JSON is never painted");
    let bad = oomscope(&["report", dump, "--color", "sometimes"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("auto") && stderr(&bad).contains("never"), "{}", stderr(&bad));
}
