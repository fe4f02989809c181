//! TF logs → dumps → TF text: every historical variant oomscope can print (with every kind of
//! log prefix, Windows addresses, and other output interleaved) reads back to the same
//! figures, and prints back the same; partial logs keep exactly the sections they had; the
//! seeds' own logs import.

use crate::common::*;
use oomscope_format::{self as dump, Dump, PrefixStyle, Section, TfVariant};
use oomscope_ingest::import;
use oomscope_report::tf;
use std::path::Path;

/// A full dump with every section: the fragmentation fixture at its OOM (free and in-use
/// chunks, chunk state, usage), and one with two regions and growth (allow_growth).
fn dumps() -> Vec<Dump> {
    let dir = temp_dir("tf-logs");
    let mut out = Vec::new();
    for (trace, args) in [
        ("fixtures/traces/fragmentation.jsonl", vec!["--limit", "64MiB"]),
        ("fixtures/traces/steps-growth.jsonl", vec!["--limit", "120MiB", "--allow-growth"]),
        ("fixtures/traces/tf-reference.jsonl", vec!["--limit", "18995773440"]),
    ] {
        let path = dir.join("d.json");
        let mut a = vec!["replay", trace, "-o", path.to_str().unwrap()];
        a.extend(args);
        oomscope(&a);
        out.push(dump::read(&path).unwrap());
    }
    out
}

fn import_text(text: &str) -> Dump {
    import::tf_log::parse(Path::new("log.txt"), text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn variants() -> Vec<(String, TfVariant)> {
    let mut v = Vec::new();
    for (name, preset) in TfVariant::PRESETS {
        for prefix in
            [PrefixStyle::None, PrefixStyle::Glog, PrefixStyle::Absl, PrefixStyle::Quoted, PrefixStyle::Native]
        {
            for windows in [false, true] {
                v.push((format!("{name} {prefix:?} windows={windows}"), TfVariant { prefix, windows, ..preset }));
            }
        }
    }
    v
}

#[test]
fn every_variant_round_trips_to_the_same_text_and_figures() {
    for d in dumps() {
        for (name, v) in variants() {
            let text = tf::render_variant(&d, &v);
            let back = import_text(&text);
            let imported = back.imported.as_ref().unwrap();
            let detected = imported.variant.unwrap();
            // Windows shows in %p addresses (before TF 2.4) or in how halfway sizes round; a
            // text with neither reads the same either way.
            let unseen = TfVariant { windows: false, ..v };
            let shows_windows =
                v.chunks != oomscope_format::ChunkStyle::Modern || tf::render_variant(&d, &unseen) != text;
            let expect = TfVariant { windows: v.windows && shows_windows, ..v };
            assert_eq!(detected, expect, "{name}: detected {detected:?}");
            assert_eq!(tf::render(&back), text, "{name}: printed back differently");
            // The figures, not only the text.
            assert_eq!(back.bins.len(), 21, "{name}");
            for (a, b) in d.bins.iter().zip(&back.bins) {
                assert_eq!(
                    (a.total_chunks, a.chunks_in_use),
                    (b.total_chunks, b.chunks_in_use),
                    "{name} bin {}",
                    a.index
                );
                assert_eq!(oomscope_base::size::human(a.bytes), oomscope_base::size::human(b.bytes), "{name}");
            }
            let chunks = |d: &Dump| {
                d.regions
                    .iter()
                    .flat_map(|r| r.chunks.iter().map(|c| (c.address, c.size, c.in_use)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(chunks(&back), chunks(&d), "{name}: chunks");
            // In use and the pool are exact from the chunk and region lines in every variant;
            // the peak only where TF printed bytes (since 2.16 it prints `216.48MiB`).
            assert_eq!(back.stats.bytes_in_use, d.stats.bytes_in_use, "{name}");
            assert_eq!(back.stats.pool_bytes, d.stats.pool_bytes, "{name}");
            if v.stats == oomscope_format::StatsStyle::EightHuman {
                let h = oomscope_base::size::human;
                assert_eq!(h(back.stats.peak_bytes_in_use), h(d.stats.peak_bytes_in_use), "{name}");
            } else {
                assert_eq!(back.stats.peak_bytes_in_use, d.stats.peak_bytes_in_use, "{name}");
            }
            assert_eq!(back.stats.num_allocs, d.stats.num_allocs, "{name}");
            let oom = back.oom.as_ref().unwrap();
            let orig = d.oom.as_ref().unwrap();
            if v.header == oomscope_format::HeaderStyle::Old {
                // TF <= 1.12 printed the request rounded for people only, not the rounded size.
                assert_eq!(
                    oomscope_base::size::human(oom.requested),
                    oomscope_base::size::human(orig.requested),
                    "{name}"
                );
                assert_eq!(oom.rounded, 0, "{name}: not in the log, not invented");
            } else {
                assert_eq!(oom.rounded, orig.rounded, "{name}");
            }
            if matches!(v.header, oomscope_format::HeaderStyle::Modern | oomscope_format::HeaderStyle::Repeated) {
                assert_eq!(oom.op, d.oom.as_ref().unwrap().op, "{name}");
            }
            assert_eq!(
                back.usage_by_node.iter().map(|n| &n.op).collect::<Vec<_>>(),
                d.usage_by_node.iter().map(|n| &n.op).collect::<Vec<_>>()
            );
            assert!(imported.absent.iter().all(|s| *s == Section::Events), "{name}: {:?}", imported.absent);
        }
    }
}

#[test]
fn other_output_between_the_lines_is_ignored() {
    let noise = [
        "Epoch 3/10",
        "1875/1875 [==============================] - 12s 6ms/step - loss: 0.0512 - accuracy: 0.9841",
        "WARNING:tensorflow:From train.py:42: The name tf.Session is deprecated.",
        "100%|██████████| 500/500 [00:12<00:00, 40.12it/s]",
        "Traceback (most recent call last):",
        "",
        "    sess.run(train_op)",
    ];
    for d in dumps() {
        for (name, v) in variants().into_iter().step_by(5) {
            let text = tf::render_variant(&d, &v);
            // Which lines start a log statement: the glog rendering of the same report has a
            // prefix exactly there. Other output can only come between statements (TF writes
            // each multi-line message, and the exception text, at once).
            let starts: Vec<bool> = tf::render_variant(&d, &TfVariant { prefix: PrefixStyle::Glog, ..v })
                .lines()
                .map(|l| l.len() > 2 && l.as_bytes()[1] == b' ' && "IWE".contains(&l[..1]))
                .collect();
            let mut mixed = String::new();
            for (i, line) in text.lines().enumerate() {
                if starts.get(i).copied().unwrap_or(false) && i % 3 == 0 {
                    mixed.push_str(noise[i % noise.len()]);
                    mixed.push('\n');
                }
                mixed.push_str(line);
                mixed.push('\n');
            }
            let back = import_text(&mixed);
            assert_eq!(tf::render(&back), text, "{name}");
        }
    }
}

#[test]
fn a_partial_log_keeps_its_sections_and_only_them() {
    let d = &dumps()[0];
    let text = tf::render_variant(d, &TfVariant::TF_2_12);
    let lines: Vec<&str> = text.lines().collect();
    let keep = |pred: &dyn Fn(&str) -> bool| lines.iter().filter(|l| pred(l)).copied().collect::<Vec<_>>().join("\n");
    // Only the bins.
    let bins = import_text(&keep(&|l| l.starts_with("Bin (")));
    let imp = bins.imported.as_ref().unwrap();
    assert!(!imp.lacks(Section::Bins));
    for s in [Section::Request, Section::Regions, Section::Stats, Section::Usage, Section::Occupancy, Section::Totals] {
        assert!(imp.lacks(s), "{s:?} should be absent");
    }
    let printed = tf::render(&bins);
    assert_eq!(printed.lines().filter(|l| l.starts_with("Bin (")).count(), 21);
    assert!(
        !printed.contains("InUse at") && !printed.contains("Stats:") && !printed.contains("Current usage"),
        "{printed}"
    );
    // Only the chunks and the stats.
    let text2 = keep(&|l| {
        l.contains(" at 7f")
            || l.starts_with("Next region")
            || l.starts_with("Stats:")
            || l.ends_with(char::is_numeric) && l.contains(':')
    });
    let part = import_text(&text2);
    assert!(!part.imported.as_ref().unwrap().lacks(Section::Regions));
    assert!(!part.imported.as_ref().unwrap().lacks(Section::Stats));
    assert!(part.imported.as_ref().unwrap().lacks(Section::Bins));
    let printed = tf::render(&part);
    assert!(!printed.contains("Bin ("), "{printed}");
    assert_eq!(printed.lines().filter(|l| l.contains(" at 7f")).count(), 16);
    // The summary says what is missing.
    let summary = oomscope_report::summary::render(&part);
    assert!(summary.contains("not in it: the failed request, the bins"), "{summary}");
}

#[test]
fn text_without_an_oom_is_refused_saying_what_was_looked_for() {
    let e = import::tf_log::parse(Path::new("notes.txt"), "Epoch 1/10\nloss: 0.3\nall good\n").unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("notes.txt: no out-of-memory error found. Looked for"), "{msg}");
    assert!(msg.contains("\"Current usage from device\""), "{msg}");
    let out = oomscope(&["import", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("Cargo.toml: no out-of-memory error found"), "{}", stderr(&out));
}

#[test]
fn seed_001s_log_imports_with_its_figures() {
    let text = std::fs::read_to_string(root().join("fixtures/logs/seed-001-mnist.txt")).unwrap();
    let d = import_text(&text);
    let oom = d.oom.as_ref().unwrap();
    assert_eq!(oom.requested, 1_003_520_000, "exact: 10000*32*28*28 float32 prints as the log's 957.03MiB");
    assert_eq!(oom.op.as_deref(), Some("Conv2D"));
    assert_eq!(oom.shape.as_deref(), Some(&[10000, 32, 28, 28][..]));
    let imp = d.imported.as_ref().unwrap();
    assert_eq!(imp.variant.unwrap().release(), "tf-1.0");
    assert_eq!(d.bins.len(), 4, "the log shows four bins");
    assert_eq!(d.bins[1].requested, Some(4), "TF 1.0's client-requested-for-chunks figure");
    assert_eq!(d.regions.iter().map(|r| r.chunks.len()).sum::<usize>(), 2);
    // Printed back: the same lines (prefixes aside).
    let strip = |t: &str| -> Vec<String> {
        t.lines()
            .filter_map(|l| {
                ["Bin (", "Bin for", "Chunk at", "Ran out"]
                    .iter()
                    .filter_map(|m| l.find(m))
                    .min()
                    .map(|i| l[i..].trim_end().replace('*', ""))
            })
            .collect()
    };
    assert_eq!(strip(&tf::render(&d)), strip(&text));
    let out = stdout(&oomscope(&["import", "fixtures/logs/seed-001-mnist.txt", "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"]["kind"], "undetermined");
    assert!(
        v["verdict"]["fix"].as_str().unwrap().contains("in chunks of 1000, this tensor is 95.70MiB"),
        "{}",
        v["verdict"]
    );
}

#[test]
fn seed_003s_listing_imports_and_the_layout_copies_are_found() {
    let text = std::fs::read_to_string(root().join("fixtures/logs/seed-003-unet.txt")).unwrap();
    let d = import_text(&text);
    assert_eq!(d.usage_by_node.len(), 17);
    assert_eq!(d.usage_by_node[2].op, "shared_model/unet_00/Conv2D");
    assert_eq!(oomscope_base::size::human(d.usage_by_node[2].bytes), "450.00MiB");
    assert_eq!(d.imported.as_ref().unwrap().usage_remaining.map(|r| r[0]), Some(94));
    let listing = |t: &str| {
        t.lines()
            .filter(|l| l.contains(" from ") || l.contains("Remaining") || l.starts_with("Current usage"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(listing(&tf::render(&d)), listing(&text), "the listing prints back as it was");
    let v = oomscope_report::verdict::words(&oomscope_diagnose::analyze(&d, &mut |s| {
        oomscope_replay::what_if::from_history(&d, s)
    }));
    assert!(v.evidence.iter().any(|e| e.contains("(60%) is held by *-LayoutOptimizer nodes")), "{v:?}");
    assert!(v.fix.contains("channels-first"), "{}", v.fix);
}

#[test]
fn seed_000s_log_gives_the_preallocation_verdict() {
    let out = oomscope(&["import", "fixtures/logs/seed-000-preallocate.txt", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused: Vec<u64> = v["refusals"].as_array().unwrap().iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    assert_eq!(refused, vec![11_811_160_064, 10_630_043_648]);
    assert_eq!(v["device"]["model"], "GeForce GTX 1080 Ti");
    assert_eq!(v["allocator"]["limit"], 11_811_160_064u64, "\"with 11264 MB memory\"");
    assert_eq!(v["verdict"]["kind"], "others");
    assert!(
        v["verdict"]["evidence"][0].as_str().unwrap().contains("the pool took the next size, 8.91G (9567039488 bytes)")
    );
    assert!(v["verdict"]["fix"].as_str().unwrap().contains("per_process_gpu_memory_fraction=0.70"), "{}", v["verdict"]);
}

/// Lines are counted as `wc -l` counts them: a final newline does not start another line.
#[test]
fn lines_are_counted_as_the_file_has_them() {
    let refused = "failed to allocate 1.00G (1073741824 bytes) from device";
    for (text, lines) in [(format!("Epoch 1\n{refused}\n"), 2), (format!("a\n\n{refused}"), 3)] {
        let d = import_text(&text);
        assert_eq!(d.imported.as_ref().unwrap().lines_read, lines, "{text:?}");
    }
    for (log, lines) in [("seed-000-preallocate", 6), ("seed-001-mnist", 19), ("seed-003-unet", 21)] {
        let path = format!("fixtures/logs/{log}.txt");
        let text = std::fs::read_to_string(root().join(&path)).unwrap();
        assert_eq!(text.lines().count(), lines, "{path}");
        let o = oomscope(&["import", &path]);
        assert!(stderr(&o).contains(&format!(" of {lines} lines used)")), "{path}: {}", stderr(&o));
    }
}

/// A log without the allocator's report (seed 000: the driver's refusals and cuDNN's failure)
/// is dated by its other lines: its prefixes' dates (2018) and wording later releases
/// changed (`[[Node: `, `totalMemory:`). A log that says nothing of its era keeps the default.
#[test]
fn a_log_without_the_allocators_report_is_dated_by_its_other_lines() {
    let text = std::fs::read_to_string(root().join("fixtures/logs/seed-000-preallocate.txt")).unwrap();
    let d = import_text(&text);
    assert_eq!(d.imported.as_ref().unwrap().variant.unwrap().release(), "tf-1.3", "TF 1.8, of May 2018");
    let o = oomscope(&["import", "fixtures/logs/seed-000-preallocate.txt"]);
    assert!(stderr(&o).contains("a TensorFlow log of TF 1.3-1.12 (tf-1.3 text, 4 of 6 lines used)"), "{}", stderr(&o));
    let text = std::fs::read_to_string(root().join("fixtures/logs/seed-003-unet.txt")).unwrap();
    assert_eq!(import_text(&text).imported.unwrap().variant.unwrap().release(), "tf-1.3", "[[Node: ");
    let refused = "failed to allocate 1.00G (1073741824 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n";
    let era = |prefix: &str| {
        let d = import_text(&format!("{prefix}{refused}"));
        d.imported.unwrap().variant.unwrap().release()
    };
    assert_eq!(era(""), "tf-2.12", "no clue: the default");
    assert_eq!(era("2025-01-05 09:48:28.754302: E tensorflow/core/x.cc:1] "), "tf-2.12", "not newer than the default");
    assert_eq!(era("2020-09-01 09:48:28.754302: E tensorflow/core/x.cc:1] "), "tf-2.3");
    assert_eq!(era("2016-11-01 09:48:28.754302: E tensorflow/core/x.cc:1] "), "tf-1.0");
    // A log with the allocator's report is dated by it, whatever its prefixes say.
    let modern = "2018-05-18 17:01:53.022692: W tensorflow/core/common_runtime/bfc_allocator.cc:1] Allocator \
                  (GPU_0_bfc) ran out of memory trying to allocate 957.03MiB (rounded to 1003520000)requested by \
                  op Conv2D\n";
    assert_eq!(import_text(modern).imported.unwrap().variant.unwrap().release(), "tf-2.12");
}

/// The list of what the input lacks is said once: by the summary on stdout, or on stderr
/// when the report printed is another.
#[test]
fn what_the_log_lacks_is_said_once() {
    for format in ["summary", "tf", "json"] {
        let o = oomscope(&["import", "fixtures/logs/seed-000-preallocate.txt", "--format", format]);
        assert!(o.status.success(), "{}", stderr(&o));
        let said = |s: &str| s.matches("the occupancy bar").count();
        let (out, err) = (stdout(&o), stderr(&o));
        if format == "json" {
            assert_eq!(said(&err), 1, "{err}");
        } else {
            assert_eq!(said(&out) + said(&err), 1, "--format {format}:\n{out}\n{err}");
        }
    }
}

/// The fix for a partial log says where the allocator's state is in a log of that release:
/// before TF 1.12's "Ran out of memory" line (seed 001), after the later releases' header.
#[test]
fn the_fix_for_a_partial_log_says_where_the_state_is() {
    let fix = |args: &[&str]| {
        let out = stdout(&oomscope(args));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["verdict"]["fix"].as_str().unwrap().to_string()
    };
    let old = fix(&["import", "fixtures/logs/seed-001-mnist.txt", "--format", "json"]);
    assert!(old.contains("state (the \"Bin\", \"Chunk\" and \"Stats\" lines) before \"Ran out of memory\""), "{old}");
    assert!(!old.contains("after"), "{old}");
    let dir = temp_dir("partial-modern");
    let log = dir.join("modern.txt");
    std::fs::write(
        &log,
        "W tensorflow/core/common_runtime/bfc_allocator.cc:1] Allocator (GPU_0_bfc) ran out of memory trying to \
         allocate 957.03MiB (rounded to 1003520000)requested by op Conv2D\n",
    )
    .unwrap();
    let modern = fix(&["import", log.to_str().unwrap(), "--format", "json"]);
    assert!(modern.contains("state after \"ran out of memory\""), "{modern}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A tensor's message a console broke before its shape keeps the shape from the next line;
/// a device's `totalMemory` is read only for the device TensorFlow created its GPU:0 on.
#[test]
fn a_broken_tensor_line_and_another_devices_figures() {
    let d = import_text(
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor wit\n\
         h shape[3,3,512,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
    );
    let o = d.oom.unwrap();
    assert_eq!(o.requested, 3 * 3 * 512 * 1024 * 4);
    let log = "I tensorflow/core/common_runtime/gpu/gpu_device.cc:1411] Found device 1 with properties: \n\
               totalMemory: 12.00GiB freeMemory: 11.51GiB\n\
               I tensorflow/core/common_runtime/gpu/gpu_device.cc:1103] Created TensorFlow device \
               (/job:localhost/replica:0/task:0/device:GPU:0 with 11671 MB memory) -> physical GPU (device: 0, name: \
               GeForce GTX TITAN X, pci bus id: 0000:82:00.0, compute capability: 5.2)\n\
               E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 11.40G (12238104064 bytes) \
               from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n";
    let mut d = import_text(log);
    assert_eq!((d.device.total, d.device.free), (0, 0), "device 1's figures are not GPU:0's");
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    assert_eq!(d.verdict.unwrap().kind, dump::VerdictKind::Undetermined);
    // Device 0's own block is read.
    let mut d = import_text(&log.replace("Found device 1", "Found device 0"));
    assert_eq!(d.device.total, 12 << 30);
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    assert!(d.verdict.is_some());
}
