//! Hostile input, round two: see docs/hostile-input.md. Sizes beyond any device, a snapshot
//! of a hundred thousand streams, sizes that are not sizes, devices and options that do
//! not apply. Each snapshot is written here with the pickle writer; every command runs
//! under a 1 GB address-space limit, so a blowup fails as a crash instead of eating the
//! machine, and none may exit by a signal.

use crate::common::*;
use oomscope_report::pickle::{Out, write};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const ADDRESS_SPACE: u64 = 1_000_000_000;
/// Only a guard against a hang: no timing is asserted.
const HANG_GUARD: Duration = Duration::from_secs(600);
const BASE: i128 = 0x7f00_0000_0000;

fn capped(args: &[&str]) -> Output {
    oomscope_bounded(args, Some(ADDRESS_SPACE), HANG_GUARD)
}

fn int(i: i128) -> Out {
    Out::Int(i)
}

fn dict(items: &[(&str, Out)]) -> Out {
    Out::Dict(items.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

/// A trace entry: `action` at `addr` of `size` on `stream`, with `extra` fields.
fn entry(action: &str, addr: i128, size: Out, stream: i128, extra: &[(&str, Out)]) -> Out {
    let frames = Out::List(vec![dict(&[
        ("filename", Out::Str("train.py".into())),
        ("line", int(7)),
        ("name", Out::Str("step".into())),
    ])]);
    let mut items = vec![
        ("action", Out::Str(action.into())),
        ("addr", int(addr)),
        ("size", size),
        ("stream", int(stream)),
        ("time_us", int(1)),
        ("frames", frames),
    ];
    items.extend(extra.iter().cloned());
    dict(&items)
}

/// A snapshot of `devices` devices, `trace` on device 0, no final segments.
fn snapshot(dir: &Path, name: &str, trace: Vec<Out>, devices: usize) -> PathBuf {
    let mut traces = vec![Out::List(trace)];
    traces.extend((1..devices).map(|_| Out::List(Vec::new())));
    let settings = dict(&[
        ("PYTORCH_CUDA_ALLOC_CONF", Out::Str(String::new())),
        ("expandable_segments", Out::Bool(false)),
        ("max_split_size", int(-1)),
    ]);
    let snap = dict(&[
        ("segments", Out::List(Vec::new())),
        ("device_traces", Out::List(traces)),
        ("allocator_settings", settings),
    ]);
    let mut bytes = Vec::new();
    write(&snap, &mut bytes);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A segment and an allocation in it, then a failed request of `request` bytes with
/// `free` bytes free on the device.
fn oom_trace(request: i128, free: i128) -> Vec<Out> {
    vec![
        entry("segment_alloc", BASE, int(2 << 20), 0, &[]),
        entry("alloc", BASE, int(1 << 20), 0, &[]),
        entry("oom", 0, int(request), 0, &[("device_free", int(free))]),
    ]
}

/// Exit 2, naming the file and saying `why`.
fn refused(o: &Output, path: &Path, why: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "exit {:?}: {e}", o.status);
    assert!(e.contains(&*path.to_string_lossy()), "the message names the file: {e}");
    assert!(e.contains(why), "the message says {why:?}: {e}");
}

/// A normal exit (0, or 1 for an OOM replayed), never a signal or a panic.
fn ran(o: &Output) {
    let e = stderr(o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "exit {:?}: {e}", o.status);
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn sizes_beyond_any_device_are_refused_and_huge_requests_replay() {
    let dir = temp_dir("hostile-limits-huge");
    // An OOM entry saying 2^62 bytes were free: the expandable segments' page table was
    // sized by it (an abort in 0.1 s); now the figure is refused.
    let path = snapshot(&dir, "free.pickle", oom_trace(1 << 63, 1 << 62), 1);
    let p = path.to_str().unwrap();
    for args in [&["import", p][..], &["replay", p], &["replay", p, "--set", "expandable_segments:True"]] {
        refused(&capped(args), &path, "\"device_free\" is 4611686018427387904 bytes: beyond any device");
    }
    // A request of 2^63 or 2^64-1 bytes on a 1 GiB device: an OOM, replayed under every
    // setting without an overflow.
    for request in [1i128 << 63, (1i128 << 64) - 1] {
        let path = snapshot(&dir, "request.pickle", oom_trace(request, 1 << 30), 1);
        let p = path.to_str().unwrap();
        ran(&capped(&["import", p]));
        for set in ["expandable_segments:True", "roundup_power2_divisions:4", "garbage_collection_threshold:0.5"] {
            ran(&capped(&["replay", p, "--set", set]));
        }
    }
    // Devices and limits past 1 PiB are refused with the size; 1 PiB itself runs, its
    // expandable segments costing memory by what is mapped.
    let trace = dir.join("one.jsonl");
    std::fs::write(&trace, "{\"ev\":\"alloc\",\"id\":1,\"bytes\":1048576}\n").unwrap();
    let t = trace.to_str().unwrap();
    let o =
        capped(&["replay", t, "--limit", "131072TiB", "--allocator", "caching", "--conf", "expandable_segments:True"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("128.00PiB (144115188075855872 bytes) is beyond any device"), "{}", stderr(&o));
    let o = capped(&["run", "--device", "sim:131072TiB", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("beyond any device: oomscope takes sizes up to 1.00PiB"), "{}", stderr(&o));
    let o = capped(&["replay", t, "--limit", "1PiB", "--allocator", "caching", "--conf", "expandable_segments:True"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `n` streams, each with a 2 MiB segment and a 1 MiB allocation in it.
fn streams(dir: &Path, n: i128) -> PathBuf {
    let trace: Vec<Out> = (0..n)
        .flat_map(|i| {
            let a = BASE + i * (2 << 20);
            [entry("segment_alloc", a, int(2 << 20), i + 1, &[]), entry("alloc", a, int(1 << 20), i + 1, &[])]
        })
        .collect();
    snapshot(dir, &format!("streams{n}.pickle"), trace, 1)
}

#[test]
fn a_hundred_thousand_streams_replay_in_bounded_memory() {
    // Each 1 MiB allocation on its own stream. The free set kept 8 KiB of bins a stream and
    // looked streams up in a list: 100k streams took 10 s and 950 MB; expandable segments
    // reserved terabytes of address space for 20k (an abort under this limit), and every
    // OOM then walked every block. Under a 1 GB address space all must finish.
    let dir = temp_dir("hostile-limits-streams");
    let path = streams(&dir, 100_000);
    let p = path.to_str().unwrap();
    ran(&capped(&["import", p]));
    let o = capped(&["replay", p, "--format", "json"]);
    ran(&o);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["replay"]["allocations"], 100_000, "{}", stderr(&o));
    assert_eq!(d["replay"]["placed"], 100_000);
    let path = streams(&dir, 20_000);
    ran(&capped(&["replay", path.to_str().unwrap(), "--set", "expandable_segments:True"]));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sizes_that_are_not_sizes_are_refused_where_they_are() {
    let dir = temp_dir("hostile-limits-sizes");
    let cases = [
        (Out::Int(-(8 << 20)), "\"size\" is -8388608: negative"),
        (Out::Str("8MB".into()), "\"size\" is \"8MB\": not an integer"),
        (Out::Float(f64::NAN), "\"size\" is NaN: not an integer"),
        (Out::Int(1 << 64), "\"size\" is 18446744073709551616 bytes: beyond any device"),
    ];
    for (i, (size, why)) in cases.into_iter().enumerate() {
        let path = snapshot(&dir, &format!("size{i}.pickle"), vec![entry("alloc", BASE, size, 0, &[])], 1);
        let p = path.to_str().unwrap();
        for cmd in ["import", "replay"] {
            let o = capped(&[cmd, p]);
            refused(&o, &path, why);
            assert!(stderr(&o).contains("trace entry 0 of device 0 (alloc)"), "{}", stderr(&o));
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn devices_and_options_that_do_not_apply_are_refused_not_ignored() {
    let dir = temp_dir("hostile-limits-options");
    let path = snapshot(&dir, "four.pickle", vec![entry("alloc", BASE, int(1 << 20), 0, &[])], 4);
    let p = path.to_str().unwrap();
    for cmd in ["import", "replay"] {
        refused(&capped(&[cmd, p, "--gpu", "4"]), &path, "no device 4 in this snapshot: it records devices 0, 1, 2, 3");
    }
    ran(&capped(&["import", p, "--gpu", "3"]));
    // A snapshot's replay names every option it does not take.
    let o = capped(&["replay", p, "--conf", "total garbage", "--limit", "1KiB", "--allocator", "bfc"]);
    refused(&o, &path, "is a PyTorch memory snapshot; these options do not apply to it");
    for option in ["--limit:", "--allocator:", "--conf:"] {
        assert!(stderr(&o).contains(option), "{}", stderr(&o));
    }
    // --gpu picks a snapshot's device; a trace or a message has one.
    let trace = dir.join("one.jsonl");
    std::fs::write(&trace, "{\"ev\":\"alloc\",\"id\":1,\"bytes\":1024}\n").unwrap();
    let o = capped(&["replay", trace.to_str().unwrap(), "--limit", "1GiB", "--gpu", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--gpu picks a PyTorch snapshot's device"), "{}", stderr(&o));
    // BFC's options through the caching allocator.
    let o = capped(&["replay", trace.to_str().unwrap(), "--limit", "1GiB", "--allocator", "caching", "--gc"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--gc is for TensorFlow's BFC allocator"), "{}", stderr(&o));
    // A PyTorch message read as a TF log: what it is, not Python's MemoryError inside
    // `torch.OutOfMemoryError`.
    let message = dir.join("message.txt");
    std::fs::write(
        &message,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of \
         23.65 GiB of which 1.02 GiB is free. Of the allocated memory 21.80 GiB is allocated by PyTorch, and \
         350.12 MiB is reserved by PyTorch but unallocated.\n",
    )
    .unwrap();
    let m = message.to_str().unwrap();
    let o = capped(&["import", "--from", "tf-log", m]);
    refused(&o, &message, "an out-of-memory message: read it with --from message");
    assert!(!stderr(&o).contains("host memory"), "{}", stderr(&o));
    ran(&capped(&["import", m]));
    refused(&capped(&["import", m, "--gpu", "1"]), &message, "--gpu picks a PyTorch snapshot's device");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn settings_pytorch_refuses_are_refused_in_its_words() {
    let dir = temp_dir("hostile-limits-settings");
    let path = snapshot(&dir, "s.pickle", oom_trace(64 << 20, 1 << 20), 1);
    let p = path.to_str().unwrap();
    for (set, why) in [
        ("max_split_size_mb:NaN", "does not start with one (PyTorch's std::stoi throws invalid_argument)"),
        ("max_split_size_mb:inf", "std::stoi throws invalid_argument"),
        ("max_split_size_mb:20.5", "max_split_size_mb too small, must be > 20"),
        ("max_split_size_mb:1e400", "max_split_size_mb too small, must be > 20"),
        ("garbage_collection_threshold:nan", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
        ("expandable_segments:true", "Expected a single True/False argument for expandable_segments"),
    ] {
        let o = capped(&["replay", p, "--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{set}: {}", stderr(&o));
    }
    // 21.9 is read as PyTorch reads it: 21, and said so.
    let o = capped(&["replay", p, "--set", "max_split_size_mb:21.9", "--format", "json"]);
    ran(&o);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["replay"]["what_ifs"][1]["settings"], "max_split_size_mb:21", "{d}");
    // oomscope run refuses it before the program starts, as PyTorch would at its first
    // allocation.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_oomscope"));
    let o =
        c.args(["run", "--device", "sim:1GiB", "--", "true"]).env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:NaN");
    let o = o.output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("std::stoi"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}
