//! PyTorch memory snapshots in and out: pickles written by Python's own `pickle` (protocols
//! 2-5, and the older list-of-segments form) import; oomscope's exports load in Python with
//! the schema memory_viz reads, use only the opcodes memory_viz's unpickler knows, and run
//! through `torch.cuda._memory_viz` when torch is installed; Perfetto JSON is valid
//! trace-event JSON; `diff` says what grew.

use crate::common::*;
use std::path::Path;
use std::process::Command;

/// Runs a Python script with `python` and returns what it printed; fails the test when it fails.
fn run_python_with(python: &str, script: &str) -> String {
    let out = Command::new(python).arg("-c").arg(script).current_dir(root()).output().unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a Python script with python3 (the test fails where it cannot run).
fn run_python(script: &str) -> String {
    require("python3");
    run_python_with("python3", script)
}

const SNAPSHOT_PY: &str = r#"
import pickle, sys
out = sys.argv[1] if len(sys.argv) > 1 else None
torch_conv = {'filename': '/usr/lib/python3/site-packages/torch/nn/modules/conv.py', 'line': 456, 'name': '_conv_forward'}
user_a = {'filename': '/home/u/train.py', 'line': 42, 'name': 'forward'}
user_b = {'filename': '/home/u/train.py', 'line': 57, 'name': 'loss_fn'}
base = 139637976727552
seg0 = {'device': 0, 'address': base, 'total_size': 20971520, 'allocated_size': 12582912, 'active_size': 12582912,
        'requested_size': 12000000, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': (0, 0),
        'is_expandable': False, 'frames': [], 'blocks': [
    {'address': base, 'size': 8388608, 'requested_size': 8000000, 'state': 'active_allocated', 'frames': [torch_conv, user_a]},
    {'address': base + 8388608, 'size': 4194304, 'requested_size': 4000000, 'state': 'active_allocated', 'frames': [user_b]},
    {'address': base + 12582912, 'size': 8388608, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}
seg1 = {'device': 1, 'address': 2**63 + 4096, 'total_size': 2097152, 'allocated_size': 512, 'active_size': 512,
        'requested_size': 500, 'stream': 0, 'segment_type': 'small', 'segment_pool_id': (0, 0),
        'is_expandable': False, 'frames': [], 'blocks': [
    {'address': 2**63 + 4096, 'size': 512, 'requested_size': 500, 'state': 'active_allocated', 'frames': [user_a]},
    {'address': 2**63 + 4608, 'size': 2096640, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}
trace0 = [
    {'action': 'segment_alloc', 'addr': base, 'size': 20971520, 'stream': 0, 'time_us': 1000, 'frames': [user_a]},
    {'action': 'alloc', 'addr': base, 'size': 8388608, 'stream': 0, 'time_us': 1001, 'frames': [torch_conv, user_a]},
    {'action': 'alloc', 'addr': base + 8388608, 'size': 4194304, 'stream': 0, 'time_us': 1002, 'frames': [user_b]},
    {'action': 'alloc', 'addr': base + 12582912, 'size': 8388608, 'stream': 0, 'time_us': 1003, 'frames': [user_b]},
    {'action': 'free_requested', 'addr': base + 12582912, 'size': 8388608, 'stream': 0, 'time_us': 1004, 'frames': [user_b]},
    {'action': 'free_completed', 'addr': base + 12582912, 'size': 8388608, 'stream': 0, 'time_us': 1005, 'frames': [user_b]},
    {'action': 'oom', 'addr': 1048576, 'size': 16777216, 'stream': 0, 'time_us': 1006, 'device_free': 1048576, 'frames': [user_a]},
]
snap = {'segments': [seg0, seg1], 'device_traces': [trace0, []],
        'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': '', 'expandable_segments': False, 'max_split_size': -1}}
legacy = [dict(seg0, blocks=[{'size': b['size'], 'state': b['state'],
                              'history': [{'addr': b['address'], 'real_size': b['requested_size'], 'frames': b['frames']}]}
                             for b in seg0['blocks']])]
import os
os.makedirs('target/snapshots', exist_ok=True)
for proto in (2, 3, 4, 5):
    with open(f'target/snapshots/snap{proto}.pickle', 'wb') as f:
        pickle.dump(snap, f, protocol=proto)
with open('target/snapshots/legacy.pickle', 'wb') as f:
    pickle.dump(legacy, f, protocol=2)
print('ok')
"#;

fn import_json(path: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["import", path, "--format", "json"];
    args.extend_from_slice(extra);
    let out = oomscope(&args);
    assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn snapshots_pickled_by_python_import() {
    run_python(SNAPSHOT_PY);
    for proto in 2..=5 {
        let path = format!("target/snapshots/snap{proto}.pickle");
        let d = import_json(&path, &[]);
        assert_eq!(d["source"]["kind"], "torch-snapshot", "protocol {proto}");
        assert_eq!(d["device"]["name"], "cuda:0", "the device with the OOM");
        let chunks = d["regions"][0]["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0]["op"], "train.py:42 (forward)", "named by the innermost frame outside torch");
        assert_eq!(chunks[1]["op"], "train.py:57 (loss_fn)");
        assert_eq!(chunks[0]["requested"], 8_000_000);
        assert_eq!(d["stats"]["bytes_in_use"], 12_582_912);
        assert_eq!(d["stats"]["pool_bytes"], 20_971_520);
        assert_eq!(d["stats"]["peak_bytes_in_use"], 20_971_520, "from the trace: three allocations at once");
        assert_eq!(d["oom"]["requested"], 16_777_216);
        assert_eq!(d["oom"]["device_free"], 1_048_576);
        assert_eq!(d["oom"]["op"], "train.py:42 (forward)");
        let kinds: Vec<&str> = d["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, vec!["extend", "alloc", "alloc", "alloc", "free", "oom"]);
        let frames = &d["stacks"][d["regions"][0]["chunks"][0]["stack"].as_u64().unwrap() as usize]["frames"];
        assert_eq!(frames[0]["function"], "_conv_forward");
        assert_eq!(d["verdict"]["kind"], "peak", "{}", d["verdict"]);
    }
    let dev1 = import_json("target/snapshots/snap4.pickle", &["--device", "1"]);
    assert_eq!(dev1["regions"][0]["address"].as_u64(), Some((1u64 << 63) + 4096), "addresses past 2^63");
    assert!(dev1["oom"].is_null());
    let legacy = import_json("target/snapshots/legacy.pickle", &["--from", "torch-snapshot"]);
    assert_eq!(legacy["regions"][0]["chunks"][1]["op"], "train.py:57 (loss_fn)", "frames from the block's history");
    assert_eq!(
        legacy["regions"][0]["chunks"][0]["address"], 139_637_976_727_552u64,
        "addresses accumulate from the segment"
    );
}

#[test]
fn bad_snapshots_are_refused_clearly() {
    let dir = temp_dir("bad-snapshots");
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "truncated.pickle",
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments",
            "not a readable pickle (byte",
        ),
        ("notdict.pickle", b"\x80\x02K\x05.", "the pickle holds no dict or list"),
        ("nosegments.pickle", b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s.", "without \"segments\""),
        ("text.pkl", b"hello", "not a readable pickle"),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = oomscope(&["import", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(stderr(&out).contains(expected) && stderr(&out).contains(name), "{name}: {}", stderr(&out));
    }
}

/// A demo's dump, exported both ways.
fn exported(name: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_dir(name);
    let dump = dir.join("unet.dump.json");
    let demo = oomscope(&["demo", "-o", dump.to_str().unwrap(), "--format", "json"]);
    assert_eq!(demo.status.code(), Some(0));
    let pickle = dir.join("unet.snapshot.pickle");
    let trace = dir.join("unet.perfetto.json");
    for format in ["torch-snapshot", "perfetto"] {
        let out = oomscope(&["export", dump.to_str().unwrap(), "--format", format]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    assert!(pickle.exists() && trace.exists(), "{:?}", files_in(&dir));
    (dump, pickle, trace)
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn the_exported_snapshot_loads_in_python_and_memory_viz_reads_its_opcodes() {
    let (dump, pickle, _) = exported("export-pickle");
    let script = format!(
        r#"
import pickle, pickletools
data = open({pickle:?}, 'rb').read()
s = pickle.loads(data)
assert set(s) >= {{'segments', 'device_traces', 'allocator_settings'}}, sorted(s)
seg = s['segments'][0]
for key in ('device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size', 'stream',
            'segment_type', 'segment_pool_id', 'is_expandable', 'frames', 'blocks'):
    assert key in seg, key
addr = seg['address']
for b in seg['blocks']:
    assert b['address'] == addr, 'blocks tile the segment in order'
    assert set(b) >= {{'address', 'size', 'requested_size', 'state', 'frames'}}
    assert b['state'] in ('active_allocated', 'inactive')
    addr += b['size']
assert addr == seg['address'] + seg['total_size']
actions = {{e['action'] for e in s['device_traces'][0]}}
assert actions <= {{'alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'oom'}}, actions
assert 'oom' in actions and 'alloc' in actions
for e in s['device_traces'][0]:
    assert set(e) >= {{'action', 'addr', 'size', 'stream', 'time_us', 'frames'}}
frame = seg['blocks'][0]['frames'][0]
assert set(frame) == {{'filename', 'line', 'name'}}
# The opcodes pytorch.org/memory_viz's own unpickler accepts (MemoryViz.js): nothing else.
allowed = {{'PROTO', 'FRAME', 'STOP', 'MARK', 'EMPTY_DICT', 'EMPTY_LIST', 'EMPTY_TUPLE', 'SETITEM', 'SETITEMS',
           'APPEND', 'APPENDS', 'LIST', 'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'DICT', 'NONE', 'NEWTRUE', 'NEWFALSE',
           'BININT', 'BININT1', 'BININT2', 'LONG1', 'BINFLOAT', 'BINUNICODE', 'SHORT_BINUNICODE', 'BINPUT',
           'LONG_BINPUT', 'BINGET', 'LONG_BINGET', 'MEMOIZE'}}
used = {{op.name for op, arg, pos in pickletools.genops(data)}}
assert used <= allowed, used - allowed
proto = next(arg for op, arg, pos in pickletools.genops(data) if op.name == 'PROTO')
assert 2 <= proto <= 4, proto
print('ok')
"#
    );
    let out = run_python(&script);
    assert!(out.contains("ok"), "{out}");
    // And back: the snapshot imports with the same nodes and bytes.
    let original: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let back = import_json(pickle.to_str().unwrap(), &[]);
    let nodes = |d: &serde_json::Value| {
        let mut v: Vec<(String, u64)> = d["usage_by_node"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["op"].as_str().unwrap().to_string(), n["bytes"].as_u64().unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(nodes(&back), nodes(&original));
    assert_eq!(back["oom"]["requested"], original["oom"]["rounded"]);
}

#[test]
fn the_perfetto_export_is_valid_trace_event_json() {
    let (dump, _, trace) = exported("export-perfetto");
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().expect("traceEvents");
    let mut open: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let (mut counters, mut ooms, mut last_ts) = (0, 0, 0u64);
    for e in events {
        let ph = e["ph"].as_str().expect("every event has ph");
        assert!(e["pid"].is_u64(), "{e}");
        if ph != "M" {
            let ts = e["ts"].as_u64().expect("ts in microseconds");
            if ph == "C" {
                assert!(ts >= last_ts, "counters in time order");
                last_ts = ts;
                counters += 1;
                assert!(e["args"]["in_use"].is_i64() && e["args"]["pool"].is_i64(), "{e}");
            }
        }
        match ph {
            "b" => assert!(
                open.insert(e["id"].as_str().unwrap().to_string(), e["name"].as_str().unwrap().to_string()).is_none(),
                "ids are unique while open"
            ),
            "e" => assert_eq!(
                open.remove(e["id"].as_str().unwrap()).as_deref(),
                e["name"].as_str(),
                "an end matches its begin"
            ),
            "i" => {
                ooms += usize::from(
                    e["name"].as_str().unwrap().starts_with("OOM: 450.00MiB for shared_model/unet_10/FusedBatchNorm"),
                )
            }
            "C" | "M" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(open.is_empty(), "every slice ends: {open:?}");
    assert_eq!(ooms, 1);
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert!(counters > 200);
    // The last counter equals the dump's end state.
    let last = events.iter().rev().find(|e| e["ph"] == "C").unwrap();
    assert_eq!(last["args"]["in_use"], d["stats"]["bytes_in_use"]);
    assert_eq!(last["args"]["pool"], d["stats"]["pool_bytes"]);
}

#[test]
fn diff_names_what_grew_between_two_dumps() {
    let dir = temp_dir("diff");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    // The same growing loop stopped at step 25 (OOM at 120 MiB) and run to step 47 (1 GiB).
    oomscope(&["replay", "fixtures/traces/steps-growth.jsonl", "--limit", "120MiB", "-o", a.to_str().unwrap()]);
    oomscope(&["replay", "fixtures/traces/steps-growth.jsonl", "--limit", "1GiB", "-o", b.to_str().unwrap()]);
    let out = oomscope(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let grew = text.split("Grew (by node):\n").nth(1).unwrap_or_default();
    assert!(
        grew.lines().next().unwrap_or_default().trim() == "+23.00MiB  metrics/Mean  (25 -> 48 allocations)",
        "{text}"
    );
    assert!(text.contains("Grew (by scope):\n"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(
        &oomscope(&["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--format", "json"]).stdout,
    )
    .unwrap();
    // Ordered by the size of the change: the gradient freed at the end shrank by more.
    let node =
        |name: &str| json["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).cloned().unwrap_or_default();
    assert_eq!(node("metrics/Mean")["delta"], 23 << 20);
    assert_eq!(node("metrics/Mean")["count_after"], 48);
    assert_eq!(node("gradients/model/dense/MatMul_grad/MatMul")["delta"], -(39i64 << 20));
    assert!(json["scopes"].as_array().unwrap().iter().any(|s| s["name"] == "metrics" && s["delta"] == 23 << 20));
    let missing = oomscope(&["diff", a.to_str().unwrap(), "nope.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(Path::new(&a).exists());
}

/// PyTorch's own memory_viz tools read the exported snapshot: the summary of segments and
/// the trace print without an error.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn pytorchs_memory_viz_reads_the_export() {
    let python = torch_python();
    let (_, pickle, _) = exported("export-memory-viz");
    let script = format!(
        r#"
import pickle
import torch.cuda._memory_viz as mv
s = pickle.load(open({pickle:?}, 'rb'))
summary = mv.segsum(s)
assert 'segment' in summary.lower(), summary[:200]
print(summary.splitlines()[0])
print(mv.trace(s).splitlines()[0])
print('ok')
"#
    );
    let out = run_python_with(&python, &script);
    assert!(out.trim_end().ends_with("ok"), "{out}");
}

/// A dump imported from a TensorFlow log has usage by node, perhaps a few chunks, and no
/// history: an export that would show nothing is refused with what to do, and one that
/// shows part says what is missing.
#[test]
fn an_export_that_would_show_nothing_is_refused_and_a_partial_one_says_so() {
    let dir = temp_dir("export-partial");
    let listing = dir.join("listing.dump.json");
    let o = oomscope(&["import", "fixtures/logs/seed-003-unet.txt", "-o", listing.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    for format in ["perfetto", "torch-snapshot"] {
        let o = oomscope(&["export", listing.to_str().unwrap(), "--format", format]);
        assert_eq!(o.status.code(), Some(2), "{format}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("the viewer would show nothing") && stderr(&o).contains("oomscope report"),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(files_in(&dir), ["listing.dump.json"], "nothing written");
    let chunks = dir.join("chunks.dump.json");
    let o = oomscope(&["import", "fixtures/logs/seed-001-mnist.txt", "-o", chunks.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = oomscope(&["export", chunks.to_str().unwrap(), "--format", "torch-snapshot"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no history of allocations") && stderr(&o).contains("empty timeline"),
        "{}",
        stderr(&o)
    );
}
