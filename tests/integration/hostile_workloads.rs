//! Hostile input: see docs/hostile-input.md. Workloads whose sizes pass 2^64 bytes, with
//! hundreds of thousands of layers or a billion steps; dumps without times given to
//! `export`; traces of allocations never freed; sizes at and above 2^63 bytes.
//!
//! Nothing here asserts a timing: the work that used to be quadratic is given a size at
//! which the old code ran for minutes, under a guard that kills it long before; memory is
//! bounded by an address-space limit on the child.

use crate::common::*;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// Far beyond what the linear code takes in a debug build on a loaded machine, far below the
/// minutes the quadratic code took.
const GUARD: Duration = Duration::from_secs(60);

/// `oomscope ARGS` killed after [`GUARD`], its address space capped when given.
fn bounded(args: &[&str], address_space: Option<u64>) -> Output {
    oomscope_bounded(args, address_space, GUARD)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

const SMALL: &str = r#"{"input": [8, 8, 3], "batch": 2, "mode": "eval", "layers": [
  {"op": "conv2d", "filters": 4},
  {"op": "relu"}
]}
"#;

#[test]
fn a_workload_past_2_pow_64_bytes_is_refused_naming_the_file_not_wrapped() {
    let dir = temp_dir("workload-overflow");
    // 2^32 x 2^32 x 16 floats: 2^70 bytes, which wrapped to a size that "fit".
    let huge = dir.join("huge.json");
    fs::write(
        &huge,
        "{\"input\": [4294967296, 4294967296, 16],\n \"batch\": 1, \"mode\": \"eval\", \"layers\": [{\"op\": \"relu\"}]}\n",
    )
    .unwrap();
    let o = bounded(&["fit", path(&huge), "--device", "8GiB"], None);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}{err}", stdout(&o));
    assert!(
        err.contains(&format!(
            "{}:1: the input (\"input\") at batch 1, [1,4294967296,4294967296,16] float32",
            huge.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("more than 16.00EiB (2^64 bytes)") && err.contains("make the batch, the input shape"),
        "{err}"
    );
    assert!(!stdout(&o).contains("fits"), "{}", stdout(&o));

    // A batch of 2^64 - 1, from the command line: every command refuses it the same way.
    let small = dir.join("small.json");
    fs::write(&small, SMALL).unwrap();
    let max = u64::MAX.to_string();
    for args in
        [vec!["replay", path(&small), "--limit", "8GiB", "--batch", &max], vec!["demo", path(&small), "--batch", &max]]
    {
        let o = bounded(&args, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("{}:1: the input", small.display())), "{args:?}: {err}");
        assert!(err.contains("at batch 18446744073709551615") && err.contains("2^64 bytes"), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("internal error"), "{args:?}: {err}");
    }

    // A search up to 2^64 - 1 stops where the device is full; nothing overflows on the way.
    let o = bounded(&["fit", path(&small), "--device", "8GiB", "--max-batch", &max], None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("Largest evaluation chunk that fits"), "{}", stdout(&o));
}

#[test]
fn a_model_of_200000_layers_is_read_and_fitted_in_linear_time() {
    let dir = temp_dir("many-layers");
    let model = dir.join("deep.json");
    let mut text = String::from("{\"input\": [8], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n");
    for i in 0..200_000 {
        text.push_str(if i == 0 { "  {\"op\": \"relu\"}" } else { ",\n  {\"op\": \"relu\"}" });
    }
    text.push_str("\n]}\n");
    fs::write(&model, text).unwrap();
    let o = bounded(&["fit", path(&model), "--device", "1GiB"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("Largest evaluation chunk that fits"), "{}", stdout(&o));

    // An error in the last layer still names its line.
    let bad = dir.join("deep-bad.json");
    let mut text = String::from("{\"input\": [8], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n");
    for _ in 0..200_000 {
        text.push_str("  {\"op\": \"relu\"},\n");
    }
    text.push_str("  {\"op\": \"conv3d\"}\n]}\n");
    fs::write(&bad, text).unwrap();
    let o = bounded(&["fit", path(&bad), "--device", "1GiB"], None);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{}:200002: unknown op \"conv3d\"", bad.display())), "{}", stderr(&o));
}

/// An address space no simulation within the bounds needs, and far less than a billion
/// steps took.
const SIM_SPACE: u64 = 2 << 30;

#[test]
fn a_billion_steps_are_refused_before_any_is_simulated() {
    let dir = temp_dir("many-steps");
    let model = dir.join("steps.json");
    fs::write(&model, SMALL.replace("\"mode\": \"eval\",", "\"mode\": \"eval\",\n \"steps\": 1000000000,")).unwrap();
    let o = bounded(&["demo", path(&model)], Some(SIM_SPACE));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:2: \"steps\": 1000000000 steps is more than the 10000 a simulation runs",
            model.display()
        )),
        "{err}"
    );

    // The same count from the command line.
    let small = dir.join("small.json");
    fs::write(&small, SMALL).unwrap();
    let o = bounded(&["demo", path(&small), "--steps", "1000000000"], Some(SIM_SPACE));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("1000000000 steps is more than the 10000 a simulation runs"), "{err}");

    // Within the bound on steps, the bound on events: 5000 layers for 10 000 steps.
    let wide = dir.join("wide.json");
    let layers = vec!["{\"op\": \"conv2d\", \"filters\": 1, \"kernel\": 1, \"bias\": false}"; 5000].join(",\n");
    fs::write(
        &wide,
        format!("{{\"input\": [1, 1, 1], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n{layers}\n]}}\n"),
    )
    .unwrap();
    let o = bounded(&["demo", path(&wide), "--steps", "10000"], Some(SIM_SPACE));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("would make more than 10000000 events") && err.contains("simulate fewer steps"), "{err}");
}

#[test]
fn export_of_a_dump_without_times_is_linear_in_its_events() {
    let dir = temp_dir("export-no-times");
    // 100 000 allocations and frees, no "t": the dump's 200 001 events have no times (the
    // export asked the whole history whether it had times once per event).
    let trace = dir.join("churn.jsonl");
    let mut text = String::with_capacity(100_000 * 90);
    for i in 0..100_000u32 {
        let _ = writeln!(
            text,
            "{{\"ev\":\"alloc\",\"id\":{i},\"bytes\":{},\"op\":\"layer_{}/MatMul\"}}",
            1024 * (1 + i % 50),
            i % 100
        );
        let _ = writeln!(text, "{{\"ev\":\"free\",\"id\":{i}}}");
    }
    fs::write(&trace, text).unwrap();
    let dump = dir.join("churn.dump.json");
    let o = bounded(&["replay", path(&trace), "--limit", "1GiB", "--history", "300000", "-o", path(&dump)], None);
    assert!(o.status.success(), "{}", stderr(&o));

    let pickle = dir.join("churn.pickle");
    let o = bounded(&["export", path(&dump), "--format", "torch-snapshot", "-o", path(&pickle)], None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fs::metadata(&pickle).unwrap().len() > 200_000 * 20, "every event is in the snapshot");

    // The Perfetto file is written as it is made; its memory does not grow with the history.
    let json = dir.join("churn.perfetto.json");
    let o = bounded(&["export", path(&dump), "--format", "perfetto", "-o", path(&json)], Some(EXPORT_SPACE));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = fs::read_to_string(&json).unwrap();
    assert!(text.starts_with("{\"displayTimeUnit\":\"ms\",\"otherData\":{") && text.ends_with("]}\n"));
    assert!(text.contains("\"times\":\"event positions (the dump has no times)\""));
    assert_eq!(text.matches("\"ph\":\"b\"").count(), 100_000, "a slice for every allocation");
    assert_eq!(text.matches("\"ph\":\"e\"").count(), 100_000);
}

/// Address space for writing the Perfetto file of 200 000 events; holding its JSON whole
/// took over a gigabyte.
const EXPORT_SPACE: u64 = 400 << 20;

#[test]
fn a_trace_of_allocations_never_freed_is_read_in_memory_proportional_to_it() {
    let dir = temp_dir("never-freed");
    // A million allocations, none freed: reading must keep every id, and kept each as an
    // owned string in a hash map, about 150 bytes beside the event's own 60.
    let trace = dir.join("leak.jsonl");
    let mut text = String::with_capacity(1_000_000 * 48);
    for i in 0..1_000_000u32 {
        let _ = writeln!(text, "{{\"ev\":\"alloc\",\"id\":\"t{i}\",\"bytes\":1024,\"op\":\"leak\"}}");
    }
    fs::write(&trace, text).unwrap();
    // The trace is read whole before the replay, which stops at the first failure.
    let o = bounded(&["replay", path(&trace), "--limit", "1MiB"], Some(LEAK_SPACE));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "the replay ran out of its 1 MiB, not of the host's memory: {err}");
    assert!(err.contains("out of memory at"), "{err}");
}

/// Address space for reading the million-allocation trace: the events (56 bytes each, in a
/// vector that doubles) and the live ids (4 bytes each) take under 100 MiB; the old table of
/// owned strings took over 210 MiB.
const LEAK_SPACE: u64 = 160 << 20;

#[test]
fn sizes_at_and_above_2_pow_63_print_exactly() {
    let dir = temp_dir("huge-sizes");
    let trace = dir.join("huge.jsonl");
    fs::write(
        &trace,
        "{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":18446744073709551615,\"op\":\"all\"}\n\
         {\"ev\":\"alloc\",\"id\":\"b\",\"bytes\":13835058055282163712,\"op\":\"three-quarters\"}\n",
    )
    .unwrap();
    let o = bounded(&["replay", path(&trace), "--limit", "8GiB", "--keep-going"], None);
    let out = stdout(&o);
    assert!(out.contains("16.00EiB (rounded to 18446744073709551615)"), "{out}");
    assert!(!out.contains("8.00EiB (rounded to 18446744073709551615)"), "{out}");

    // A trace no limit replays says so, instead of answering with the bound it searched to.
    let o = bounded(&["fit", path(&trace), "--device", "8GiB"], None);
    assert_eq!(o.status.code(), Some(1), "it does not fit: {}", stderr(&o));
    assert!(stdout(&o).contains("none up to 1.00PiB: it requests 16.00EiB at once"), "{}", stdout(&o));
}
