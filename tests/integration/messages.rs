//! Out-of-memory messages as users paste them: the real ones in `fixtures/messages/` (each
//! with its source in that folder's README), read into the figures and the verdict worked
//! out for each in `expected.tsv`; and the command's contract for them.

use crate::common::{oomscope, oomscope_with_stdin, root, stderr, stdout};
use oomscope_format::{Dump, Message};
use oomscope_ingest::import;
use std::path::Path;

/// One row of `expected.tsv`.
#[derive(Debug)]
struct Expected {
    file: String,
    verdict: String,
    request: String,
    total: String,
    free: String,
    allocated: String,
    unallocated: String,
    reserved: String,
    refused_as: String,
}

fn expected() -> Vec<Expected> {
    let text = std::fs::read_to_string(root().join("fixtures/messages/expected.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            let col = |i: usize| c.get(i).copied().unwrap_or("").to_string();
            Expected {
                file: col(0),
                verdict: col(1),
                request: col(2),
                total: col(3),
                free: col(4),
                allocated: col(5),
                unallocated: col(6),
                reserved: col(7),
                refused_as: col(8),
            }
        })
        .collect()
}

/// True when `bytes` prints as `figure` does: the same number of decimals in the same unit
/// (`22.78 GiB`, `6.25 MB`, `0 bytes`). Units are binary whatever their spelling, as every
/// framework's formatter divides by 1024.
fn prints_as(bytes: u64, figure: &str) -> bool {
    let (number, unit) = figure.split_at(figure.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap());
    let scale: f64 = match unit.trim() {
        "bytes" | "B" => 1.0,
        "KiB" | "KB" => 1024.0,
        "MiB" | "MB" => 1048576.0,
        "GiB" | "GB" => 1073741824.0,
        other => panic!("unit {other:?} in {figure:?}"),
    };
    let decimals = number.split('.').nth(1).map_or(0, str::len);
    format!("{:.*}", decimals, bytes as f64 / scale) == number
}

fn check(what: &str, got: Option<u64>, figure: &str, file: &str) -> Result<(), String> {
    match (figure, got) {
        ("-", _) => Ok(()),
        (f, Some(b)) if prints_as(b, f) => Ok(()),
        (f, got) => Err(format!("{file}: {what} should print as {f}, read {got:?}")),
    }
}

fn read(file: &str) -> Result<Dump, String> {
    let path = root().join("fixtures/messages").join(file);
    let bytes = std::fs::read(&path).unwrap();
    let mut d = import::import(Path::new(file), &bytes, None, None).map_err(|e| e.to_string())?;
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    Ok(d)
}

#[test]
fn every_pasted_message_gives_its_figures_and_verdict() {
    let rows = expected();
    assert!(rows.len() >= 60, "the set has {} messages", rows.len());
    let on_disk = std::fs::read_dir(root().join("fixtures/messages")).unwrap().count() - 2;
    assert_eq!(on_disk, rows.len(), "every message file has its row (README.md and expected.tsv aside)");
    let mut failures = Vec::new();
    for e in &rows {
        let file = format!("{}.txt", e.file);
        let d = match (read(&file), e.verdict.as_str()) {
            (Err(msg), "refused") => {
                if !msg.contains("not an out-of-memory error") || !msg.contains(&e.refused_as) {
                    failures.push(format!("{file}: refused as {msg:?}, expected {:?}", e.refused_as));
                }
                continue;
            }
            (Ok(d), "refused") => {
                failures.push(format!("{file}: read ({:?}), should be refused", d.verdict.map(|v| v.kind)));
                continue;
            }
            (Err(msg), _) => {
                failures.push(format!("{file}: {msg}"));
                continue;
            }
            (Ok(d), _) => d,
        };
        let kind = serde_json::to_value(d.verdict.as_ref().unwrap().kind).unwrap();
        let kind = kind.as_str().unwrap();
        if kind != e.verdict {
            failures.push(format!("{file}: verdict {kind}, expected {}", e.verdict));
        }
        let request = d.oom.as_ref().map(|o| o.requested);
        let m: Option<&Message> = d.imported.as_ref().and_then(|i| i.message.as_ref());
        let r = if e.request == "more than 1EB" {
            (request >= Some(1 << 60)).then_some(()).ok_or(format!("{file}: request {request:?}"))
        } else {
            check("the request", request, &e.request, &file)
        };
        let checks = [
            r,
            check("the total", m.and_then(|m| m.total), &e.total, &file),
            check("the free memory", m.and_then(|m| m.free), &e.free, &file),
            check("the allocated memory", m.and_then(|m| m.allocated), &e.allocated, &file),
            check("the cached free memory", m.and_then(Message::unallocated), &e.unallocated, &file),
            check("the reserved memory", m.and_then(|m| m.reserved), &e.reserved, &file),
        ];
        failures.extend(checks.into_iter().filter_map(Result::err));
    }
    assert!(failures.is_empty(), "{} of {} messages differ:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

#[test]
fn a_pasted_message_on_standard_input_is_read_with_the_arithmetic() {
    let msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of \
               31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory \
               in use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch \
               but unallocated. If reserved but unallocated memory is large try setting \
               PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n";
    let o = oomscope_with_stdin(&["import", "-", "--format", "json"], msg.as_bytes().to_vec());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // 22.78 GiB, in bytes: a count that prints back as the message's figure.
    let requested = j["oom"]["requested"].as_u64().unwrap();
    assert!(prints_as(requested, "22.78 GiB"), "{requested}");
    assert_eq!(j["verdict"]["kind"], "peak");
    assert!(stderr(&o).contains("standard input"), "{}", stderr(&o));
    // The arithmetic that rules out the cache, and a fix with figures.
    let evidence: Vec<&str> =
        j["verdict"]["evidence"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(
        evidence.iter().any(|e| e.starts_with("9.08 GiB live + 22.78 GiB requested = 31.86 GiB >")),
        "{evidence:?}"
    );
    assert!(
        evidence.iter().any(|e| e.starts_with(
            "22.78 GiB requested > 12.73 GiB free + 9.35 GiB cached = 22.08 GiB: \
                                               neither freeing the cache nor expandable_segments"
        )),
        "{evidence:?}"
    );
    assert!(j["verdict"]["fix"].as_str().unwrap().starts_with("cut at least 716.80 MiB"), "{}", j["verdict"]["fix"]);

    // For people: the answer first.
    let o = oomscope_with_stdin(&["import", "-"], msg.as_bytes().to_vec());
    let out = stdout(&o);
    assert!(out.starts_with("CUDA out of memory on GPU 0: 22.78 GiB requested\n\nVerdict: true peak\n"), "{out}");
    assert!(out.contains("\nFix: cut at least 716.80 MiB"), "{out}");
}

#[test]
fn a_look_alike_is_refused_with_what_it_is() {
    let dir = crate::common::temp_dir("look-alike");
    let f = dir.join("error.txt");
    std::fs::write(
        &f,
        "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nRuntimeError: CUDA error: \
         device-side assert triggered\n",
    )
    .unwrap();
    let o = oomscope(&["import", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("error.txt:3: not an out-of-memory error of the GPU: this is a device-side assert"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A text with no error at all says what was looked for.
    std::fs::write(&f, "loss 0.31 at step 200\n").unwrap();
    let o = oomscope(&["import", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no out-of-memory error found"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn fixes_fit_the_era_the_message_dates() {
    // 1.10 to 2.0: max_split_size_mb, not expandable_segments (which came in 2.1).
    let d = read("animatediff-312-frag-48g.txt").unwrap();
    let v = d.verdict.unwrap();
    assert!(v.fix.contains("max_split_size_mb:512") && v.fix.contains("no expandable_segments"), "{}", v.fix);
    // 2.2+, in the variable the message names.
    let v = read("keys-values-92-multiproc.txt").unwrap().verdict.unwrap();
    assert!(v.fix.starts_with("PYTORCH_ALLOC_CONF=expandable_segments:True"), "{}", v.fix);
    // Before 1.10: neither setting exists.
    let v = read("gtad-30-no-prefix.txt").unwrap().verdict.unwrap();
    assert!(v.fix.contains("no allocator setting against fragmentation"), "{}", v.fix);
    // Other processes, named by pid.
    let v = read("sana-160-eight-procs.txt").unwrap().verdict.unwrap();
    assert!(v.fix.contains("pids ") && v.fix.contains("CUDA_VISIBLE_DEVICES"), "{}", v.fix);
    // A request many times the device: a shape that is not what the code meant.
    let v = read("keye-11-13535gib.txt").unwrap().verdict.unwrap();
    assert!(v.evidence.iter().any(|e| e.contains("not what the code meant")), "{:?}", v.evidence);
}

#[test]
fn the_call_site_is_read_from_the_traceback() {
    let d = read("legacy-rocm-build-4358-conv2d.txt").unwrap();
    let site = d.imported.unwrap().message.unwrap().site.unwrap();
    assert_eq!(site.call.as_deref(), Some("F.conv2d"), "{site:?}");
    let d = read("generateu-10-linear.txt").unwrap();
    assert!(d.oom.unwrap().op.is_some_and(|op| op.starts_with("F.linear")));
}
