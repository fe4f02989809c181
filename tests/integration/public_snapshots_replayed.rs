//! Real PyTorch snapshots (read from `../shared/data/torch-snapshots/`, never copied here)
//! replayed through oomscope's PyTorch caching allocator: the traces that start from an
//! empty allocator end in exactly the snapshot's final state; the mid-run ones place every
//! allocation where PyTorch did.

use crate::common::*;
use serde_json::{Value as Json, json};

fn snapshot(prefix: &str) -> std::path::PathBuf {
    let dir = shared().join("data/torch-snapshots");
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    assert_eq!(found.len(), 1, "{prefix} in {}", dir.display());
    found.pop().unwrap()
}

/// "P of N allocations at PyTorch's address" from the replay's last line.
fn placements(o: &std::process::Output) -> (u64, u64) {
    let err = stderr(o);
    let line = err.lines().find(|l| l.contains("allocations at PyTorch's address")).unwrap_or_else(|| panic!("{err}"));
    let words: Vec<&str> = line.split("; ").nth(1).unwrap().split(' ').collect();
    (words[0].parse().unwrap(), words[2].parse().unwrap())
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn traces_from_an_empty_allocator_end_in_the_snapshots_final_state() {
    for (prefix, allocs) in [("NiuHuangxiaozi", 785), ("YourSaDady", 139), ("a0kuma", 184)] {
        let f = snapshot(prefix);
        let o = oomscope(&["replay", f.to_str().unwrap(), "--gpu", "0", "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{prefix}: {}", stderr(&o));
        let d: Json = serde_json::from_str(&stdout(&o)).unwrap();
        let want = snapshot_final_state(&f, 0);
        assert!(!want.as_array().unwrap().is_empty());
        assert_eq!(dump_regions(&d), want, "{prefix}: the replay's segments differ from the snapshot's");
        assert_eq!(placements(&o), (allocs, allocs), "{prefix}");
        // Segments carry PyTorch's flags.
        assert!(d["regions"].as_array().unwrap().iter().all(|r| r["stream"].is_u64() && r["pool"].is_string()));
        // The same final state with a device large enough given explicitly.
        let o = oomscope(&["replay", f.to_str().unwrap(), "--gpu", "0", "--format", "json", "--device", "80GiB"]);
        let d: Json = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(dump_regions(&d), want, "{prefix} with --device");
    }
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn mid_run_traces_place_every_allocation_where_pytorch_did() {
    for (prefix, allocs) in [("JasperSolt", 1935), ("Maphsge4", 3058), ("MercuryB1", 2912)] {
        let f = snapshot(prefix);
        let o = oomscope(&["replay", f.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{prefix}: {}", stderr(&o));
        assert!(stdout(&o).contains("The trace starts mid-run"), "{}", stdout(&o));
        assert_eq!(placements(&o), (allocs, allocs), "{prefix}");
        let d: Json =
            serde_json::from_str(&stdout(&oomscope(&["replay", f.to_str().unwrap(), "--format", "json"]))).unwrap();
        assert_eq!(dump_regions(&d), snapshot_final_state(&f, 0), "{prefix}: final state");
    }
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn what_if_compares_settings_side_by_side() {
    let f = snapshot("NiuHuangxiaozi");
    let o = oomscope(&["replay", f.to_str().unwrap(), "--set", "expandable_segments:True"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let row = |name: &str| -> Vec<String> {
        let line = out.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{name}: {out}"));
        line.split("  ").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    };
    let (base, exp) = (row("defaults"), row("expandable_segments:True"));
    assert_eq!(base[1], "no");
    // The recorded run's peaks: 442 MiB reserved, 397.01 MiB allocated.
    assert_eq!(&base[2..4], ["442.00 MiB", "397.01 MiB"]);
    assert_eq!(exp[2], "402.00 MiB", "expandable segments map 20 MiB pages as needed");
    // On a device of 420 MiB the recorded settings run out of memory and expandable ones do not.
    let o = oomscope(&["replay", f.to_str().unwrap(), "--set", "expandable_segments:True", "--device", "420MiB"]);
    let out = stdout(&o);
    assert!(out.lines().any(|l| l.trim_start().starts_with("defaults") && l.contains("yes")), "{out}");
    assert!(out.lines().any(|l| l.trim_start().starts_with("expandable") && l.contains(" no ")), "{out}");
    // A setting PyTorch refuses is refused the same way.
    let o = oomscope(&["replay", f.to_str().unwrap(), "--set", "max_split_size_mb:10"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("must be > 20"), "{}", stderr(&o));
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn snapshots_without_a_trace_are_refused_with_what_to_do() {
    let f = snapshot("Charran78");
    let o = oomscope(&["replay", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("_record_memory_history"), "{}", stderr(&o));
    let o = oomscope(&["replay", snapshot("a0kuma").to_str().unwrap(), "--gpu", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// 60 tensors of 7 MiB and 60 of 7.5 MiB kept alive on a 1 GiB device: PyTorch's caching
/// allocator puts two in each 20 MiB segment and runs out with 280.50 MiB reserved but
/// unallocated; expandable segments pack them.
const SEGMENTS: &str = "fixtures/traces/segments.jsonl";
const MIB: u64 = 1 << 20;

#[test]
fn a_fragmentation_verdict_under_the_caching_allocator_quotes_the_replayed_fix() {
    let dir = temp_dir("what-if-verdict");
    let dump = dir.join("segments.dump.json");
    let o = oomscope(&[
        "replay",
        SEGMENTS,
        "--limit",
        "1GiB",
        "--allocator",
        "caching",
        "--format",
        "json",
        "-o",
        dump.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let d: Json = serde_json::from_str(&stdout(&o)).unwrap();
    let v = &d["verdict"];
    assert_eq!(v["kind"], "fragmentation", "{v}");
    assert_eq!(d["oom"]["op"], "model/block_051/gelu");
    let w = &v["what_if"];
    assert_eq!(w["set"], "expandable_segments:True");
    assert_eq!(w["settings"], "");
    assert_eq!(w["capacity"], 1024 * MIB);
    assert_eq!(w["requests"], 120, "the whole trace is replayed");
    assert_eq!(
        w["as_run"],
        json!({"out_of_memory": true, "peak_reserved": 1020 * MIB, "peak_allocated": 1479 * MIB / 2})
    );
    // 870 MiB of tensors in 44 pages of 20 MiB.
    assert_eq!(w["changed"], json!({"out_of_memory": false, "peak_reserved": 880 * MIB, "peak_allocated": 870 * MIB}));
    let fix = v["fix"].as_str().unwrap();
    assert!(fix.starts_with("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: replayed with it, the same 120 requests fit in the 1024.00 MiB"), "{fix}");

    // TensorFlow's BFC allocator packs the same tensors without running out.
    let o = oomscope(&["replay", SEGMENTS, "--limit", "1GiB", "--allocator", "bfc", "--format", "summary"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    // The dump's own history answers when there is no trace: the run's 103 requests.
    let mut d: Json = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    d.as_object_mut().unwrap().remove("verdict");
    let bare = dir.join("bare.dump.json");
    std::fs::write(&bare, d.to_string()).unwrap();
    let o = oomscope(&["report", bare.to_str().unwrap(), "--format", "json"]);
    let r: Json = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(r["verdict"]["what_if"]["requests"], 103, "{}", r["verdict"]);
    assert_eq!(r["verdict"]["what_if"]["changed"]["out_of_memory"], false);

    // Exported as a PyTorch snapshot and replayed: the snapshot's trace answers.
    let pickle = dir.join("segments.pickle");
    let o = oomscope(&["export", dump.to_str().unwrap(), "--format", "torch-snapshot", "-o", pickle.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = oomscope(&["replay", pickle.to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let s: Json = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(s["oom"]["op"], "model/block_051/gelu", "oomscope's own export names its blocks");
    assert_eq!(s["verdict"]["kind"], "fragmentation");
    let w = &s["verdict"]["what_if"];
    assert_eq!((w["requests"].as_u64(), w["capacity"].as_u64()), (Some(103), Some(1024 * MIB)), "{w}");
    assert_eq!(w["as_run"]["out_of_memory"], true);
    assert_eq!(w["changed"]["out_of_memory"], false);
}

#[test]
fn traces_and_workloads_replay_under_other_settings_side_by_side() {
    let o = oomscope(&["replay", SEGMENTS, "--limit", "1GiB", "--set", "expandable_segments:True"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "What if (the same requests, the allocator deciding everything, on a device with 1024.00 MiB for PyTorch):"
        ),
        "{out}"
    );
    let row = |name: &str| -> Vec<String> {
        let line = out.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{name}: {out}"));
        line.split("  ").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    };
    assert_eq!(row("defaults")[1..], ["yes (1)", "1020.00 MiB", "739.50 MiB", "51"]);
    assert_eq!(row("expandable_segments:True")[1..], ["no", "880.00 MiB", "870.00 MiB", "44"]);
    // --conf is the settings in force; --set goes on top.
    let o =
        oomscope(&["replay", SEGMENTS, "--limit", "1GiB", "--conf", "expandable_segments:True", "--format", "summary"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Settings are the caching allocator's: not BFC's, and checked as PyTorch checks them.
    for (args, says) in [
        (vec!["--allocator", "bfc", "--set", "expandable_segments:True"], "drop --allocator bfc"),
        (vec!["--set", "max_split_size_mb:10"], "must be > 20"),
        (vec!["--batch", "4"], "--batch is for a workload"),
    ] {
        let mut all = vec!["replay", SEGMENTS, "--limit", "1GiB"];
        all.extend(args);
        let o = oomscope(&all);
        assert_eq!(o.status.code(), Some(2), "{all:?}");
        assert!(stderr(&o).contains(says), "{all:?}: {}", stderr(&o));
    }
    // A dump is not something to replay: the error names the commands that read it.
    let o = oomscope(&["replay", "fixtures/dumps/unet-b2.dump.json", "--limit", "8GiB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("oomscope report fixtures/dumps/unet-b2.dump.json"), "{}", stderr(&o));
    // A workload replays at its own batch, or at --batch.
    let o = oomscope(&["replay", "unet", "--limit", "8GiB", "--format", "summary"]);
    assert_eq!(o.status.code(), Some(1), "batch 2 of the U-Net does not fit 8 GiB: {}", stdout(&o));
    let o =
        oomscope(&["replay", "fixtures/workloads/unet.json", "--batch", "1", "--limit", "8GiB", "--format", "summary"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o =
        oomscope(&["replay", "unet", "--batch", "1", "--limit", "8GiB", "--allocator", "caching", "--format", "json"]);
    let d: Json = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(d["allocator"]["name"], "pytorch_caching_allocator");
}

/// A snapshot does not record the GPU's size: a replay that fits describes its peak and
/// says the headroom is unknown, rather than measuring "to spare" against the cache's own
/// peak; with `--device` it measures against the card.
#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn a_replay_that_fits_says_what_it_knows_of_the_headroom() {
    let f = snapshot("Maphsge4");
    let o = oomscope(&["replay", f.to_str().unwrap(), "--format", "summary"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("peak 19.37GiB in use; the cache peaked at 20.97GiB (the GPU's size is not known)"), "{out}");
    assert!(out.contains("the headroom is") && out.contains("unknown (give it with --device SIZE)"), "{out}");
    assert!(!out.contains("to spare") && !out.contains("limit 20.97GiB") && !out.contains("0B total"), "{out}");
    assert!(out.contains("peak             19.37GiB in use by 222 allocations"), "{out}");
    assert!(out.contains("Live memory by node at the peak (19.37GiB in 16 nodes)"), "{out}");

    let o = oomscope(&["replay", f.to_str().unwrap(), "--format", "summary", "--device", "24GiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("the peak was 19.37GiB of the 24.00GiB limit, 4.63GiB to spare"), "{out}");
}
