//! Real TensorFlow as the oracle. TF's CPU allocator is its BFC allocator with a limit when
//! `TF_CPU_ALLOCATOR_USE_BFC=true TF_CPU_BFC_MEM_LIMIT_IN_MB=N`, and at an OOM it prints the
//! same dump as on a GPU. Each scenario in `tests/tf/` runs out of memory in its own way:
//! the import must read every figure the log prints, print the log's dump back line for
//! line, and name the cause the scenario was built to have. The differentials replay TF's
//! own allocation sequence (its VLOG) through oomscope's allocator: the dump must be TF's.

use crate::common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `tests/tf/SCRIPT.py` under TF's BFC CPU allocator with a limit of `limit_mb`;
/// returns the exit code and what TF printed on stderr (kept in `target/tf-logs/`).
fn run_tf(script: &str, limit_mb: u32, extra: &[(&str, &str)]) -> (Option<i32>, String, PathBuf) {
    let py = tf_python();
    let mut c = Command::new(&py);
    c.arg(root().join("tests/tf").join(format!("{script}.py")))
        .current_dir(root().join("tests/tf"))
        .env("TF_CPU_ALLOCATOR_USE_BFC", "true")
        // oneDNN's CPU kernels crash after an OOM on CPUs with AVX-512 BF16 (TensorFlow 2.20
        // and 2.21); without them TF runs the kernels a GPU build mirrors.
        .env("TF_ENABLE_ONEDNN_OPTS", "0")
        .env("TF_CPU_BFC_MEM_LIMIT_IN_MB", limit_mb.to_string())
        .env_remove("TF_CPP_MIN_LOG_LEVEL");
    for (k, v) in extra {
        c.env(k, v);
    }
    let out = c.output().expect("the TensorFlow Python runs");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let dir = root().join("target/tf-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{script}.log"));
    std::fs::write(&path, &log).unwrap();
    (out.status.code(), log, path)
}

/// A log line without its prefix (`I0000 00:00:1795433278.865093   23376 file.cc:1049] `).
fn payload(line: &str) -> &str {
    let b = line.as_bytes();
    if b.len() > 6
        && b"IWEF".contains(&b[0])
        && b[1..5].iter().all(u8::is_ascii_digit)
        && b[5] == b' '
        && let Some(i) = line.find("] ")
    {
        return &line[i + 2..];
    }
    line
}

/// The thread of a prefixed line.
fn thread(line: &str) -> Option<&str> {
    (payload(line).len() != line.len()).then(|| line.split_whitespace().nth(2)).flatten()
}

/// The first OOM report of a log, as printed: its thread's lines (and their continuations)
/// from the `ran out of memory` header to the occupancy bar, without prefixes.
fn first_report(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("ran out of memory trying to allocate") && !l.contains("not a failure"))
        .expect("TF printed an OOM report");
    let tid = thread(lines[start]);
    let mut out = Vec::new();
    let mut ours = true;
    for l in &lines[start..] {
        if thread(l).is_some() {
            ours = thread(l) == tid;
        }
        if !ours {
            continue;
        }
        let p = payload(l);
        out.push(p.to_string());
        if p.len() == 100 && p.bytes().all(|b| matches!(b, b'*' | b'x' | b'_')) {
            break;
        }
    }
    out
}

fn import_json(log: &Path) -> serde_json::Value {
    let out = oomscope(&["import", log.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn human(n: &serde_json::Value) -> String {
    oomscope_base::size::human(n.as_u64().unwrap())
}

/// The word after `label` in the first line of `report` that has it.
fn word_after<'a>(report: &'a [String], label: &str) -> &'a str {
    let line = report.iter().find(|l| l.contains(label)).unwrap_or_else(|| panic!("no {label:?} in the report"));
    line.split(label).nth(1).unwrap().split_whitespace().next().unwrap()
}

/// Every figure the import read, against the log's own lines; the log's dump printed back;
/// the verdict. Returns the imported dump.
fn check_scenario(script: &str, limit_mb: u32, cause: &str) -> serde_json::Value {
    let (code, log, path) = run_tf(script, limit_mb, &[]);
    assert_eq!(code, Some(3), "{script} should run out of memory:\n{log}");
    let report = first_report(&log);
    let d = import_json(&path);

    // The request: the header's figures.
    let header = &report[0];
    let rounded: u64 = header.split("(rounded to ").nth(1).unwrap().split(')').next().unwrap().parse().unwrap();
    assert_eq!(d["oom"]["rounded"], rounded, "{script}: {header}");
    assert_eq!(human(&d["oom"]["requested"]), word_after(&report, "trying to allocate "), "{script}");
    let op = header.split("requested by op ").nth(1).unwrap().trim();
    assert_eq!(d["oom"]["op"], op, "{script}");
    // Every OOM in the log is kept, the first is the dump's.
    let headers =
        log.lines().filter(|l| l.contains("ran out of memory trying") && !l.contains("not a failure")).count();
    assert_eq!(d["ooms"].as_array().unwrap().len(), headers, "{script}");

    // The pool and in-use bytes, exact from the region and chunk lines.
    let regions: u64 =
        report.iter().filter_map(|l| l.strip_prefix("Next region of size ")).map(|s| s.parse::<u64>().unwrap()).sum();
    let in_use: u64 = report
        .iter()
        .filter_map(|l| l.strip_prefix("InUse at "))
        .map(|s| s.split(" of size ").nth(1).unwrap().split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(d["stats"]["pool_bytes"], regions, "{script}");
    assert_eq!(d["stats"]["bytes_in_use"], in_use, "{script}");
    // The figures TF printed in words, as TF printed them.
    assert_eq!(human(&d["stats"]["pool_bytes"]), word_after(&report, "Total size in pool: "), "{script}");
    assert_eq!(human(&d["allocator"]["limit"]), word_after(&report, "memory_limit_: "), "{script}");
    assert_eq!(d["allocator"]["limit"], u64::from(limit_mb) << 20, "{script}: TF's limit, exactly");
    assert_eq!(human(&d["stats"]["bytes_in_use"]), word_after(&report, "Sum Total of in-use chunks: "), "{script}");
    for (row, field) in
        [("InUse:", "bytes_in_use"), ("MaxInUse:", "peak_bytes_in_use"), ("MaxAllocSize:", "largest_alloc_size")]
    {
        assert_eq!(human(&d["stats"][field]), word_after(&report, row), "{script} {row}");
    }
    assert_eq!(d["stats"]["num_allocs"].to_string(), word_after(&report, "NumAllocs:"), "{script}");
    for (i, b) in d["bins"].as_array().unwrap().iter().enumerate() {
        let line = report.iter().find(|l| l.starts_with(&format!("Bin ({}): ", 256u64 << i))).unwrap();
        assert!(
            line.contains(&format!("Total Chunks: {}, Chunks in use: {}.", b["total_chunks"], b["chunks_in_use"])),
            "{line}"
        );
        assert!(line.contains(&format!(". {} allocated for chunks.", human(&b["bytes"]))), "{line}");
    }

    // The log's dump, printed back line for line (the prefixes aside).
    let dump = root().join("target/tf-logs").join(format!("{script}.dump.json"));
    let o = oomscope(&["import", path.to_str().unwrap(), "-o", dump.to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&oomscope(&["report", dump.to_str().unwrap(), "--format", "tf"]));
    let printed: Vec<&str> = text.lines().map(payload).collect();
    assert_eq!(&printed[..report.len()], report.iter().map(String::as_str).collect::<Vec<_>>().as_slice(), "{script}");

    assert_eq!(d["verdict"]["kind"], cause, "{script}: {}", d["verdict"]);
    d
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn a_cnn_trained_at_too_large_a_batch_is_a_true_peak() {
    let d = check_scenario("cnn_fit", 256, "peak");
    // The batch guessed from the failed tensor; no smaller one named, none having been checked.
    let fix = d["verdict"]["fix"].as_str().unwrap();
    assert!(fix.starts_with("reduce the batch (if the failed tensor's first dimension, 128, is the batch): "), "{fix}");
    assert!(!fix.contains("or less ("), "{fix}");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn predicting_a_whole_set_in_one_batch_is_one_tensor_too_large() {
    let d = check_scenario("predict_all", 256, "single_tensor");
    assert_eq!(d["oom"]["shape"][0], 2000);
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn an_rnn_over_long_sequences_is_a_true_peak() {
    check_scenario("rnn_long", 256, "peak");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn attention_over_a_long_sequence_is_one_tensor_too_large() {
    let d = check_scenario("attention", 256, "single_tensor");
    // The scores: batch x heads x L x L.
    assert_eq!(d["oom"]["shape"], serde_json::json!([4, 8, 2048, 2048]));
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn a_tf1_graph_reports_its_tensors_by_node() {
    let d = check_scenario("tf1_graph", 256, "peak");
    let log = std::fs::read_to_string(root().join("target/tf-logs/tf1_graph.log")).unwrap();
    // `Current usage from device`, node by node, as TF listed it.
    let listed: Vec<(String, String)> = log
        .lines()
        .skip_while(|l| !l.contains("Current usage from device"))
        .skip(1)
        .map_while(|l| l.trim().split_once(" from ").map(|(s, n)| (s.to_string(), n.to_string())))
        .collect();
    assert!(!listed.is_empty(), "TF listed the tensors");
    let nodes: Vec<(String, String)> = d["usage_by_node"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (human(&n["bytes"]), n["op"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(nodes, listed);
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn freed_tensors_leave_holes_and_that_is_fragmentation() {
    check_scenario("fragmentation", 256, "fragmentation");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn a_loop_that_keeps_every_steps_output_is_growth() {
    check_scenario("growth", 256, "growth");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn one_tensor_larger_than_the_limit() {
    check_scenario("one_tensor", 256, "single_tensor");
}

/// TF's allocation sequence, from its VLOG (`TF_CPP_VMODULE=bfc_allocator=4`), as an
/// oomscope trace: the regions where TF's device put them, every allocation and free of the
/// allocator, and the request that failed.
fn trace_of(log: &str, allocator: &str) -> String {
    let mut out = String::new();
    let mut live: HashMap<String, usize> = HashMap::new();
    let mut n = 0;
    let mut pending = None;
    for line in log.lines() {
        let p = payload(line);
        if let Some(rest) = p.strip_prefix("Allocated memory at 0x") {
            let (a, b) = rest.split_once(" to 0x").unwrap();
            let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b.trim(), 16).unwrap());
            out.push_str(&format!("{{\"ev\":\"region\",\"address\":{a},\"bytes\":{}}}\n", b - a));
        } else if let Some(rest) = p.strip_prefix("[mem-debug] AllocateRaw,") {
            let f: Vec<&str> = rest.split(',').collect();
            if f[0] == allocator {
                n += 1;
                live.insert(f[2].to_string(), n);
                out.push_str(&format!("{{\"ev\":\"alloc\",\"id\":{n},\"bytes\":{}}}\n", f[1]));
                pending = None;
            }
        } else if let Some(rest) = p.strip_prefix("[mem-debug] DeallocateRaw,") {
            let f: Vec<&str> = rest.split(',').collect();
            if f[0] == allocator {
                let id = live.remove(f[2]).expect("TF frees what it allocated");
                out.push_str(&format!("{{\"ev\":\"free\",\"id\":{id}}}\n"));
            }
        } else if let Some(rest) = p.strip_prefix(&format!("AllocateRaw {allocator}  ")) {
            pending = rest.trim().parse::<u64>().ok();
        } else if p.contains("ran out of memory trying to allocate") {
            let op = p.split("requested by op ").nth(1).unwrap_or("").trim();
            let bytes = pending.expect("the failed request's AllocateRaw line");
            out.push_str(&format!("{{\"ev\":\"alloc\",\"id\":\"oom\",\"bytes\":{bytes},\"op\":{op:?}}}\n"));
            break;
        }
    }
    out
}

/// A program whose allocation order is known, run by TF and replayed by oomscope: every
/// line of TF's dump, addresses and chunk handles included, is oomscope's.
fn differential(script: &str) {
    let (code, log, _) = run_tf(script, 64, &[("TF_CPP_VMODULE", "bfc_allocator=4")]);
    assert_eq!(code, Some(3), "{script} should run out of memory:\n{}", &log[log.len().saturating_sub(3000)..]);
    let allocator = "bfc_cpu_allocator_for_gpu";
    let dir = temp_dir(script);
    let trace = dir.join("tf.jsonl");
    std::fs::write(&trace, trace_of(&log, allocator)).unwrap();
    let out = oomscope(&[
        "replay",
        trace.to_str().unwrap(),
        "--limit",
        "64MiB",
        "--allow-growth",
        "--name",
        allocator,
        "--tf-style",
        "tf-2.21",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let tf = first_report(&log);
    let ours: Vec<String> = stdout(&out).lines().take(tf.len()).map(str::to_string).collect();
    assert!(tf.len() > 40, "{script}: a whole dump ({} lines)", tf.len());
    for (i, (a, b)) in tf.iter().zip(&ours).enumerate() {
        assert_eq!(b, a, "{script}: line {} of TF's dump", i + 1);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn tfs_dump_is_oomscopes_for_tensors_created_and_freed_in_order() {
    differential("diff_tensors");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn tfs_dump_is_oomscopes_for_holes_that_coalesce() {
    differential("diff_holes");
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn tfs_dump_is_oomscopes_for_variables_and_temporaries() {
    differential("diff_variables");
}

/// `oomscope run` around a Keras script on a machine with no GPU: the script's output and
/// exit code pass through, the dump of its OOM lands in the dump directory with the
/// verdict, and the verdict follows the script's own error.
fn run_keras(dumps: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let py = tf_python();
    let mut c = Command::new(env!("CARGO_BIN_EXE_oomscope"));
    c.args(["run", "--dump-dir"])
        .arg(dumps)
        .args(["--", &py])
        .arg(root().join("tests/tf/keras_train.py"))
        .args(args)
        .env("TF_CPU_ALLOCATOR_USE_BFC", "true")
        // oneDNN's CPU kernels crash after an OOM on CPUs with AVX-512 BF16 (TensorFlow 2.20
        // and 2.21); without them TF runs the kernels a GPU build mirrors.
        .env("TF_ENABLE_ONEDNN_OPTS", "0")
        .env("TF_CPU_BFC_MEM_LIMIT_IN_MB", "256")
        .env_remove("TF_CPP_MIN_LOG_LEVEL")
        .current_dir(root());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn the_dump(dumps: &Path) -> serde_json::Value {
    let files = files_in(dumps);
    assert_eq!(files.len(), 1, "one OOM, one dump: {files:?}");
    assert!(files[0].starts_with("oomscope-") && files[0].ends_with("-cpu0-oom1.dump.json"), "{files:?}");
    serde_json::from_str(&std::fs::read_to_string(dumps.join(&files[0])).unwrap()).unwrap()
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn run_reads_a_keras_programs_oom_from_its_output() {
    let dir = temp_dir("tf-run");
    let o = run_keras(&dir, &[], &[]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "the script's exit code (an uncaught error):\n{err}");
    assert_eq!(out, "training starts\n", "stdout untouched");
    assert!(err.contains("ran out of memory trying to allocate") && err.contains("BFCAllocator dump for"), "{err}");
    // The script's error, then the verdict.
    let error = err.find("ResourceExhaustedError").expect("the script's error");
    let verdict = err.find("Verdict: true peak").expect("the verdict");
    assert!(error < verdict, "the verdict comes after the program's error:\n{err}");
    let d = the_dump(&dir);
    assert_eq!(d["source"]["kind"], "run");
    assert_eq!(d["verdict"]["kind"], "peak");
    assert_eq!(d["allocator"]["name"], "bfc_cpu_allocator_for_gpu");
    assert_eq!(d["oom"]["op"], "StatefulPartitionedCall/gradient_tape/sequential_1/global_average_pooling2d_1/Tile");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn a_program_that_silences_tf_shows_what_it_would_and_oomscope_still_gets_the_dump() {
    // The script sets TF_CPP_MIN_LOG_LEVEL=2 itself before importing TensorFlow.
    let dir = temp_dir("tf-run-quiet");
    let o = run_keras(&dir, &["2"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let tf_lines: Vec<&str> = err.lines().filter(|l| tf_log_line(l)).collect();
    assert!(tf_lines.is_empty(), "TF's own lines stay hidden as the script asked: {tf_lines:?}");
    assert!(!err.contains("Current allocation summary follows") && !err.contains("Limit:  "), "{err}");
    assert!(err.contains("ResourceExhaustedError") && err.contains("Verdict: true peak"), "{err}");
    assert_eq!(the_dump(&dir)["verdict"]["kind"], "peak");
    std::fs::remove_dir_all(&dir).unwrap();

    // From the environment, at 1: warnings show, INFO does not.
    let dir = temp_dir("tf-run-warnings");
    let err = stderr(&run_keras(&dir, &[], &[("TF_CPP_MIN_LOG_LEVEL", "1")]));
    assert!(err.lines().any(|l| l.starts_with("W0000") && l.contains("ran out of memory")), "{err}");
    assert!(!err.lines().any(|l| l.starts_with("I0000")), "{err}");
    assert_eq!(the_dump(&dir)["verdict"]["kind"], "peak");
    std::fs::remove_dir_all(dir).unwrap();
}

fn tf_log_line(l: &str) -> bool {
    let b = l.as_bytes();
    b.len() > 6 && b"IWEF".contains(&b[0]) && b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' '
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn the_live_feed_shows_tfs_memory_while_it_runs_and_its_oom() {
    use oomscope_format::live::Message;
    use oomscope_live::Feed;
    let dir = temp_dir("tf-live");
    let live = dir.join("live");
    oomscope_live::private_dir(&live).unwrap();
    let py = tf_python();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--live", "--dump-dir"])
        .arg(dir.join("dumps"))
        .args(["--", &py])
        .arg(root().join("tests/tf/keras_train.py"))
        .env("TF_CPU_ALLOCATOR_USE_BFC", "true")
        // oneDNN's CPU kernels crash after an OOM on CPUs with AVX-512 BF16 (TensorFlow 2.20
        // and 2.21); without them TF runs the kernels a GPU build mirrors.
        .env("TF_ENABLE_ONEDNN_OPTS", "0")
        .env("TF_CPU_BFC_MEM_LIMIT_IN_MB", "256")
        .env("OOMSCOPE_LIVE_DIR", &live)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The framework's memory, sampled every half second, on a socket named by the program.
    let socket = loop {
        if let Some(s) = oomscope_live::sockets_in(&live).unwrap().into_iter().next() {
            break s;
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended before publishing");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut feed = Feed::connect(&socket).unwrap();
    let mut states = 0;
    let mut peak = 0;
    let oom = loop {
        match feed.next_message().unwrap() {
            Some(Message::State(s)) => {
                states += 1;
                peak = peak.max(s.stats.peak_bytes_in_use);
            }
            Some(Message::Oom(o)) => break o,
            Some(_) => {}
            None => panic!("the feed ended without the OOM"),
        }
    };
    assert!(child.wait().unwrap().code() == Some(1));
    assert!(states >= 1 && peak > 0, "{states} states, peak {peak}");
    assert_eq!(oom.dump.verdict.as_ref().unwrap().kind, oomscope_format::VerdictKind::Peak);
    assert!(oom.report.contains("BFCAllocator dump for bfc_cpu_allocator_for_gpu"), "{}", oom.report);
    std::fs::remove_dir_all(dir).unwrap();
}
