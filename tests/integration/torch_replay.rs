//! Real PyTorch snapshots (read from `../shared/data/torch-snapshots/`, never copied here)
//! replayed through oomscope's PyTorch caching allocator: the traces that start from an
//! empty allocator end in exactly the snapshot's final state; the mid-run ones place every
//! allocation where PyTorch did.

use crate::common::*;
use oomscope_analysis::pickle::{self, Value};
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

/// The snapshot's final segments of `device`, in the contract's shape, read straight from
/// the pickle.
fn final_state(path: &std::path::Path, device: i128) -> Json {
    let top = pickle::read(&std::fs::read(path).unwrap()).unwrap();
    let int = |v: &Value, k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap();
    let mut segs: Vec<(u64, Json)> = Vec::new();
    for s in top.get("segments").unwrap().items().unwrap() {
        if s.get("device").and_then(|d| d.as_i128()) != Some(device) {
            continue;
        }
        let chunks: Vec<Json> = s
            .get("blocks")
            .unwrap()
            .items()
            .unwrap()
            .iter()
            .map(|b| {
                json!({
                    "address": int(b, "address"),
                    "size": int(b, "size"),
                    "requested": int(b, "requested_size"),
                    "in_use": b.get("state").unwrap().as_str() == Some("active_allocated"),
                })
            })
            .collect();
        let addr = int(&s, "address");
        segs.push((addr, json!({"address": addr, "size": int(&s, "total_size"), "chunks": chunks})));
    }
    segs.sort_by_key(|s| s.0);
    Json::Array(segs.into_iter().map(|s| s.1).collect())
}

/// The replayed dump's regions in the contract's shape.
fn replayed(d: &Json) -> Json {
    let regions = d["regions"].as_array().unwrap();
    Json::Array(
        regions
            .iter()
            .map(|r| {
                let chunks: Vec<Json> = r["chunks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| json!({"address": c["address"], "size": c["size"], "requested": c["requested"], "in_use": c["in_use"]}))
                    .collect();
                json!({"address": r["address"], "size": r["size"], "chunks": chunks})
            })
            .collect(),
    )
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
        let want = final_state(&f, 0);
        assert!(!want.as_array().unwrap().is_empty());
        assert_eq!(replayed(&d), want, "{prefix}: the replay's segments differ from the snapshot's");
        assert_eq!(placements(&o), (allocs, allocs), "{prefix}");
        // Segments carry PyTorch's flags.
        assert!(d["regions"].as_array().unwrap().iter().all(|r| r["stream"].is_u64() && r["pool"].is_string()));
        // The same final state with a device large enough given explicitly.
        let o = oomscope(&["replay", f.to_str().unwrap(), "--gpu", "0", "--format", "json", "--device", "80GiB"]);
        let d: Json = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(replayed(&d), want, "{prefix} with --device");
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
        assert_eq!(replayed(&d), final_state(&f, 0), "{prefix}: final state");
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
