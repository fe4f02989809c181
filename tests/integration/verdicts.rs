//! One constructed trace per verdict class: the verdict names the cause, and the fix is one
//! that is not already on.

use crate::common::*;

/// Replays `events` (JSON Lines) with `args` and returns the dump as JSON.
fn verdict_of(name: &str, events: &[String], args: &[&str]) -> serde_json::Value {
    let dir = temp_dir(name);
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, events.join("\n") + "\n").unwrap();
    let mut all = vec!["replay", trace.to_str().unwrap(), "--format", "json"];
    all.extend_from_slice(args);
    let out = oomscope(&all);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{name}: {}", stderr(&out));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json dump");
    d["verdict"].clone()
}

fn alloc(id: &str, bytes: u64, op: &str, kind: &str) -> String {
    format!("{{\"ev\":\"alloc\",\"id\":\"{id}\",\"bytes\":{bytes},\"op\":\"{op}\",\"kind\":\"{kind}\"}}")
}

const MIB: u64 = 1 << 20;

#[test]
fn a_tensor_larger_than_the_free_device_is_a_single_tensor_verdict() {
    let events = vec![
        alloc("w", 300 * MIB, "model/dense/kernel", "weight"),
        alloc("x", 100 * MIB, "input", "input"),
        format!(
            "{{\"ev\":\"alloc\",\"id\":\"big\",\"bytes\":{},\"op\":\"model/Conv2D\",\"shape\":[4000,64,32,32],\"kind\":\"activation\"}}",
            700 * MIB
        ),
    ];
    let v = verdict_of("single", &events, &["--limit", "1GiB"]);
    assert_eq!(v["kind"], "single_tensor", "{v}");
    assert!(v["headline"].as_str().unwrap().contains("One tensor of 700.00MiB (model/Conv2D, shape [4000,64,32,32])"));
    // 1024 - 400 MiB of weights and inputs leaves 624 MiB: 4000 x 624/700 = 3565 rows.
    assert!(v["fix"].as_str().unwrap().contains("at most 3565 (if its first dimension, 4000, is the batch)"), "{v}");
}

#[test]
fn a_working_set_larger_than_the_device_is_a_true_peak() {
    let mut events = vec![alloc("w", 16 * MIB, "model/kernel", "weight")];
    for i in 0..12 {
        events.push(alloc(&format!("a{i}"), 80 * MIB, &format!("model/layer{i}/Relu"), "activation"));
    }
    let v = verdict_of("peak", &events, &["--limit", "512MiB"]);
    assert_eq!(v["kind"], "peak", "{v}");
    assert!(v["headline"].as_str().unwrap().starts_with("A true peak:"), "{v}");
    assert!(v["headline"].as_str().unwrap().contains("activations take"), "{v}");
    assert_eq!(v["breakdown"][0]["kind"], "activation");
}

#[test]
fn free_bytes_in_pieces_are_fragmentation() {
    let out = oomscope(&["replay", "fixtures/traces/fragmentation.jsonl", "--limit", "64MiB", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = &v["verdict"];
    assert_eq!(v["kind"], "fragmentation");
    assert!(
        v["headline"].as_str().unwrap().contains("32.00MiB is free in the pool, but the largest free block is 4.00MiB")
    );
    assert!(v["evidence"][1].as_str().unwrap().contains("cache/block_01"), "names what splits the free space: {v}");
}

#[test]
fn fragmentation_fix_is_garbage_collection_only_when_it_is_off() {
    // Growth regions 2, 4, 8 MiB; everything freed but a 1 MiB tensor in the 8 MiB region;
    // then 12 MiB cannot be served by any region, and only empty regions returned to the
    // device (garbage collection) would make room.
    let mut events = Vec::new();
    for i in 0..7 {
        events.push(alloc(&format!("t{i}"), 2 * MIB, "cache/block", "activation"));
    }
    events.push(alloc("pin", MIB, "cache/pin", "activation"));
    for i in 0..7 {
        events.push(format!("{{\"ev\":\"free\",\"id\":\"t{i}\"}}"));
    }
    events.push(alloc("big", 12 * MIB, "cache/merge", "activation"));
    let off = verdict_of("gc-off", &events, &["--limit", "16MiB", "--allow-growth"]);
    assert_eq!(off["kind"], "fragmentation", "{off}");
    assert!(off["fix"].as_str().unwrap().contains("TF_ENABLE_GPU_GARBAGE_COLLECTION=true"), "{off}");
    // With garbage collection on, the same trace succeeds: the fix was right.
    let on = verdict_of("gc-on", &events, &["--limit", "16MiB", "--allow-growth", "--gc"]);
    assert_eq!(on["kind"], "fits", "{on}");
    // When it is on but cannot help (live tensors in every region but a small one), it is
    // not suggested again; one preallocated region is.
    let mut events = Vec::new();
    for i in 0..7 {
        events.push(alloc(&format!("t{i}"), 2 * MIB, "cache/block", "activation")); // regions 2, 4, 8 MiB
    }
    events.push(alloc("pin", MIB, "cache/pin", "activation")); // a fourth region, 2 MiB
    for i in [0, 1, 3, 5] {
        events.push(format!("{{\"ev\":\"free\",\"id\":\"t{i}\"}}"));
    }
    events.push(alloc("big", 6 * MIB, "cache/merge", "activation"));
    let on = verdict_of("gc-on-stuck", &events, &["--limit", "16MiB", "--allow-growth", "--gc"]);
    assert_eq!(on["kind"], "fragmentation", "{on}");
    let fix = on["fix"].as_str().unwrap();
    assert!(!fix.contains("GARBAGE_COLLECTION"), "never a fix that is already on: {on}");
    assert!(fix.contains("preallocate one region (allow_growth off)"), "{on}");
}

#[test]
fn a_device_that_refuses_what_the_limit_allows_is_memory_held_elsewhere() {
    // The limit is the whole 1 GiB card, but other processes hold 600 MiB: the device refuses
    // the second region although the limit allows it.
    let events = vec![alloc("a", 300 * MIB, "model/a", "activation"), alloc("b", 300 * MIB, "model/b", "activation")];
    let v =
        verdict_of("others", &events, &["--limit", "1GiB", "--device", "1GiB", "--others", "600MiB", "--allow-growth"]);
    assert_eq!(v["kind"], "others", "{v}");
    assert!(v["headline"].as_str().unwrap().contains("was refused by the device, not by the allocator's limit"), "{v}");
    assert!(v["evidence"][0].as_str().unwrap().contains("other processes hold 600.00MiB"), "{v}");
    assert!(!v["fix"].as_str().unwrap().contains("ALLOW_GROWTH"), "growth is already on: {v}");
}

#[test]
fn live_bytes_rising_across_steps_is_growth_and_names_the_survivor() {
    let out = oomscope(&["replay", "fixtures/traces/steps-growth.jsonl", "--limit", "120MiB", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = &v["verdict"];
    assert_eq!(v["kind"], "growth");
    assert!(v["headline"].as_str().unwrap().contains("grows by 1.00MiB every step until the OOM at step 25"));
    assert!(v["evidence"][1].as_str().unwrap().starts_with("metrics/Mean: 25 tensors from steps 0..24 are still live"));
    assert!(v["fix"].as_str().unwrap().contains("metrics/Mean"));
    // Without an OOM yet, the growth is still reported.
    let early = oomscope(&["replay", "fixtures/traces/steps-growth.jsonl", "--limit", "1GiB", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&early.stdout).unwrap();
    assert_eq!(v["verdict"]["kind"], "growth");
    assert!(
        v["verdict"]["headline"]
            .as_str()
            .unwrap()
            .starts_with("No allocation failed, but live memory grows by 1.00MiB per step")
    );
}

#[test]
fn a_run_without_failure_fits() {
    let out = oomscope(&["replay", "fixtures/traces/tf-reference.jsonl", "--limit", "32GiB", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"]["kind"], "fits");
    assert_eq!(v["verdict"]["fix"], "nothing to change");
}
