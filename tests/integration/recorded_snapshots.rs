//! Snapshots recorded for oomscope on a real GPU (`fixtures/torch-snapshots/`: PyTorch 2.11
//! on an NVIDIA H100, each trace from an empty allocator, with what PyTorch's own counters
//! said in `NAME.facts.json`). Each replays to PyTorch's final state and peaks; a what-if of
//! a setting predicts what the run with that setting really did; an OOM under a memory
//! fraction is read as one; imports name user code.

use crate::common::*;
use serde_json::{Value as Json, json};

const DIR: &str = "fixtures/torch-snapshots";
const MIB: u64 = 1 << 20;

fn pickle_path(name: &str) -> String {
    format!("{DIR}/{name}.pickle")
}

/// What PyTorch said of the run (`torch.cuda.max_memory_reserved()` and the like).
fn facts(name: &str) -> Json {
    serde_json::from_str(&std::fs::read_to_string(root().join(format!("{DIR}/{name}.facts.json"))).unwrap()).unwrap()
}

fn final_state(name: &str) -> Json {
    snapshot_final_state(&root().join(pickle_path(name)), 0)
}

fn replay_json(args: &[&str]) -> (Option<i32>, Json) {
    let o = oomscope(args);
    let d = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stderr(&o)));
    (o.status.code(), d)
}

#[test]
fn every_recorded_trace_replays_to_pytorchs_final_state_and_peaks() {
    for name in ["default", "expandable", "tuned", "streams", "oom", "oom_expandable", "gc", "frames", "long"] {
        let p = pickle_path(name);
        let (code, d) = replay_json(&["replay", &p, "--format", "json"]);
        let f = facts(name);
        let r = &d["replay"];
        assert_eq!(code, Some(if f["ooms"].as_array().unwrap().is_empty() { 0 } else { 1 }), "{name}");
        assert_eq!(r["starts_empty"], true, "{name}");
        assert_eq!(r["placed"], r["allocations"], "{name}: every allocation at PyTorch's address: {r}");
        assert_eq!(r["final_segments_equal"], r["final_segments"], "{name}: {r}");
        assert_eq!(r["peak_reserved"], f["max_memory_reserved"], "{name}: torch.cuda.max_memory_reserved()");
        assert_eq!(r["peak_allocated"], f["max_memory_allocated"], "{name}: torch.cuda.max_memory_allocated()");
        assert_eq!(r["settings_recorded"], true, "{name}: PyTorch 2.11 records its settings");
        if r["state"] == "end" {
            assert_eq!(dump_regions(&d), final_state(name), "{name}: the final state, block for block");
        }
    }
    // The side stream's tensor freed while the stream was busy is still pending free at the
    // snapshot, as PyTorch showed it.
    let (_, d) = replay_json(&["replay", &pickle_path("streams"), "--format", "json"]);
    let pending = d["regions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["chunks"].as_array().unwrap())
        .filter(|c| c["pending_free"] == true)
        .count();
    assert_eq!(pending as u64, facts("streams")["pending_free_blocks"].as_u64().unwrap());
    assert!(d["regions"].as_array().unwrap().iter().any(|r| r["stream"] != 0), "segments of the side stream");
}

/// The same program recorded with the defaults and with expandable segments: replaying
/// the first with `--set expandable_segments:True` predicts the second run's peaks to the
/// byte, and its baseline row is the first run's. A run that called `empty_cache` has it
/// called again where it did.
#[test]
fn a_what_if_predicts_the_run_pytorch_made_with_the_setting() {
    let (code, d) =
        replay_json(&["replay", &pickle_path("default"), "--set", "expandable_segments:True", "--format", "json"]);
    assert_eq!(code, Some(0));
    let w = d["replay"]["what_ifs"].as_array().unwrap();
    assert_eq!(w.len(), 2);
    let (base, exp) = (facts("default"), facts("expandable"));
    assert_eq!((w[0]["settings"].as_str(), w[0]["ooms"].as_u64()), (Some(""), Some(0)));
    assert_eq!(
        (&w[0]["peak_reserved"], &w[0]["peak_allocated"]),
        (&base["max_memory_reserved"], &base["max_memory_allocated"])
    );
    assert_eq!(w[1]["settings"], "expandable_segments:True");
    assert_eq!(
        (&w[1]["peak_reserved"], &w[1]["peak_allocated"]),
        (&exp["max_memory_reserved"], &exp["max_memory_allocated"])
    );
    // For people: the table.
    let o = oomscope(&["replay", &pickle_path("default"), "--set", "expandable_segments:True"]);
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("expandable_segments:True") && l.contains("1.70 GiB")),
        "{out}"
    );

    // empty_cache after step 2: the what-if's baseline releases the cache there too.
    let (_, d) =
        replay_json(&["replay", &pickle_path("tuned"), "--set", "expandable_segments:True", "--format", "json"]);
    let w = &d["replay"]["what_ifs"][0];
    let t = facts("tuned");
    assert_eq!(
        (&w["peak_reserved"], &w["peak_allocated"]),
        (&t["max_memory_reserved"], &t["max_memory_allocated"]),
        "{w}"
    );
}

/// A memory fraction of 2 GiB filled with 3-7 MiB tensors: PyTorch refuses a 20 MiB segment
/// with 76.67 GiB free on the device. The replay reads the cap from that and shows the state
/// at that first OOM. The free memory there is in pieces, but the replay with expandable
/// segments still runs out, as the real run with them did (further on): a true peak, with
/// the pieces as a note, never "fragmentation" against its own replay; with expandable
/// segments recorded, the run got further, as the replay does.
#[test]
fn an_oom_under_a_memory_fraction_is_read_as_one() {
    let (code, d) = replay_json(&["replay", &pickle_path("oom"), "--format", "json"]);
    assert_eq!(code, Some(1));
    let r = &d["replay"];
    assert_eq!(r["limit"], json!({"kind": "fraction", "bytes": 2048 * MIB}));
    assert_eq!((r["state"].as_str(), r["ooms"].as_u64()), (Some("first_oom"), Some(2)));
    let o = &d["oom"];
    assert_eq!((o["requested"].as_u64(), o["segment_request"].as_u64()), (Some(6 * MIB), Some(20 * MIB)));
    assert_eq!(d["verdict"]["kind"], "peak", "{}", d["verdict"]);
    let headline = d["verdict"]["headline"].as_str().unwrap();
    assert!(headline.contains("even with expandable_segments:True (replayed)"), "{headline}");
    assert!(
        d["verdict"]["evidence"].to_string().contains("102.00MiB free in the cache, in pieces"),
        "{}",
        d["verdict"]
    );
    assert!(
        d["verdict"]["fix"].as_str().unwrap().starts_with("expandable_segments:True is not enough"),
        "{}",
        d["verdict"]
    );
    assert_eq!(d["usage_by_node"][0]["count"], 383, "{}", d["usage_by_node"]);
    let o = oomscope(&["replay", &pickle_path("oom")]);
    let out = stdout(&o);
    assert!(out.contains("about 2.00 GiB allowed (set_per_process_memory_fraction)"), "{out}");
    assert!(out.contains("Tried to allocate 20.00 MiB. GPU 0 had 76.67 GiB free (its total capacity is not in the snapshot). 2.00 GiB allowed; Of the allocated memory 1.89 GiB is allocated by PyTorch, and 102.00 MiB is reserved by PyTorch but unallocated."), "{out}");
    assert!(out.contains("The state below is at the first of its 2 out-of-memory errors"), "{out}");
    // The real run with expandable segments went to 408 tensors before its first OOM; the
    // replay of its own trace agrees, on the same cap.
    assert_eq!(facts("oom_expandable")["held_at_first_oom"], 408);
    let (code, d) = replay_json(&["replay", &pickle_path("oom_expandable"), "--format", "json"]);
    assert_eq!(code, Some(1));
    assert_eq!(d["replay"]["limit"], json!({"kind": "fraction", "bytes": 2048 * MIB}));
    assert_eq!(d["usage_by_node"][0]["count"], 408, "{}", d["usage_by_node"]);
    // At both first OOMs, the figures PyTorch printed.
    for name in ["oom", "oom_expandable"] {
        let said = facts(name)["ooms"][0].as_str().unwrap().to_string();
        let figures = &said[said.find("Of the allocated memory").unwrap()..said.find(" If reserved").unwrap()];
        let out = stdout(&oomscope(&["replay", &pickle_path(name)]));
        assert!(out.contains(figures), "{name}: PyTorch said {figures:?}\n{out}");
    }
}

/// Frames of PyTorch 2.11 (`stacks="all"`: C++ frames too) name the aten op and the user's
/// line, never PyTorch's internals; the backward pass is named by its autograd node; blocks
/// the backward pass made with Python frames only are said to be that, not "before
/// recording began".
#[test]
fn imports_of_pytorch_2_11_snapshots_name_user_code() {
    let (code, d) = replay_json(&["import", &pickle_path("frames"), "--format", "json"]);
    assert_eq!(code, Some(0));
    let nodes: Vec<&str> = d["usage_by_node"].as_array().unwrap().iter().map(|n| n["op"].as_str().unwrap()).collect();
    assert!(nodes.iter().all(|n| !oomscope_ingest::import::torch_frames::is_internal(n)), "{nodes:?}");
    assert!(nodes.contains(&"aten::mm in the backward of addmm"), "{nodes:?}");
    assert!(nodes.contains(&"aten::mm at record-torch-snapshots.py:56 (train)"), "{nodes:?}");
    let (_, d) = replay_json(&["import", &pickle_path("default"), "--format", "json"]);
    let nodes: Vec<&str> = d["usage_by_node"].as_array().unwrap().iter().map(|n| n["op"].as_str().unwrap()).collect();
    assert!(nodes.contains(&oomscope_ingest::import::torch_frames::NO_PYTHON_FRAMES), "{nodes:?}");
    assert!(!nodes.contains(&oomscope_ingest::import::torch_frames::BEFORE_RECORDING), "{nodes:?}");
}

/// What the memory is, read from the frames PyTorch recorded: the transformer trained with
/// AdamW (`long`: 84 MB of weights) keeps its weights (made in `Module.cuda()`), AdamW's two
/// moments per weight (made in `step`), and its activations apart, in an import and in a
/// replay alike; a trace recorded with C++ frames tells the backward pass's tensors too.
#[test]
fn kinds_come_from_the_recorded_frames() {
    let kinds = |d: &Json| -> Vec<(String, u64)> {
        d["verdict"]["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| (k["kind"].as_str().unwrap().to_string(), k["bytes"].as_u64().unwrap()))
            .collect()
    };
    let of = |b: &[(String, u64)], k: &str| b.iter().filter(|(n, _)| n == k).map(|(_, v)| v).sum::<u64>();
    let (_, imported) = replay_json(&["import", &pickle_path("long"), "--format", "json"]);
    let (_, replayed) = replay_json(&["replay", &pickle_path("long"), "--format", "json"]);
    for b in [kinds(&imported), kinds(&replayed)] {
        let (w, o) = (of(&b, "weight"), of(&b, "optimizer"));
        assert!((80_000_000..88_000_000).contains(&w), "the model's 84 MB of weights: {b:?}");
        assert!(o >= 2 * w && o < 2 * w + 2 * w / 50, "AdamW's two moments per weight: {b:?}");
        assert!(of(&b, "activation") > 0, "{b:?}");
    }
    let (_, frames) = replay_json(&["import", &pickle_path("frames"), "--format", "json"]);
    assert!(of(&kinds(&frames), "backward") > 0, "{:?}", kinds(&frames));
}

/// Snapshots of two training programs on an H200 (`fixtures/torch-snapshots-h200/`):
/// replayed, every allocation at PyTorch's address, every final segment equal, and the peaks
/// PyTorch's own counters said.
#[test]
fn training_programs_recorded_on_an_h200_replay_to_pytorchs_peaks() {
    for name in ["gpt2-b8-fp32", "resnet50-b32-fp32"] {
        let dir = "fixtures/torch-snapshots-h200";
        let (code, d) = replay_json(&["replay", &format!("{dir}/{name}.pickle"), "--format", "json"]);
        let f: Json =
            serde_json::from_str(&std::fs::read_to_string(root().join(format!("{dir}/{name}.facts.json"))).unwrap())
                .unwrap();
        let r = &d["replay"];
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(r["placed"], r["allocations"], "{name}: {r}");
        assert_eq!(r["final_segments_equal"], r["final_segments"], "{name}: {r}");
        assert_eq!(r["peak_reserved"], f["max_memory_reserved"], "{name}");
        assert_eq!(r["peak_allocated"], f["max_memory_allocated"], "{name}");
    }
}
