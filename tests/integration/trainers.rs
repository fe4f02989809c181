//! The trainers people use, under `oomscope run` on the CPU (`OOMSCOPE_TORCH_EMULATE=1`, a
//! simulated GPU): Hugging Face's `Trainer`, PEFT's LoRA, PyTorch Lightning, `accelerate
//! launch`, and Keras. Each test reads the dump the run wrote and checks the names and kinds
//! of what it holds against the program itself (its module paths, and where it says them,
//! its own count of bytes).

use crate::common::{oomscope, root, temp_dir, tf_python, torch_python};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script(name: &str) -> String {
    root().join("tests/python/trainers").join(name).to_string_lossy().into_owned()
}

/// `oomscope run --device DEVICE --dump-dir DUMPS [FLAGS] -- CMD...` with PyTorch emulated.
fn run(dumps: &Path, device: &str, flags: &[&str], cmd: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", device, "--dump-dir"])
        .arg(dumps)
        .args(flags)
        .arg("--")
        .args(cmd)
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .env("OMP_NUM_THREADS", "1")
        .env("USE_TF", "0")
        .current_dir(root())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The one dump in `dir`.
fn the_dump(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(the_dump_file(dir)).unwrap()).unwrap()
}

fn the_dump_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".dump.json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// (op, kind, size, requested) of every in-use chunk.
fn live(d: &Value) -> Vec<(String, String, u64, u64)> {
    d["regions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["chunks"].as_array().unwrap())
        .filter(|c| c["in_use"] == true)
        .map(|c| {
            (
                c["op"].as_str().unwrap_or("").to_string(),
                c["kind"].as_str().unwrap_or("unknown").to_string(),
                c["size"].as_u64().unwrap(),
                c["requested"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn bytes_of(live: &[(String, String, u64, u64)], kind: &str) -> u64 {
    live.iter().filter(|c| c.1 == kind).map(|c| c.3).sum()
}

fn within(measured: u64, truth: u64, fraction: f64) -> bool {
    (measured as f64 - truth as f64).abs() <= truth as f64 * fraction
}

/// The layer indices `...transformer.h.N.` in ops of this kind.
fn layers(live: &[(String, String, u64, u64)], kind: &str) -> BTreeSet<u32> {
    live.iter()
        .filter(|c| c.1 == kind)
        .filter_map(|c| {
            let rest = &c.0[c.0.find(".transformer.h.")? + ".transformer.h.".len()..];
            rest.split(['.', '/']).next()?.parse().ok()
        })
        .collect()
}

/// GPT-2's classes that stand for a layer when a path is lost.
const LAYER_CLASSES: [&str; 4] = ["GPT2Block", "GPT2Attention", "GPT2MLP", "Conv1D"];

#[test]
#[cfg_attr(
    oomscope_missing = "trainers",
    ignore = "needs transformers, peft, accelerate and pytorch-lightning: set OOMSCOPE_TEST_PYTHON (.ci/run makes one)"
)]
fn a_hugging_face_trainer_names_every_gpt2_layer_by_its_index() {
    let dir = temp_dir("trainer-gpt2");
    let py = torch_python();
    // Batch 10 on 256 MiB: all four layers' forward fits, the loss does not.
    let o = run(&dir, "sim:256MiB", &[], &[&py, &script("hf_gpt2.py"), "--batch", "10"]);
    assert!(!o.status.success(), "runs out of memory:\n{}", text(&o));
    let d = the_dump(&dir);
    let chunks = live(&d);
    assert_eq!(layers(&chunks, "activation"), BTreeSet::from([0, 1, 2, 3]), "{chunks:?}");
    assert_eq!(layers(&chunks, "weight"), BTreeSet::from([0, 1, 2, 3]), "{chunks:?}");
    for (op, ..) in &chunks {
        assert!(!LAYER_CLASSES.iter().any(|c| op.contains(c)), "a class name stands for a layer: {op}");
    }
    assert!(
        chunks.iter().any(|c| c.0 == "GPT2LMHeadModel.transformer.h.2.mlp.c_fc/weight" && c.1 == "weight"),
        "{chunks:?}"
    );
    // The report ranks them so too.
    let file = the_dump_file(&dir);
    let report = String::from_utf8_lossy(&oomscope(&["report", file.to_str().unwrap()]).stdout).into_owned();
    assert!(report.contains("GPT2LMHeadModel.transformer.h.0.attn.c_attn/addmm"), "{report}");
    assert!(!LAYER_CLASSES.iter().any(|c| report.contains(c)), "{report}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "trainers",
    ignore = "needs transformers, peft, accelerate and pytorch-lightning: set OOMSCOPE_TEST_PYTHON (.ci/run makes one)"
)]
fn gradient_checkpointings_recomputation_is_the_backward_pass_of_its_layer() {
    let dir = temp_dir("trainer-checkpointing");
    let py = torch_python();
    let args = [&py, &script("hf_gpt2.py"), "--checkpointing", "--batch", "32", "--vocab", "500"];
    let o = run(&dir, "sim:192MiB", &[], &args);
    assert!(!o.status.success(), "runs out of memory:\n{}", text(&o));
    let d = the_dump(&dir);
    let oom = &d["oom"];
    // The last layer runs again first in the backward pass, and runs out of memory there.
    let op = oom["op"].as_str().unwrap();
    assert!(op.starts_with("GPT2LMHeadModel.transformer.h.3.") && op.ends_with("/recompute"), "{oom}");
    assert_eq!(oom["kind"], "backward", "{oom}");
    let chunks = live(&d);
    let recomputed: u64 = chunks.iter().filter(|c| c.0.contains("/recompute")).map(|c| c.3).sum();
    assert!(recomputed > 0 && chunks.iter().filter(|c| c.0.contains("/recompute")).all(|c| c.1 == "backward"));
    // What the forward kept: each layer's input only (the checkpoints): the outputs of the
    // layers before the last.
    assert_eq!(layers(&chunks, "activation"), BTreeSet::from([0, 1, 2]), "{chunks:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "trainers",
    ignore = "needs transformers, peft, accelerate and pytorch-lightning: set OOMSCOPE_TEST_PYTHON (.ci/run makes one)"
)]
fn a_peft_lora_run_has_one_naming_scheme_and_optimizer_state_for_the_adapters_only() {
    let dir = temp_dir("trainer-peft");
    let truth_file = dir.join("truth.json");
    let py = torch_python();
    let args = [&py, &script("hf_gpt2.py"), "--peft", "--batch", "2", "--truth", truth_file.to_str().unwrap()];
    let o = run(&dir, "sim:1GiB", &["--dump-at-exit"], &args);
    assert!(o.status.success(), "{}", text(&o));
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(&truth_file).unwrap()).unwrap();
    std::fs::remove_file(&truth_file).unwrap();
    let d = the_dump(&dir);
    let chunks = live(&d);
    // One scheme: the wrapper's path to every module of the model.
    for (op, ..) in chunks.iter().filter(|c| c.0.contains("transformer") || c.0.contains("lm_head")) {
        let model = op.strip_prefix("AdamW.state/").unwrap_or(op);
        assert!(model.starts_with("PeftModel.base_model.model."), "{op}");
    }
    // The frozen layers are weights, with no gradient and no optimizer state.
    assert!(chunks.iter().any(|c| c.0.ends_with(".c_fc.base_layer/weight") && c.1 == "weight"), "{chunks:?}");
    let weights = bytes_of(&chunks, "weight");
    let truth_weights = truth["frozen"].as_u64().unwrap() + truth["trainable"].as_u64().unwrap();
    assert!(within(weights, truth_weights, 0.05), "weights {weights}, truly {truth_weights}");
    let optimizer: Vec<_> = chunks.iter().filter(|c| c.1 == "optimizer").collect();
    assert!(!optimizer.is_empty() && optimizer.iter().all(|c| c.0.contains(".lora_")), "{optimizer:?}");
    let state = bytes_of(&chunks, "optimizer");
    let truth_state = truth["optimizer"].as_u64().unwrap();
    assert!(within(state, truth_state, 0.05), "optimizer state {state}, truly {truth_state}");
    assert!(!chunks.iter().any(|c| c.1 == "gradient" && c.0.contains("base_layer")), "{chunks:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "trainers",
    ignore = "needs transformers, peft, accelerate and pytorch-lightning: set OOMSCOPE_TEST_PYTHON (.ci/run makes one)"
)]
fn a_lightning_cnns_dataset_in_host_memory_is_not_device_memory() {
    let dir = temp_dir("trainer-lightning");
    let py = torch_python();
    let o = run(&dir, "sim:256MiB", &[], &[&py, &script("lightning_cnn.py"), "--batch", "1024"]);
    assert!(!o.status.success(), "runs out of memory:\n{}", text(&o));
    let d = the_dump(&dir);
    let chunks = live(&d);
    // The dataset: 15 000 images of 1×32×32 floats, 61 440 000 bytes; one batch is 1024 of
    // them (4 MiB) and their labels.
    let batch = 1024 * 32 * 32 * 4 + 1024 * 8;
    let inputs = bytes_of(&chunks, "input");
    assert!(inputs >= batch && inputs < 2 * batch, "inputs {inputs}: {chunks:?}");
    assert!(!chunks.iter().any(|c| c.1 == "input" && c.3 >= 61_440_000), "{chunks:?}");
    assert!(chunks.iter().any(|c| c.0 == "Net.features.0/conv2d" && c.1 == "activation"), "{chunks:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "trainers",
    ignore = "needs transformers, peft, accelerate and pytorch-lightning: set OOMSCOPE_TEST_PYTHON (.ci/run makes one)"
)]
fn an_accelerate_launch_of_two_processes_is_a_job_named_by_rank() {
    let dir = temp_dir("trainer-accelerate");
    let py = torch_python();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let launch = [
        &py,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        &port,
        &script("accelerate_mlp.py"),
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:128MiB", "--dump-dir"])
        .arg(&dir)
        .arg("--")
        .args(launch)
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .env("OOMSCOPE_EMULATE_CC", "7.0")
        .env("OMP_NUM_THREADS", "1")
        .current_dir(root())
        .output()
        .unwrap();
    let out = text(&o);
    assert!(!o.status.success(), "rank 1 runs out of memory:\n{out}");
    assert!(out.contains("oomscope: rank 1 ran out of memory first; the state of 2 ranks is in"), "{out}");
    let report = oomscope(&["report", dir.to_str().unwrap(), "--format", "json"]);
    let j: Value = serde_json::from_slice(&report.stdout).unwrap();
    let ranks: Vec<u64> = j["ranks"].as_array().unwrap().iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, vec![0, 1], "{j}");
    assert_eq!(j["verdict"]["kind"], "imbalance", "{j}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn autocasts_copies_of_the_weights_are_weights() {
    let dir = temp_dir("trainer-autocast");
    let py = torch_python();
    let o = run(&dir, "sim:400MiB", &[], &[&py, &script("autocast_mlp.py")]);
    let out = text(&o);
    assert!(out.contains("trained 64") && !out.contains("trained 8192"), "{out}");
    let chunks = live(&the_dump(&dir));
    // Layers 1 to 5 keep their weight's bfloat16 copy for the backward pass (layer 0's input
    // needs no gradient: its copy is gone): 1024 × 1024 × 2 bytes each.
    let copies: Vec<_> = chunks.iter().filter(|c| c.0.ends_with("/weight (bfloat16 copy)")).collect();
    assert_eq!(copies.len(), 5, "{chunks:?}");
    assert!(copies.iter().all(|c| c.1 == "weight" && c.3 == 1024 * 1024 * 2), "{copies:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(
    oomscope_missing = "tensorflow",
    ignore = "needs TensorFlow: set OOMSCOPE_TEST_TF_PYTHON (.ci/run makes one)"
)]
fn a_keras_runs_breakdown_gives_its_weights_and_adams_slots() {
    let dir = temp_dir("trainer-keras");
    let truth_file = dir.join("truth.json");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--dump-dir"])
        .arg(&dir)
        .args(["--", &tf_python()])
        .arg(root().join("tests/tf/keras_kinds.py"))
        .arg(&truth_file)
        .env("TF_CPU_ALLOCATOR_USE_BFC", "true")
        .env("TF_ENABLE_ONEDNN_OPTS", "0")
        .env("TF_CPU_BFC_MEM_LIMIT_IN_MB", "256")
        .env_remove("TF_CPP_MIN_LOG_LEVEL")
        .current_dir(root())
        .output()
        .unwrap();
    let out = text(&o);
    assert!(out.contains("trained at 16") && !out.contains("trained at 512"), "runs out of memory at 512:\n{out}");
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(&truth_file).unwrap()).unwrap();
    std::fs::remove_file(&truth_file).unwrap();
    let d = the_dump(&dir);
    let breakdown = |kind: &str| -> u64 {
        d["verdict"]["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["kind"] == kind)
            .map(|k| k["bytes"].as_u64().unwrap())
            .sum()
    };
    for kind in ["weight", "optimizer"] {
        let (measured, true_bytes) = (breakdown(kind), truth[kind].as_u64().unwrap());
        assert!(
            within(measured, true_bytes, 0.05),
            "{kind}: {measured} in the breakdown, truly {true_bytes}: {}",
            d["verdict"]
        );
    }
    let chunks = live(&d);
    assert!(chunks.iter().any(|c| c.0 == "sequential/dense/kernel" && c.1 == "weight"), "{chunks:?}");
    assert!(chunks.iter().any(|c| c.0.starts_with("adam/") && c.0.ends_with("_velocity") && c.1 == "optimizer"));
    std::fs::remove_dir_all(dir).unwrap();
}
