//! The seed stories as one-command demos, checked against the figures in the seeds' logs
//! (`../shared/seeds/`), and `fit` against a case computed by hand.

use crate::common::*;

#[test]
fn unet_demo_shows_seed_003s_figures_and_the_batch_that_fits() {
    let out = oomscope(&["demo"]);
    assert_eq!(out.status.code(), Some(0), "the demo exits 0: the OOM is the demonstration\n{}", stderr(&out));
    let text = stdout(&out);
    // Seed 003's report: 450.00MiB for the full-resolution 64-channel tensors, 225.00MiB and
    // 112.50MiB for the stride-2 levels (batch 2, 720x1280, float32).
    for line in [
        "  450.00MiB from shared_model/unet_00/Conv2D\n",
        "  450.00MiB from shared_model/unet_01/Conv2D\n",
        "  450.00MiB from shared_model/unet_02/Conv2D\n",
        "  225.00MiB from shared_model/unet_03/Conv2D\n",
        "  225.00MiB from shared_model/unet_04/Conv2D\n",
        "  112.50MiB from shared_model/unet_05/Conv2D\n",
        "  112.50MiB from shared_model/unet_06/Conv2D\n",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
    assert!(
        text.starts_with("Allocator (GPU_0_bfc) ran out of memory trying to allocate 450.00MiB (rounded to 471859200)")
    );
    assert!(text.contains("\nVerdict: true peak\n"), "{text}");
    assert!(text.contains("Fix: train at batch 1"), "{text}");
    assert!(stderr(&out).contains("on a simulated GeForce GTX 1080 with 8.00GiB"), "{}", stderr(&out));

    let b1 = oomscope(&["demo", "unet", "--batch", "1", "--format", "summary"]);
    assert_eq!(b1.status.code(), Some(0));
    assert!(stdout(&b1).starts_with("No allocation failed in GPU_0_bfc: peak 4.4"), "batch 1 fits: {}", stdout(&b1));
    // The summary gives the verdict when it fits too, as the TF text does.
    assert!(stdout(&b1).contains("Verdict: fits") && stdout(&b1).contains("Fix: nothing to change"), "{}", stdout(&b1));
}

/// When nothing fails, the end of the run holds little (the weights and the optimizer's
/// state): the summary and the dump describe the peak, what the headroom is measured against.
/// At an OOM the failure is the moment that matters, and nothing changes.
#[test]
fn a_run_that_fits_is_described_at_its_peak() {
    let out = oomscope(&["demo", "unet", "--batch", "1", "--format", "summary"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "\n  peak             4.46GiB in use by 219 allocations at step 0, reached by \
             gradients/shared_model/unet_10/Relu_grad/ReluGrad\n"
        ),
        "{text}"
    );
    assert!(text.contains("\nLive memory by node at the peak (4.46GiB in 197 nodes):\n"), "{text}");
    // The forward pass's activations, long freed at the end, are what filled the memory.
    assert!(text.contains("   450.00MiB    9.8%       1 x  shared_model/resize_images_1/ResizeBilinear\n"), "{text}");
    assert!(!text.contains("Live memory by node (19.97MiB"), "not the end of the run: {text}");
    assert!(text.contains("  now              19.97MiB in use by 168 allocations (peak 4.46GiB)"), "{text}");

    let json = oomscope(&["demo", "unet", "--batch", "1", "--format", "json"]);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let peak = &d["peak"];
    assert_eq!(peak["bytes_in_use"], d["stats"]["peak_bytes_in_use"]);
    assert_eq!((peak["allocations"].as_u64(), peak["step"].as_i64()), (Some(219), Some(0)));
    let sum = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|n| n["bytes"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum(&peak["usage_by_node"]), 4_794_834_944, "the nodes at the peak add up to it");
    assert_eq!(peak["usage_by_node"][0]["op"], "shared_model/resize_images_1/ResizeBilinear");
    // The event that reached it is in the history, and `usage_by_node` stays the dump's moment.
    let event = d["events"].as_array().unwrap().iter().find(|e| e["seq"] == peak["seq"]).expect("the event");
    assert_eq!((&event["kind"], &event["op"]), (&"alloc".into(), &peak["op"]));
    assert_eq!(sum(&d["usage_by_node"]), d["stats"]["bytes_in_use"].as_u64().unwrap());

    // A replayed trace that fits: the 16 blocks of the peak, not the 9 left at the end.
    let out = oomscope(&["replay", "fixtures/traces/fragmentation.jsonl", "--limit", "11GiB", "--format", "json"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["peak"]["bytes_in_use"], 64 << 20);
    assert_eq!(d["peak"]["op"], "cache/block_15");
    assert_eq!(d["peak"]["usage_by_node"].as_array().unwrap().len(), 16);
    assert_eq!(d["usage_by_node"].as_array().unwrap().len(), 9);

    // At an OOM: the state at the failure, as before, and no peak in the dump.
    let oom = oomscope(&["demo", "unet", "--format", "summary"]);
    assert!(stdout(&oom).contains("\nLive memory by node ("), "{}", stdout(&oom));
    assert!(!stdout(&oom).contains("at the peak") && !stdout(&oom).contains("\n  peak  "), "{}", stdout(&oom));
    let json = oomscope(&["demo", "unet", "--format", "json"]);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(d["oom"].is_object() && d.get("peak").is_none(), "no peak at an OOM");
}

#[test]
fn mnist_eval_demo_requests_seed_001s_tensor_and_says_to_split_the_evaluation() {
    let out = oomscope(&["demo", "mnist-eval"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    // Seed 001: "Ran out of memory trying to allocate 957.03MiB", shape[10000,32,28,28], node Conv2D.
    assert!(text.starts_with(
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 957.03MiB (rounded to 1003520000)requested by op Conv2D\n"
    ));
    assert!(text.contains("Bin for 957.03MiB was 256.00MiB, Chunk State: \n"));
    assert!(text.contains("\nVerdict: one tensor too large\n"), "{text}");
    assert!(text.contains("Fix: split the evaluation into chunks of at most 8042"), "{text}");
    let summary = stdout(&oomscope(&["demo", "mnist-eval", "--format", "summary"]));
    assert!(
        summary.starts_with(
            "OOM in GPU_0_bfc: 957.03MiB (rounded to 1003520000) for Conv2D, shape [10000,32,28,28] float32"
        )
    );
    // The seed's own fix, 10 chunks of 1000, fits.
    let chunk = oomscope(&["demo", "mnist-eval", "--batch", "1000", "--format", "summary"]);
    assert!(stdout(&chunk).starts_with("No allocation failed"), "{}", stdout(&chunk));
}

#[test]
fn preallocate_demo_backs_off_as_seed_000s_log_shows() {
    let out = oomscope(&["demo", "preallocate"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "failed to allocate 11.00G (11811160064 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(lines[1], "failed to allocate 9.90G (10630043648 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY");
    assert!(text.contains("Next region of size 9567039488\n"), "the third size, 8.91G, fits");
    assert!(text.contains("\nVerdict: memory held elsewhere\n"), "{text}");
    assert!(text.contains("cudnn/create_handle asked the device for 256.00MiB outside the allocator's pool"));
    assert!(text.contains("Fix: let the pool grow on demand: TF_FORCE_GPU_ALLOW_GROWTH=true"), "{text}");
    assert!(text.contains("per_process_gpu_memory_fraction=0.80"), "{text}");

    let fixed = oomscope(&["demo", "preallocate", "--allow-growth", "--format", "summary"]);
    assert!(stdout(&fixed).starts_with("No allocation failed"), "the fix works: {}", stdout(&fixed));
    let capped = oomscope(&["demo", "preallocate", "--limit", "8.8GiB", "--format", "summary"]);
    assert!(stdout(&capped).starts_with("No allocation failed"), "so does the cap: {}", stdout(&capped));
}

#[test]
fn a_demo_dump_re_renders_and_its_trace_replays() {
    let dir = temp_dir("demo-dump");
    let dump = dir.join("unet.json");
    let trace = dir.join("unet.jsonl");
    let demo = oomscope(&["demo", "-o", dump.to_str().unwrap(), "--save-trace", trace.to_str().unwrap()]);
    assert_eq!(demo.status.code(), Some(0), "{}", stderr(&demo));
    let report = oomscope(&["report", dump.to_str().unwrap()]);
    assert_eq!(stdout(&report), stdout(&demo), "the dump keeps the verdict and its replayed fix");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert_eq!(json["verdict"]["kind"], "peak");
    assert_eq!(json["workload"]["name"], "unet");
    assert_eq!(json["workload"]["batch"], 2);
    assert_eq!(json["source"]["kind"], "demo");
    // The saved trace is the replay format: replaying it gives the same allocator report.
    let replay = oomscope(&["replay", trace.to_str().unwrap(), "--limit", "8GiB"]);
    assert_eq!(replay.status.code(), Some(1));
    let tf_part = |s: &str| s.split("\nVerdict:").next().unwrap_or("").to_string();
    assert_eq!(tf_part(&stdout(&replay)), tf_part(&stdout(&demo)));
}

#[test]
fn fit_finds_the_largest_batch_of_the_unet_and_the_mnist_chunk() {
    let out = oomscope(&["fit", "unet", "--device", "8GiB"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Largest batch that fits (replayed through the allocator, fragmentation included): 1,"),
        "{text}"
    );
    assert!(text.contains("which predicts 1."), "{text}");
    let eval = stdout(&oomscope(&["fit", "mnist-eval", "--device", "1GiB"]));
    assert!(
        eval.contains(
            "Largest evaluation chunk that fits (replayed through the allocator, fragmentation included): 8042"
        ),
        "{eval}"
    );
    assert!(eval.contains("Split the 10000 samples into 2 chunks of 5000"), "{eval}");
}

#[test]
fn fit_agrees_with_a_hand_computed_case() {
    // Evaluation of one dense layer, 1024 -> 1024 float32, no optimizer: weights are
    // 1024*1024*4 + 1024*4 = 4198400 bytes; each sample adds a 4096-byte input row and a
    // 4096-byte output row (the bias add works in place). Peak = 4198400 + 8192 * batch, every
    // size a multiple of 256, so on an 8 MiB limit the largest batch is
    // floor((8388608 - 4198400) / 8192) = 511.
    let dir = temp_dir("fit-hand");
    let model = dir.join("dense.json");
    std::fs::write(
        &model,
        r#"{"input": [1024], "batch": 1, "mode": "eval", "samples": 4096,
            "layers": [{"op": "dense", "name": "fc", "units": 1024}]}"#,
    )
    .unwrap();
    let out = oomscope(&["fit", model.to_str().unwrap(), "--device", "8MiB", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["largest"]["batch"], 511);
    assert_eq!(f["largest"]["needed"], 4_198_400 + 8192 * 511);
    assert_eq!(f["fixed"].as_f64().unwrap().round(), 4_198_400.0);
    assert_eq!(f["per_sample"].as_f64().unwrap().round(), 8192.0);
    assert_eq!(f["line_prediction"], 511);
    let probes = f["probes"].as_array().unwrap();
    assert!(probes.iter().any(|p| p["batch"] == 512 && p["fits"] == false), "512 is the first that does not fit");
}

#[test]
fn fit_of_a_trace_gives_the_smallest_limit() {
    let out = oomscope(&["fit", "fixtures/traces/fragmentation.jsonl", "--device", "64MiB", "--format", "json"]);
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 16 x 4 MiB live at the peak; the 8 MiB request after every other one is freed needs
    // 8 MiB more in one piece, so the pool must be 72 MiB.
    assert_eq!(f["needed"], 64u64 << 20);
    assert_eq!(f["min_limit"], 72u64 << 20);
    assert_eq!(f["fits"], false);
    assert_eq!(out.status.code(), Some(1), "does not fit: exit 1, as replay's OOM");
    let fits = oomscope(&["fit", "fixtures/traces/fragmentation.jsonl", "--device", "80MiB"]);
    assert_eq!(fits.status.code(), Some(0), "{}", stdout(&fits));
}

#[test]
fn fit_that_finds_nothing_that_fits_exits_1() {
    let out = oomscope(&["fit", "unet", "--device", "512MiB"]);
    assert!(stdout(&out).contains("Nothing fits"), "{}", stdout(&out));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(oomscope(&["fit", "unet", "--device", "8GiB"]).status.code(), Some(0));
}

#[test]
fn bad_model_files_are_refused_with_the_line_and_a_reason() {
    let cases = [
        ("unknown-op.json", ":7: unknown op \"conv3d\""),
        ("shape-mismatch.json", ":8: add: inputs have different shapes, ["),
        ("train-without-loss.json", ":4: a model trained (\"mode\": \"train\") needs a loss layer"),
        ("truncated.json", ":6: not a model description (a JSON object)"),
    ];
    for (file, expected) in cases {
        let path = format!("fixtures/workloads/bad/{file}");
        for args in [vec!["demo", path.as_str()], vec!["fit", path.as_str(), "--device", "1GiB"]] {
            let out = oomscope(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(stderr(&out).contains(&format!("{path}{expected}")), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains("docs/workload-format.md"), "{}", stderr(&out));
            assert!(out.stdout.is_empty());
        }
    }
    let unknown = oomscope(&["demo", "resnet"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("built-in workloads: unet, mnist-eval, preallocate"), "{}", stderr(&unknown));
    let bad_device = oomscope(&["demo", "--device", "titan-z"]);
    assert_eq!(bad_device.status.code(), Some(2));
    assert!(stderr(&bad_device).contains("neither a size (8GiB) nor a known card"), "{}", stderr(&bad_device));
}
