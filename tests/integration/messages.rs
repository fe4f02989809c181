//! Out-of-memory messages as users paste them: the real ones in `fixtures/messages/` (each
//! with its source in that folder's README), read into the figures and the verdict worked
//! out for each in `expected.tsv`; and the command's contract for them.

use crate::common::{oomscope, oomscope_with_stdin, root, stderr, stdout};
use oomscope_format::{Dump, Message, VerdictKind};
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

/// A text of one of the held-out sets (`fixtures/messages-heldout/`, `fixtures/messages-fresh/`)
/// read as `oomscope import` reads it: the dump and its verdict, or the refusal.
fn read_in(set: &str, file: &str) -> Result<Dump, String> {
    let path = root().join("fixtures").join(set).join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut d = import::import(Path::new(file), &bytes, None, None).map_err(|e| e.to_string())?;
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    Ok(d)
}

/// How a held-out set is read: real OOMs whose verdict names the labelled cause, of how many;
/// look-alikes told apart (refused with what they are), of how many; and the misses.
fn score(set: &str) -> (usize, usize, usize, usize, Vec<String>) {
    let text = std::fs::read_to_string(root().join("fixtures").join(set).join("expected.tsv")).unwrap();
    let (mut real, mut real_ok, mut look, mut look_ok, mut misses) = (0, 0, 0, 0, Vec::new());
    for row in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let c: Vec<&str> = row.split('\t').collect();
        let (file, label) = (format!("{}.txt", c[0]), c[1]);
        let got = match read_in(set, &file) {
            Ok(d) => serde_json::to_value(d.verdict.unwrap().kind).unwrap().as_str().unwrap().to_string(),
            Err(e) if e.contains("not an out-of-memory error") => "refused".to_string(),
            Err(e) => format!("unread ({e})"),
        };
        if label == "refused" {
            look += 1;
        } else {
            real += 1;
        }
        if got == label {
            if label == "refused" { look_ok += 1 } else { real_ok += 1 }
        } else {
            misses.push(format!("{file}: {got}, labelled {label}"));
        }
    }
    (real_ok, real, look_ok, look, misses)
}

/// Texts the rules were not written on (docs/import-export.md gives the figures before and
/// after): the first held-out set named the classes the rules were then fixed for, so it must
/// be read right almost always; the second was collected after those fixes and measures them.
#[test]
fn held_out_texts_are_read_as_labelled() {
    let (ok, n, look_ok, look, misses) = score("messages-heldout");
    assert!(n >= 60 && look >= 15, "the set has {n} OOMs and {look} look-alikes");
    assert!(ok * 100 >= n * 95, "{ok} of {n} verdicts name the cause:\n{}", misses.join("\n"));
    assert_eq!(look_ok, look, "every look-alike is told apart:\n{}", misses.join("\n"));
    let (ok, n, look_ok, look, misses) = score("messages-fresh");
    assert!(n >= 30 && look >= 8, "the set has {n} OOMs and {look} look-alikes");
    assert!(ok * 100 >= n * 90 && look_ok * 10 >= look * 9, "{ok} of {n}, {look_ok} of {look}:\n{}", misses.join("\n"));
    // The later sets, each read first as it came (the first reading is in a comment and in
    // the set's README), then with what it showed fixed: the floors stay. (Set, OOMs and
    // look-alikes it has, at least; OOMs and look-alikes read right, at least.)
    let floors: [(&str, usize, usize, usize, usize); 102] = [
        // Read first after the paste repair.
        ("messages-unseen", 50, 12, 51, 15),
        // First readings: 40 of 46 and 10 of 14; 33 of 44 and 12 of 16; 30 of 37 and 9 of 12;
        // 27 of 35 and 10 of 12; 32 of 37 and 9 of 13; 30 of 33 and 11 of 12; 32 of 42 and 11
        // of 12; 30 of 35 and 10 of 12; the twelfth and thirteenth, two halves of one
        // collection (odd and even thread numbers), 16 of 17 and 12 of 12, 17 of 19 and 7 of 9;
        // the fourteenth and fifteenth likewise, 20 of 22 and 7 of 8, 19 of 21 and 9 of 9; the
        // sixteenth and seventeenth, 18 of 23 and 6 of 8, 18 of 22 and 8 of 8; the eighteenth
        // and nineteenth, 18 of 19 and 8 of 9, 18 of 19 and 7 of 7; the twentieth and
        // twenty-first, 18 of 19 and 7 of 7, 19 of 21 and 7 of 9; the twenty-second to
        // twenty-fifth, four quarters of one collection (thread numbers by their remainder
        // divided by 4), 10 of 13 and 4 of 5, 12 of 13 and 4 of 7, 13 of 14 and 5 of 5, 10 of
        // 13 and 6 of 6; the twenty-sixth to twenty-ninth likewise, 9 of 9 and 3 of 4, 2 of 3 and
        // 1 of 3, 9 of 9 and 2 of 3, 3 of 6 and 4 of 4; the thirtieth to thirty-third (odd
        // thread numbers in the first two, even in the last two), 13 of 13 and 5 of 5, 8 of 9
        // and 3 of 3, 7 of 7 and 4 of 4, 5 of 8 and 3 of 5; the thirty-fourth to thirty-seventh
        // likewise, 8 of 9 and 4 of 4, 6 of 9 and 4 of 6, 10 of 11 and 3 of 4, 6 of 7 and 5 of 6;
        // the thirty-eighth to forty-first likewise, 6 of 6, 6 of 12 and 1 of 1, 6 of 6 and 4 of
        // 5, 5 of 6 and 0 of 1; the forty-second to forty-fifth likewise, 13 of 14 and 4 of 5,
        // 10 of 15 and 3 of 6, 14 of 14 and 5 of 5, 12 of 13 and 5 of 6; the forty-sixth to
        // forty-ninth likewise, 14 of 16 and 4 of 5, 11 of 13 and 5 of 7, 14 of 14 and 6 of 6,
        // 11 of 12 and 6 of 6; the fiftieth to fifty-third likewise, 14 of 14 and 5 of 5, 9 of 11
        // and 4 of 6, 8 of 9 and 5 of 5, 11 of 14 and 6 of 7; the fifty-fourth and fifty-fifth
        // (odd and even thread numbers), 13 of 14 and 4 of 5, 12 of 13 and 4 of 4; the
        // fifty-sixth, 10 of 13 and 3 of 5; the fifty-seventh to fifty-ninth (one collection,
        // a collector for each group of frameworks), 17 of 17 and 6 of 6, 16 of 18 and 7 of 7,
        // 16 of 17 and 5 of 6; the sixtieth to sixty-second likewise, 18 of 18 and 6 of 6, 10 of
        // 14 and 4 of 5, 11 of 14 and 6 of 6 (two of the misses were labels, corrected); the
        // sixty-third to sixty-fifth likewise, 16 of 17 and 6 of 6, 14 of 15 and 5 of 6, 20 of
        // 20 and 5 of 5: 66 of 69 (95.7%); the sixty-sixth to sixty-eighth likewise, 15 of 15
        // and 5 of 5, 16 of 16 and 5 of 6, 13 of 15 and 5 of 6: 59 of 63 (93.7%; one of the
        // misses a label, corrected); the sixty-ninth to seventy-first likewise, 14 of 14 and 4
        // of 5, 12 of 15 and 5 of 5, 14 of 15 and 7 of 7: 56 of 61 (91.8%); the seventy-second to
        // seventy-fourth likewise, 17 of 19 and 5 of 6, 15 of 16 and 5 of 6, 17 of 18 and 6 of 6:
        // 65 of 71 (91.5%); the seventy-fifth to seventy-seventh likewise, 16 of 16 and 6 of 6,
        // 15 of 17 and 7 of 7, 14 of 16 and 6 of 6: 64 of 68 (94.1%; one of the misses a label,
        // corrected); the seventy-eighth to eightieth likewise, 15 of 15 and 7 of 7, 14 of 16 and
        // 7 of 7, 17 of 18 and 7 of 7: 67 of 70 (95.7%); the eighty-first to eighty-third
        // likewise, 20 of 20 and 7 of 7, 13 of 17 and 6 of 7, 19 of 19 and 6 of 6: 71 of 76
        // (93.4%; one of the misses a label, corrected); the eighty-fourth to eighty-sixth
        // likewise, 17 of 17 and 7 of 7, 15 of 16 and 5 of 6, 18 of 20 and 4 of 8: 66 of 74
        // (89.2%); the eighty-seventh to eighty-ninth likewise, 15 of 16 and 6 of 7, 14 of 16 and
        // 5 of 8, 14 of 18 and 7 of 7: 61 of 72 (84.7%); the ninetieth to ninety-second likewise,
        // 15 of 16 and 7 of 7, 14 of 16 and 5 of 8, 16 of 17 and 7 of 7: 64 of 71 (90.1%; two
        // of the misses labels, corrected); the ninety-third to ninety-fifth likewise, 14 of 16
        // and 6 of 6, 16 of 16 and 6 of 6, 15 of 16 and 5 of 7: 62 of 67 (92.5%); the
        // ninety-sixth to ninety-eighth likewise, 17 of 17 and 6 of 6, 15 of 15 and 7 of 8, 17 of
        // 18 and 5 of 6: 67 of 70 (95.7%); the ninety-ninth to hundred-and-first likewise, 18
        // of 18 and 6 of 6, 14 of 16 and 5 of 6, 19 of 19 and 5 of 7: 67 of 72 (93.1%); the
        // hundred-and-second to hundred-and-fourth likewise, 16 of 16 and 8 of 8, 13 of 15 and 6
        // of 7, 16 of 17 and 6 of 7: 65 of 70 (92.9%; one of the misses a label, corrected).
        ("messages-fourth", 45, 14, 44, 14),
        ("messages-fifth", 44, 16, 42, 16),
        ("messages-sixth", 37, 12, 35, 12),
        ("messages-seventh", 35, 12, 33, 12),
        ("messages-eighth", 37, 13, 37, 12),
        ("messages-ninth", 33, 12, 32, 12),
        ("messages-tenth", 42, 12, 36, 11),
        ("messages-eleventh", 35, 12, 33, 11),
        ("messages-twelfth", 17, 12, 17, 12),
        ("messages-thirteenth", 19, 9, 19, 9),
        ("messages-fourteenth", 22, 8, 22, 8),
        ("messages-fifteenth", 21, 9, 20, 9),
        ("messages-sixteenth", 23, 8, 23, 8),
        ("messages-seventeenth", 22, 8, 19, 8),
        ("messages-eighteenth", 19, 9, 18, 9),
        ("messages-nineteenth", 19, 7, 18, 7),
        ("messages-twentieth", 19, 7, 19, 7),
        ("messages-twenty-first", 21, 9, 21, 9),
        ("messages-twenty-second", 13, 5, 11, 5),
        ("messages-twenty-third", 13, 7, 13, 7),
        ("messages-twenty-fourth", 14, 5, 13, 5),
        ("messages-twenty-fifth", 13, 6, 13, 6),
        ("messages-twenty-sixth", 9, 4, 9, 4),
        ("messages-twenty-seventh", 3, 3, 3, 2),
        ("messages-twenty-eighth", 9, 3, 9, 3),
        ("messages-twenty-ninth", 6, 4, 6, 4),
        ("messages-thirtieth", 13, 5, 13, 5),
        ("messages-thirty-first", 9, 3, 9, 3),
        ("messages-thirty-second", 7, 4, 7, 4),
        ("messages-thirty-third", 8, 5, 8, 5),
        ("messages-thirty-fourth", 9, 4, 9, 4),
        ("messages-thirty-fifth", 9, 6, 9, 6),
        ("messages-thirty-sixth", 11, 4, 11, 4),
        ("messages-thirty-seventh", 7, 6, 7, 6),
        ("messages-thirty-eighth", 6, 0, 6, 0),
        ("messages-thirty-ninth", 12, 1, 9, 1),
        ("messages-fortieth", 6, 5, 6, 5),
        ("messages-forty-first", 6, 1, 6, 1),
        ("messages-forty-second", 14, 5, 14, 5),
        ("messages-forty-third", 15, 6, 15, 6),
        ("messages-forty-fourth", 14, 5, 14, 5),
        ("messages-forty-fifth", 13, 6, 13, 6),
        ("messages-forty-sixth", 16, 5, 15, 5),
        ("messages-forty-seventh", 13, 7, 13, 7),
        ("messages-forty-eighth", 15, 5, 15, 5),
        ("messages-forty-ninth", 12, 6, 12, 6),
        ("messages-fiftieth", 14, 5, 14, 5),
        ("messages-fifty-first", 11, 6, 11, 6),
        ("messages-fifty-second", 9, 5, 9, 5),
        ("messages-fifty-third", 14, 7, 14, 7),
        ("messages-fifty-fourth", 14, 5, 14, 5),
        ("messages-fifty-fifth", 13, 4, 13, 4),
        ("messages-fifty-sixth", 13, 5, 12, 5),
        ("messages-fifty-seventh", 17, 6, 17, 6),
        ("messages-fifty-eighth", 18, 7, 18, 7),
        ("messages-fifty-ninth", 17, 6, 17, 6),
        ("messages-sixtieth", 18, 6, 18, 6),
        ("messages-sixty-first", 15, 4, 15, 4),
        ("messages-sixty-second", 14, 6, 14, 6),
        ("messages-sixty-third", 17, 6, 17, 6),
        ("messages-sixty-fourth", 15, 6, 15, 6),
        ("messages-sixty-fifth", 20, 5, 20, 5),
        ("messages-sixty-sixth", 15, 5, 15, 5),
        ("messages-sixty-seventh", 16, 6, 16, 6),
        ("messages-sixty-eighth", 15, 6, 15, 6),
        ("messages-sixty-ninth", 14, 5, 14, 5),
        ("messages-seventieth", 15, 5, 15, 5),
        ("messages-seventy-first", 15, 7, 15, 7),
        ("messages-seventy-second", 19, 6, 19, 6),
        ("messages-seventy-third", 16, 6, 16, 6),
        ("messages-seventy-fourth", 18, 6, 18, 6),
        ("messages-seventy-fifth", 16, 6, 16, 6),
        ("messages-seventy-sixth", 17, 7, 17, 7),
        ("messages-seventy-seventh", 16, 6, 16, 6),
        ("messages-seventy-eighth", 15, 7, 15, 7),
        ("messages-seventy-ninth", 16, 7, 16, 7),
        ("messages-eightieth", 18, 7, 18, 7),
        ("messages-eighty-first", 20, 7, 20, 7),
        ("messages-eighty-second", 17, 7, 17, 7),
        ("messages-eighty-third", 19, 6, 19, 6),
        ("messages-eighty-fourth", 17, 7, 17, 7),
        ("messages-eighty-fifth", 16, 6, 16, 6),
        ("messages-eighty-sixth", 20, 8, 20, 8),
        ("messages-eighty-seventh", 16, 7, 16, 7),
        ("messages-eighty-eighth", 16, 8, 16, 8),
        ("messages-eighty-ninth", 18, 7, 18, 7),
        ("messages-ninetieth", 16, 7, 16, 7),
        ("messages-ninety-first", 16, 8, 16, 8),
        ("messages-ninety-second", 16, 8, 16, 8),
        ("messages-ninety-third", 16, 6, 16, 6),
        ("messages-ninety-fourth", 16, 6, 16, 6),
        ("messages-ninety-fifth", 16, 7, 16, 7),
        ("messages-ninety-sixth", 17, 6, 17, 6),
        ("messages-ninety-seventh", 15, 8, 15, 8),
        ("messages-ninety-eighth", 18, 6, 18, 6),
        ("messages-ninety-ninth", 18, 6, 18, 6),
        ("messages-hundredth", 16, 6, 16, 6),
        ("messages-hundred-and-first", 19, 7, 19, 7),
        ("messages-hundred-and-second", 16, 8, 16, 8),
        ("messages-hundred-and-third", 15, 7, 15, 7),
        ("messages-hundred-and-fourth", 17, 7, 17, 7),
    ];
    for (set, has_n, has_look, at_least, looks_at_least) in floors {
        let (ok, n, look_ok, look, misses) = score(set);
        assert!(n >= has_n && look >= has_look, "{set} has {n} OOMs and {look} look-alikes");
        assert!(
            ok >= at_least && look_ok >= looks_at_least,
            "{set}: {ok} of {n}, {look_ok} of {look}:\n{}",
            misses.join("\n")
        );
    }
}

/// PyTorch's message cut before its cache's figure: what the cache held free is not known, so
/// neither fragmentation nor a peak, unless the live tensors and the request pass the device.
#[test]
fn a_message_cut_before_its_cache_figure_decides_only_past_the_device() {
    let read = |allocated: &str| {
        let text = format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 28.00 MiB. GPU 1 has a total capacity of \
             8.00 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has 8.00 GiB memory in use. \
             Of the allocated memory {allocated} is alloca"
        );
        let mut d = import::import(Path::new("cut.txt"), text.as_bytes(), None, None).unwrap();
        oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
        d.verdict.unwrap().kind
    };
    assert_eq!(read("6.93 GiB"), VerdictKind::Undetermined);
    assert_eq!(read("7.99 GiB"), VerdictKind::Peak);
}

/// Each class of text the rules once got wrong, with the figures that decide it.
#[test]
fn each_class_the_rules_once_missed_is_read_by_its_arithmetic() {
    let verdict = |set: &str, file: &str| read_in(set, file).unwrap().verdict.unwrap();
    // Each file of `set` refused as a look-alike, in words that say what it is.
    let refused_as = |set: &str, cases: &[(&str, &str)]| {
        for (file, what) in cases {
            let e = read_in(set, file).unwrap_err();
            assert!(e.contains("not an out-of-memory error of the GPU") && e.contains(what), "{file}: {e}");
        }
    };
    let kinds = |set: &str, cases: &[(&str, VerdictKind)]| {
        for (file, kind) in cases {
            assert_eq!(verdict(set, file).kind, *kind, "{set}/{file}");
        }
    };
    // TensorFlow's `Stats:` in the integer form: in use at the limit is a peak; almost nothing
    // in use, a request beyond the limit; the block pasted alone, without its `Stats:` line.
    let v = verdict("messages-heldout", "tf-3304-2016-stats-limit-480mib.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    assert!(v.evidence[0].contains("479.76MiB in use of the 479.96MiB limit"), "{:?}", v.evidence);
    let v = verdict("messages-heldout", "tf-59389-tsl-stats-inuse-1792-fuzz.txt");
    assert_eq!(v.kind, VerdictKind::SingleTensor, "{v:?}");
    assert_eq!(verdict("messages-heldout", "adaptive-style-transfer-28-bare-stats-hint.txt").kind, VerdictKind::Peak);
    // ... also in markdown bold or a quote.
    let dir = crate::common::temp_dir("stats-markdown");
    let pasted = dir.join("log.txt");
    std::fs::write(
        &pasted,
        "> **Limit:        3157432729**\n> **InUse:              9984**\n> **MaxInUse:          10752**\n\
         Hint: If you want to see a list of allocated tensors when OOM happens, add \
         report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n",
    )
    .unwrap();
    let o = oomscope(&["import", pasted.to_str().unwrap(), "--format", "json"]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)));
    assert_eq!(d["verdict"]["kind"], "single_tensor", "{}", d["verdict"]);
    assert_eq!(d["allocator"]["limit"], 3157432729u64);
    std::fs::remove_dir_all(dir).unwrap();
    // A tensor's shape without a byte figure or a type: its size in float, said to be assumed.
    let d = read("neural-style-tf-28-2017-see-above.txt").unwrap();
    let o = d.oom.as_ref().unwrap();
    assert_eq!((o.requested, o.size_assumed), (64 * 512 * 482 * 4, true));
    assert!(oomscope_report::summary::request_line(o).starts_with("60.25MiB (its shape in float"));
    // A request larger than the device, whatever else the message says (Windows lends shared
    // memory: 17.20 GiB allocated on an 8.00 GiB card).
    let v = read("ipassr-9-alloc-exceeds-total.txt").unwrap().verdict.unwrap();
    assert_eq!(v.kind, VerdictKind::SingleTensor, "{v:?}");
    assert!(v.evidence[0].contains("the device's 8.00 GiB; the process held more through shared"), "{:?}", v.evidence);
    // A request no GPU has, with no total; XLA's arguments beyond its base limit.
    let v = verdict("messages-heldout", "ik-llama-cpp-749-280gb-compute-buffer.txt");
    assert_eq!(v.kind, VerdictKind::SingleTensor);
    assert!(v.headline.contains("more than any GPU has"), "{}", v.headline);
    assert_eq!(verdict("messages-heldout", "jax-27354-base-limit-1tib.txt").kind, VerdictKind::SingleTensor);
    // Forms not read before: a TPU's `bytes allocatable, bytes available` (fragmentation when
    // the request is at most what is available), XLA compiling a program no device holds, its
    // arguments alone more than the device.
    let v = verdict("messages-heldout", "jax-14304-colab-tpu-could-not-allocate-hbm0.txt");
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    assert_eq!(
        verdict("messages-heldout", "jax-7822-tpu-aborting-compilation-exabytes.txt").kind,
        VerdictKind::SingleTensor
    );
    // ... but a program a little beyond the largest device is a batch too large (a peak).
    let text = "W hlo_rematerialization.cc:3282] Can't reduce memory use below 193.77GiB (208055883007 bytes) by \
                rematerialization; only reduced to 350.36GiB (376197049916 bytes), down from 350.79GiB originally";
    let mut d = import::import(Path::new("remat.txt"), text.as_bytes(), None, None).unwrap();
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    assert_eq!(d.verdict.unwrap().kind, VerdictKind::Peak);
    let v = read("easydel-142-tpu-gemma.txt").unwrap().verdict.unwrap();
    assert!(v.kind == VerdictKind::SingleTensor && v.headline.starts_with("The arguments alone (15.90G)"), "{v:?}");
    // XLA's cudaMallocAsync allocator, in the words of its log line.
    let dir = crate::common::temp_dir("xla-async");
    let log = dir.join("log.txt");
    std::fs::write(
        &log,
        "2024-05-01 10:00:00.000000: E external/xla/xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc:359] \
         gpu_async_0 cuMemAllocAsync failed to allocate 2147483648 bytes: CUDA error: out of memory \
         (CUDA_ERROR_OUT_OF_MEMORY)\n Reported by CUDA: Free memory/Total memory: 1073741824/25769803776\n\
         2024-05-01 10:00:00.000001: E external/xla/xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc:364] \
         Stats: Limit:                     24696061952\nInUse:                     19327352832\n",
    )
    .unwrap();
    let o = oomscope(&["import", log.to_str().unwrap(), "--format", "json"]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)));
    let m = &d["imported"]["message"];
    assert_eq!(
        (m["format"].as_str(), m["free"].as_u64(), m["total"].as_u64()),
        (Some("xla_async"), Some(1 << 30), Some(24 << 30))
    );
    assert_eq!(d["oom"]["requested"], 2u64 << 30);
    // 24 GiB - 1 GiB free - 18 GiB in use leaves 5 GiB the pool keeps (or others hold).
    assert_eq!(d["verdict"]["kind"], "fragmentation", "{}", d["verdict"]);
    assert!(d["verdict"]["fix"].as_str().unwrap().contains("XLA's own allocator"), "{}", d["verdict"]);
    std::fs::remove_dir_all(dir).unwrap();
    // Memory outside the cache within what a process's own context and libraries take is not
    // taken for other processes' (1.54 GiB outside on a 2 GiB card, none listed) ...
    let v = read("ai-voice-cloning-62-to-device.txt").unwrap().verdict.unwrap();
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    assert!(v.evidence.iter().any(|e| e.contains("other processes may hold some")), "{:?}", v.evidence);
    // ... nor when the message gives this process's own total ...
    assert_eq!(verdict("messages-heldout", "vllm-14452-vllmworker-rank-interleaved.txt").kind, VerdictKind::Peak);
    // ... nor when that total is a container's 0 bytes.
    assert_eq!(verdict("messages-heldout", "aria-24-vllm-worker-zero-process.txt").kind, VerdictKind::Fragmentation);
    // Look-alikes that deserve an answer: the Linux OOM killer, pinned host memory (TF's
    // `cuda_host_bfc` included), TF's "not a failure" warning, PyTorch's warning alone.
    refused_as(
        "messages-heldout",
        &[
            ("cppo-6-torchrun-exitcode-9.txt", "SIGKILL, usually by the Linux OOM killer"),
            ("fastmaskrcnn-172-bold-killed.txt", "Linux OOM killer"),
            ("tf-11915-cuda-host-bfc-64gib.txt", "pinned host memory allocator (cuda_host_bfc)"),
            ("ollama-8964-ggml-pinned-host-fallback.txt", "pinned host memory"),
            ("tensorpack-1303-bfc-not-a-failure-quoted.txt", "so it is not an error"),
            ("pytorch-193195-oom-warning-rank1.txt", "PyTorch then frees its cache and tries again"),
            ("pytorch-xla-9524-vmem-bad-statusor.txt", "on-chip vector memory (vmem)"),
        ],
    );
    // What the fourth set showed: the old form with another accelerator's name (Ascend's
    // `(NPU 3; ...)`), and without a free figure (Intel's XPU): a peak when the live tensors
    // and the request pass the device's total, the free memory said to be at most what the
    // cache left.
    let v = verdict("messages-fourth", "touchnet-100-npu-current-active-fenced.txt");
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    assert!(v.headline.contains("NPU 3"), "{v:?}");
    let v = verdict("messages-fourth", "comfyui-8767-xpu-old-form-title.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    assert!(v.evidence[0].contains("1.21 GiB free at most"), "{:?}", v.evidence);
    // What the third set's misses were: THC's `error=2 : out of memory` glued to a progress
    // bar, PyTorch's old form with its head cut off, vLLM's check in tokens.
    assert_eq!(verdict("messages-unseen", "fairseq-103-thc-glued-to-tqdm.txt").kind, VerdictKind::Undetermined);
    let v = verdict("messages-unseen", "fbk-fairseq-st-8-head-cut-cached.txt");
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    let v = verdict("messages-unseen", "qwen-295-vllm-kv-cache-7344-raise.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    assert!(v.fix.starts_with("lower max_model_len to 7344 or less"), "{}", v.fix);
    // TF's `Stats:` with more free than the request (and a bar with free cells): the free
    // memory is in pieces.
    for file in ["tensorflow-4735-bold-stats-block-2016.txt", "cardwing-lane-detection-66-small-limit-frag.txt"] {
        let v = verdict("messages-unseen", file);
        assert_eq!(v.kind, VerdictKind::Fragmentation, "{file}: {v:?}");
    }
    // Host memory in other words: TF's plain CPU allocator, ggml's CPU buffer, Paddle's
    // ENOMEM.
    refused_as(
        "messages-unseen",
        &[
            ("darkflow-873-tf-cpu-allocator-oom.txt", "TensorFlow's CPU allocator"),
            ("ollama-12634-llamacpp-cpu-buffer-alloc-panic.txt", "host memory"),
            ("paddleocr-2199-cpu-fail-to-alloc-code-12.txt", "ENOMEM"),
        ],
    );
    // What the fifth set showed: a message cut inside its last figure (`6.83 GiB rese`,
    // `289.29 M`), TensorRT 7's request, TensorRT skipping a tactic (not a failure), SIGKILL's
    // exit code, `Killed` glued to a progress bar, a look-alike broken mid-word.
    let v = verdict("messages-fifth", "whisper-real-time-8-load-model-cut-rese.txt");
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    let v = verdict("messages-fifth", "lang-sam-93-backticked-cut-unallocated.txt");
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    // Accelerator runtimes' own allocators: MindSpore's used + request past its total (a
    // peak; a request past the total alone, one tensor too large), Tenstorrent's buffer over
    // banks larger than a bank, Sophon's failure without figures.
    for (file, kind) in [
        ("mindact-1761-npu-totalusedmem-plus-alloc.txt", VerdictKind::Peak),
        ("mindone-820-npu-alloc-100gb-over-61gb.txt", VerdictKind::SingleTensor),
        ("tt-xla-3050-l1-buffer-banks.txt", VerdictKind::SingleTensor),
        ("sophon-stream-58-bm-alloc-gmem-bm1684.txt", VerdictKind::Undetermined),
    ] {
        assert_eq!(verdict("messages-fifth", file).kind, kind, "{file}");
    }
    let d = read_in("messages-fifth", "torch2trt-661-jetson-nano-gettactic-oom.txt").unwrap();
    assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(150_994_944));
    refused_as(
        "messages-fifth",
        &[
            ("voltaml-15-trt-resizephysical-tactic-skipped.txt", "TensorRT's builder skipping a tactic"),
            ("facenet-236-pycharm-exit-code-137.txt", "exit code 137"),
            ("landmark-65-progress-bar-glued-killed.txt", "Linux OOM killer"),
            ("molmoact-10-flattened-illeg-al-wrap.txt", "illegal memory access"),
        ],
    );
    // What the sixth set showed: a message glued to a code fence's backticks, an old-form
    // message printed in MiB (its rounding a hundredth of a MiB: 182 MiB against 196.87 MiB
    // free and cached is the cache in pieces), Vulkan's and DirectML's out-of-memory errors
    // with their requests, and three look-alikes.
    for (file, kind, request) in [
        ("pose2seg-32-triple-backtick-malloc-at.txt", VerdictKind::Fragmentation, Some(134_217_728)),
        ("bbavectors-48-cached-double-quoted-thin.txt", VerdictKind::Fragmentation, Some(190_840_832)),
        ("comfyui-3869-directml-bare-58982400-bytes.txt", VerdictKind::Undetermined, Some(58_982_400)),
        ("llama-cpp-15256-ggml-vulkan-double-free.txt", VerdictKind::Undetermined, Some(118_497_280)),
        ("vulkano-172-teapot-oomerror-windows-prompt.txt", VerdictKind::Undetermined, None),
    ] {
        let d = read_in("messages-sixth", file).unwrap();
        assert_eq!(d.verdict.as_ref().unwrap().kind, kind, "{file}");
        assert_eq!(d.oom.as_ref().map(|o| o.requested).filter(|&r| r > 0), request, "{file}");
    }
    refused_as(
        "messages-sixth",
        &[
            ("cuda-jl-2197-retry-warning-progress-glued.txt", "CUDA.jl's warning"),
            ("megatron-878-dataloader-bus-error-atexit.txt", "out of shared memory"),
            ("recognize-30-tfjs-wasm-max-memory-escaped.txt", "WebAssembly heap"),
        ],
    );
    // What the seventh set showed: CuPy's pool, a C++ exception's `error: out of memory`
    // under a CUDA file, the driver API's result 2, a message wrapped mid-word once, figures
    // beyond any device, TF's first regions sized from a device's wrong report.
    for (file, kind, request) in [
        ("cupy-2537-chainer7-allocated-so-far-cut.txt", VerdictKind::Undetermined, Some(25_600_000)),
        ("picongpu-3064-mallocmc-v100-what-out-of-memory.txt", VerdictKind::Undetermined, None),
        ("torch-memory-saver-4-curesult-2-cu-mem-create.txt", VerdictKind::Undetermined, None),
        ("mhformer-27-wrapped-fre-e-2gib-card.txt", VerdictKind::Fragmentation, Some(20 << 20)),
        ("paddleocr-6197-128tb-allocated-predictor.txt", VerdictKind::Undetermined, Some(2304)),
        ("keras-13889-tf-rocm-128tib-halving-retries-cut.txt", VerdictKind::SingleTensor, None),
    ] {
        let d = read_in("messages-seventh", file).unwrap();
        let v = d.verdict.as_ref().unwrap();
        assert_eq!(v.kind, kind, "{file}: {v:?}");
        if let Some(r) = request {
            assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(r), "{file}");
        }
    }
    let v = verdict("messages-seventh", "keras-13889-tf-rocm-128tib-halving-retries-cut.txt");
    assert!(v.headline.contains("the memory the device reports"), "{}", v.headline);
    refused_as(
        "messages-seventh",
        &[
            ("alpr-unconstrained-128-freed-by-count-not-a-failure.txt", "allowed to fail"),
            ("nccl-tests-5-all-reduce-perf-unhandled-cuda-error.txt", "NCCL"),
        ],
    );
    // What the eighth set showed: XLA asking for more than four times any GPU, R torch's
    // `Pytorch`, TF's one refusal with nothing else, CuPy 5's and Triton server's words, and
    // three look-alikes.
    for (file, kind) in [
        ("jax-5733-outer-product-4tib-replica.txt", VerdictKind::SingleTensor),
        ("mlverse-torch-1222-r-lantern-double-quoted.txt", VerdictKind::Fragmentation),
        ("pixor-31-title-tf-failed-to-allocate-17.79g.txt", VerdictKind::Undetermined),
        ("spacenet-building-detection-3-chainer-cupy5-163840000.txt", VerdictKind::Undetermined),
        ("triton-server-1138-perf-client-4004-bytes-cuda-shm.txt", VerdictKind::Undetermined),
    ] {
        assert_eq!(verdict("messages-eighth", file).kind, kind, "{file}");
    }
    let d = read_in("messages-eighth", "triton-server-1138-perf-client-4004-bytes-cuda-shm.txt").unwrap();
    assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(4004));
    refused_as(
        "messages-eighth",
        &[
            ("jax-md-4-colab-close-to-limit-quote.txt", "Colab's notice"),
            ("sglang-7666-hicache-pinned-kv-buffer-invalid-argument.txt", "invalid argument"),
            ("yolo-tensorrt-169-skipping-tactic-4gib-workspace.txt", "skipping a tactic"),
        ],
    );
    // What the ninth set showed: vLLM's profile with no room for a KV cache, TF's growing
    // pool refused with nothing else, ONNX Runtime's output-buffer check.
    let v = verdict("messages-ninth", "vllm-13882-rank0-kv-cache-minus-1.05gib-rtx4060.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    assert!(v.headline.contains("6.65 GiB of the 5.60 GiB gpu_memory_utilization allows"), "{}", v.headline);
    assert_eq!(
        verdict("messages-ninth", "sleap-2142-tf-region-4.00g-gc-fence-cut.txt").kind,
        VerdictKind::Undetermined
    );
    refused_as("messages-ninth", &[("model-analyzer-837-ort-not-enough-space-expected-21600.txt", "output buffer")]);
    // What the tenth set showed: cudaMallocAsync's pool beyond half a GiB of context, the old
    // form's `cache`, others inferred blamed only where they alone make room, MatConvNet.
    for (file, kind) in [
        ("comfyui-supir-102-mallocasync-exceed-allowed-memory-4090d.txt", VerdictKind::Fragmentation),
        ("constructingneeg-8-double-quoted-cache-typo-474mib.txt", VerdictKind::Fragmentation),
        ("real-esrgan-437-testing-prefix-error-4gib-tile-0.txt", VerdictKind::Peak),
        ("srcnn-15-matconvnet-getworkspace-out-of-memory.txt", VerdictKind::Undetermined),
    ] {
        assert_eq!(verdict("messages-tenth", file).kind, kind, "{file}");
    }
    // What the eleventh set showed: CuPy's error read before PyTorch's word (its 557 GB
    // request one tensor too large), Theano's words, a headline that contradicted its own
    // figures (needed under what could be had is no peak: TF's Stats say pieces).
    for (file, kind) in [
        ("parametricgaussrecon-2-cupy-557gb-zeros.txt", VerdictKind::SingleTensor),
        ("3d-r2n2-10-theano-device-memory-fence.txt", VerdictKind::Undetermined),
        ("biggan-tensorflow-3-colab-bfc-stats-gapped-bar-cut.txt", VerdictKind::Fragmentation),
    ] {
        assert_eq!(verdict("messages-eleventh", file).kind, kind, "{file}");
    }
    refused_as("messages-eleventh", &[("keyhunt-cuda-53-no-kernel-image-gt650m.txt", "kernels for this GPU")]);
    // What the twelfth and thirteenth showed: TF backing off its first region, alone, says
    // nothing of what held the rest; a retyped message (`CUDA out of the memory`); vLLM's
    // `No available memory for the cache blocks` in a traceback's `raise` line, cut before
    // the error; a DataLoader worker's crash and torchrun's -9 told apart.
    kinds(
        "messages-twelfth",
        &[("tensorflow-14231-windows-1080ti-failed-to-allocate-descending-cut.txt", VerdictKind::Undetermined)],
    );
    kinds(
        "messages-thirteenth",
        &[
            ("unet-lits-6-out-of-the-memory-360mib-cut.txt", VerdictKind::Undetermined),
            ("vllm-27508-gpt-oss-120b-h100-no-available-memory-cache-blocks-cut.txt", VerdictKind::Peak),
        ],
    );
    refused_as(
        "messages-thirteenth",
        &[
            ("db-94-dataloader-worker-killed-segfault.txt", "DataLoader worker that crashed"),
            ("llama-608-colab-torchrun-exitcode-9-quoted.txt", "exit code -9"),
        ],
    );
    // What the fourteenth and fifteenth showed: a message retyped without its spaces, MXNet's
    // pool, XLA's buffer listing without its header, a launcher's `return code = -9`.
    kinds(
        "messages-fourteenth",
        &[
            ("detectron2-2457-retyped-lowercase-inline.txt", VerdictKind::Fragmentation),
            ("mxnet-2913-pooled-storage-memory-allocation-failed-cut.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-fifteenth",
        &[("transformers-3702-torch-xla-tpu-compile-scoped-allocation-no-totals.txt", VerdictKind::Undetermined)],
    );
    refused_as("messages-fourteenth", &[("anomalygpt-43-deepspeed-launcher-return-code-minus-9.txt", "SIGKILL")]);
    // What the sixteenth and seventeenth showed: a machine-translated mshadow error, ONNX
    // Runtime's arena cut before its sentence, MLC LLM's words, thrust's device allocator (not
    // the host's bad_alloc), the device refusing a library's memory again and again with no
    // figure for what held it, XLA's rematerialization falling short (the program's need
    // against its memory: a peak), a pinned host buffer, thrust's launch failure.
    kinds(
        "messages-sixteenth",
        &[
            ("alphapose-493-mshadow-machine-translated-chinese-title.txt", VerdictKind::Undetermined),
            ("llm-pdf-translator-9-ort-bfcarena-title-cut.txt", VerdictKind::Undetermined),
            ("mlc-llm-2791-insufficient-gpu-memory-19314mb-contradiction.txt", VerdictKind::Undetermined),
            ("thrust-1-bad-alloc-bold-process-received-signal.txt", VerdictKind::Undetermined),
            ("anaconda-cuda-tf-1-tf114-cublas-not-initialized-32m-repeats-cut.txt", VerdictKind::Undetermined),
        ],
    );
    kinds("messages-seventeenth", &[("xla-27322-gh200-remat-95.40gib-bfc-bar-cut.txt", VerdictKind::Peak)]);
    // What the eighteenth showed: an allocation that only reports an earlier kernel's failure.
    refused_as("messages-eighteenth", &[("numba-4833-cumemalloc-launch-failed.txt", "CUDA_ERROR_LAUNCH_FAILED")]);
    // What the twentieth and twenty-first showed: a miner's and NPP's words; a worker's SIGBUS
    // (exit status 135) and an MPS kernel's buffer assertion told apart; MPS's other
    // allocations alone past its watermark: the limit, not one tensor too large.
    kinds("messages-twentieth", &[("nheqminer-macos-13-equihash-cuda-failed-to-alloc.txt", VerdictKind::Undetermined)]);
    kinds(
        "messages-twenty-first",
        &[
            ("managedcuda-8-npp-device-allocation-error.txt", VerdictKind::Undetermined),
            ("sensevoice-218-mps-other-allocations-over-max-allowed.txt", VerdictKind::Peak),
        ],
    );
    refused_as(
        "messages-twenty-first",
        &[
            ("cubical-318-child-exited-status-135.txt", "SIGBUS"),
            ("pytorch-86152-mpsndarray-buffer-not-large-enough.txt", "buffer smaller than its shape"),
        ],
    );
    // What the twenty-second to twenty-fifth showed: CuPy's pool limit (a peak at the limit);
    // a retyped figure (`512.— MiB`); CUDA.jl's and Ollama's own words; a last line cut
    // inside `cudaMalloc fai`; host memory in OpenCV's, Ollama's and the kernel's words,
    // pinned memory named a line above the driver's error, an illegal access behind cuDNN's.
    let v = verdict("messages-twenty-fifth", "cupy-7678-pool-limit-allocated-so-far-code-comment.txt");
    assert!(v.kind == VerdictKind::Peak && v.fix.contains("free_all_blocks"), "{v:?}");
    kinds("messages-twenty-second", &[("pointrcnn-225-retyped-512-dash-mib-reserved-form.txt", VerdictKind::Peak)]);
    kinds(
        "messages-twenty-fifth",
        &[
            ("cuda-jl-2898-out-of-gpu-memory-custreamgetcaptureinfo-cut.txt", VerdictKind::Undetermined),
            ("ollama-1566-llama-runner-exited-not-enough-memory.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-twenty-third",
        &[("insightface-571-mxnet-simple-bind-cudamalloc-cut-mid-word.txt", VerdictKind::Undetermined)],
    );
    refused_as(
        "messages-twenty-second",
        &[
            ("yolov5-8477-opencv-insufficient-memory-cache-host.txt", "OpenCV's allocator"),
            ("adelaidet-97-cudnn-internal-error-illegal-access-frames-cut.txt", "illegal memory access"),
        ],
    );
    refused_as(
        "messages-twenty-third",
        &[
            ("llama-cpp-9271-vulkan-failed-to-allocate-pinned-memory.txt", "pinned host memory"),
            ("ollama-14719-model-requires-more-system-memory.txt", "more host memory (RAM) than is free"),
            ("openbmc-1887-killed-process-python-oom-reaper.txt", "Linux OOM killer"),
        ],
    );
    // What the twenty-sixth to twenty-ninth showed: a TPU's reservation refused without its
    // free figures, RMM's device pool, thrust's OOM; a TF occupancy bar full but for `x` cells
    // (a peak); a crash by signal, a VkResult that is no OOM, THC's other errors told apart.
    kinds(
        "messages-twenty-seventh",
        &[("tpu-recipes-151-tpu-attempting-to-reserve-not-possible-fence.txt", VerdictKind::Undetermined)],
    );
    kinds(
        "messages-twenty-ninth",
        &[
            ("cupoch-98-rmm-maximum-pool-size-exceeded.txt", VerdictKind::Undetermined),
            ("rmm-130-thrust-parallel-for-failed-out-of-memory.txt", VerdictKind::Undetermined),
            ("stylegan2-2-bfc-36mib-full-bar-no-stats-cut.txt", VerdictKind::Peak),
        ],
    );
    refused_as("messages-twenty-sixth", &[("volcano-vgpu-device-plugin-97-mp-spawn-sigsegv-hami-cut.txt", "SIGSEGV")]);
    refused_as(
        "messages-twenty-seventh",
        &[("zimage-ncnn-vulkan-23-vkallocatememory-invalid-external-handle-cut.txt", "VkResult")],
    );
    refused_as(
        "messages-twenty-eighth",
        &[("casd-28-thcudacheck-error-11-invalid-argument-cut.txt", "not an allocation failure")],
    );
    // What the thirtieth to thirty-third showed: TensorFlow's pool of 1 MB is no card; Ascend's,
    // OneFlow's and RELION's words; OpenCV's other CUDA errors and TensorRT's skipped tactic
    // told apart.
    kinds("messages-thirty-first", &[("yad2k-171-tf-bfc-1mb-device-1-12mib-bold-cut.txt", VerdictKind::Undetermined)]);
    kinds(
        "messages-thirty-third",
        &[
            ("helios-62-ascend-ge-rtmalloc-page-caching-3gib-cut.txt", VerdictKind::Undetermined),
            ("onediff-140-oneflow-runtimeexception-out-of-memory-batch-matmul-tqdm-cut.txt", VerdictKind::Undetermined),
            ("relion-120-cudacustomallocator-requestedspace-148560384.txt", VerdictKind::Undetermined),
        ],
    );
    refused_as(
        "messages-thirty-third",
        &[
            ("libsgm-30-opencv-gpumat-allocate-unknown-error-jetson.txt", "not an allocation failure"),
            ("mmdeploy-1350-tensorrt-skipping-tactic-4gib-workspace-terminal-wrapped-cut.txt", "skipping a tactic"),
        ],
    );
    // What the thirty-fourth to thirty-seventh showed: before PyTorch 2.1 the memory outside the
    // cache, up to a context's worth, is this process's own (a request beyond the rest is one
    // tensor too large); vLLM's check in tokens cut before its figure is still a peak; the web
    // UI's, CUDA.jl's, cuFFT's and TensorRT 7's words; a worker's other signals, NCCL's system
    // error and Paddle's host allocator told apart.
    let v = verdict("messages-thirty-sixth", "transformer-50-1-72gib-request-2gib-card-backticks.txt");
    assert!(v.kind == VerdictKind::SingleTensor && v.evidence[0].contains("it holds"), "{v:?}");
    kinds(
        "messages-thirty-fifth",
        &[
            ("api-for-open-llm-259-vllm-kv-cache-max-seq-len-cut.txt", VerdictKind::Peak),
            ("tensorrt-749-getbesttactic-no-implementation-workspace.txt", VerdictKind::Undetermined),
            ("cuda-jl-579-out-of-gpu-memory-capped-14gib-discrepancy.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-thirty-fourth",
        &[("stable-diffusion-webui-12703-not-enough-memory-need-have-fence.txt", VerdictKind::Undetermined)],
    );
    refused_as(
        "messages-thirty-fifth",
        &[
            ("jax-22747-xla-nccl-comminitrank-unhandled-system-error-cut.txt", "NCCL"),
            ("mmsegmentation-2085-dataloader-worker-terminated.txt", "SIGTERM"),
        ],
    );
    refused_as(
        "messages-thirty-sixth",
        &[("pytorch-yolov3-650-dataloader-worker-killed-by-signal-aborted-tcmalloc-cut.txt", "died by a signal")],
    );
    refused_as(
        "messages-thirty-seventh",
        &[("paddleocr-2656-fail-to-alloc-memory-5060694016-size-cpu-title.txt", "host allocator")],
    );
    // What the thirty-eighth to forty-first showed: PaddlePaddle's allocator failing with its
    // message cut away, IPython's glued traceback header; SIGSEGV's exit code and a Windows
    // fail-fast told apart.
    kinds(
        "messages-thirty-ninth",
        &[
            ("paddle-42341-badalloc-terminate-scale-kernel-traceback-cut.txt", VerdictKind::Undetermined),
            ("paddlespeech-525-warpctc-cuda-allocator-call-stack-cut.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-forty-first",
        &[("tensorflow-8536-keras1-resourceexhaustederrortraceback-cut.txt", VerdictKind::Undetermined)],
    );
    refused_as("messages-fortieth", &[("deepspeedexamples-626-sigkill-handler-return-code-11.txt", "SIGSEGV")]);
    refused_as(
        "messages-forty-first",
        &[("whisper-standalone-win-66-faster-whisper-ucrtbase-crash-0xc0000409-cut.txt", "0xC0000409")],
    );
    // What the forty-second to forty-fifth showed: a clause's label retyped (`resrved`); the
    // words of Cycles, hashcat and OpenVINO; a machine named `...-HOST` is no host memory;
    // cudaMallocAsync's pool beside half a GiB of context, however large; a cuDNN handle after
    // an illegal access, pinned host buffers, a kernel's shared memory and CUDA's unknown error
    // told apart.
    kinds(
        "messages-forty-second",
        &[("rnn-transducer-17-retyped-out-of-the-memory-resrved-2-97gib.txt", VerdictKind::Fragmentation)],
    );
    kinds(
        "messages-forty-third",
        &[
            ("blender-colab-5-cycles-system-is-out-of-gpu-and-shared-host-memory-cut.txt", VerdictKind::Undetermined),
            ("hashcat-3275-not-enough-allocatable-device-memory-gt630-opencl-cut.txt", VerdictKind::Undetermined),
            ("openvino-25141-gpu-plugin-cl-out-of-resources-driver-bug.txt", VerdictKind::Undetermined),
            ("zluda-223-blender-cycles-out-of-memory-in-custreamcreate-repeated-cut.txt", VerdictKind::Undetermined),
        ],
    );
    let v = verdict(
        "messages-forty-third",
        "text-generation-inference-563-warmup-panic-cudamallocasync-would-exceed-allowed-memory.txt",
    );
    assert_eq!(v.kind, VerdictKind::Fragmentation, "{v:?}");
    kinds(
        "messages-forty-fifth",
        &[("cntk-1906-fastrcnn-cuda-failure-2-wrapped-80-cols-cut.txt", VerdictKind::Undetermined)],
    );
    refused_as(
        "messages-forty-second",
        &[("rrpn-pytorch-41-error-700-then-cudnn-not-initialized-cut.txt", "illegal memory access")],
    );
    refused_as(
        "messages-forty-third",
        &[
            ("hot-step-cpp-27-ggml-vulkan-failed-to-allocate-pinned-memory.txt", "pinned host memory"),
            ("pg-strom-215-failed-on-cumemallochost-cuda-error-out-of-memory-cut.txt", "pinned host memory"),
            ("zluda-171-tcnn-fullyfusedmlp-insufficient-shared-memory.txt", "shared memory per block"),
        ],
    );
    refused_as(
        "messages-forty-fifth",
        &[("cntk-2602-cuda-failure-30-unknown-error-cudamalloc.txt", "not an allocation failure")],
    );
    // A paste whose error is of another kind, in no look-alike's words: said, with its line.
    for file in [
        "llama-cpp-8886-metal-submissions-ignored-interleaved-cut.txt",
        "mxnet-14306-free-invalid-pointer-core-dumped.txt",
    ] {
        let e = read_in("messages-forty-fifth", file).unwrap_err();
        assert!(e.contains("not an out-of-memory error: the paste's error is `"), "{file}: {e}");
    }
    // What the forty-sixth to forty-ninth showed: Faiss's assertion on a cudaMalloc; a
    // runtime's own largest free piece; TensorFlow's full bar where less than a cell is free;
    // a retyped look-alike, Vulkan's limit for one allocation and an error of another kind
    // under an `Allocate...` frame told apart.
    kinds(
        "messages-forty-seventh",
        &[
            ("faiss-231-old-assertion-allocmemoryspace-4294967296-quoted.txt", VerdictKind::Undetermined),
            ("tt-xla-4685-bank-manager-free-287mb-largest-block-216mb.txt", VerdictKind::Fragmentation),
        ],
    );
    kinds(
        "messages-forty-ninth",
        &[("fast-style-transfer-64-stats-38mib-free-full-bar-20mib.txt", VerdictKind::Fragmentation)],
    );
    refused_as("messages-forty-sixth", &[("yolop-133-dataloader-killed-retyped-lowercase.txt", "OOM killer")]);
    refused_as(
        "messages-forty-seventh",
        &[("llama-cpp-15009-vulkan-exceeds-device-memory-allocation-limit.txt", "single allocation")],
    );
    let e = read_in("messages-forty-seventh", "xgboost-4245-gpu-hist-invalid-argument-bytes-repr.txt").unwrap_err();
    assert!(e.contains("the paste's error is `xgboost.core.XGBoostError"), "{e}");
    // What the fiftieth to fifty-third showed: a bar 95% in use with its free cells at its end;
    // one refusal of TF's whole limit beside another device's figures; PyTorch's NVML assert
    // on its way to the report, RMM's device resource, VPI's status and TF's batched GEMM; a
    // look-alike retyped, a compiler's host memory and ONNX Runtime's failed copy told apart.
    kinds(
        "messages-fifty-first",
        &[
            ("practical-deep-learning-book-41-tf2-quoted-bar-tail-free-cut.txt", VerdictKind::Peak),
            ("tensor2tensor-1127-tf1-pool-11-40g-failed-free-11-51gib-cut.txt", VerdictKind::Undetermined),
        ],
    );
    kinds("messages-fifty-second", &[("fal-478-nvml-internal-assert-on-oom-path.txt", VerdictKind::Undetermined)]);
    kinds(
        "messages-fifty-third",
        &[
            ("cudf-5344-rmm-std-bad-alloc-cuda-error-to-csv-cut.txt", VerdictKind::Undetermined),
            ("isaac-ros-image-pipeline-2-vpi-out-of-memory-rectify-node.txt", VerdictKind::Undetermined),
            ("m-lvc-cvpr2020-12-blas-xgemmbatched-launch-failed.txt", VerdictKind::Undetermined),
        ],
    );
    refused_as(
        "messages-fifty-first",
        &[
            ("bevfusion-351-dataloader-killed-by-signaled-retyped.txt", "OOM killer"),
            ("onnxruntime-25377-windows-build-ptxas-memory-allocation-failure-cut.txt", "compiler"),
        ],
    );
    refused_as(
        "messages-fifty-third",
        &[("onnxruntime-4008-cuda-error-executing-cudamemcpy.txt", "not an allocation failure")],
    );
    // What the fifty-fourth and fifty-fifth showed: XLA's limit below zero, an unnamed BFC
    // allocator, memory that could not be allocated with no device named anywhere.
    kinds("messages-fifty-fourth", &[("mujoco-1431-mjx-sac-remat-negative-limit-49gib-cut.txt", VerdictKind::Peak)]);
    kinds(
        "messages-fifty-fifth",
        &[("intel-extension-for-tensorflow-46-itex-bfc-ran-out-of-memory-cut.txt", VerdictKind::Undetermined)],
    );
    refused_as("messages-fifty-fourth", &[("deprl-11-mujoco-fatalerror-could-not-allocate-memory.txt", "names a GPU")]);
    // What the fifty-sixth showed: SGLang's start-up check; a message cut at `CUDA out o`; Ray's
    // memory monitor and mmgp's host RAM told apart.
    kinds(
        "messages-fifty-sixth",
        &[
            ("inferencex-2128-sglang-dsv4-h200-weights-leave-no-kv-cut.txt", VerdictKind::Peak),
            ("gector-73-allennlp-log-softmax-quoted-cut-at-out-o.txt", VerdictKind::Undetermined),
        ],
    );
    refused_as(
        "messages-fifty-sixth",
        &[
            ("vllm-2669-ray-worker-killed-memory-threshold.txt", "Ray's memory monitor"),
            ("wan2gp-1168-hunyuan15-mmgp-unsufficient-ram-partial-pinning.txt", "host's memory"),
        ],
    );
    // What the fifty-seventh to sixty-second showed: XLA's account beside a BFC header without
    // its Stats; a request beyond any device, however large; other engines' own start-up checks
    // (vllm.rs's KV cache, MLC-LLM's weights and buffers); PaddlePaddle 1.x's legacy allocator,
    // its figures read (memory outside its pool: others); TF 0.10's not-a-failure warning in its
    // header's words after a Stats block; a figure whose words the paste's end cut; RMM 22's
    // exception; Go's `signal: killed`.
    kinds(
        "messages-fifty-eighth",
        &[
            ("arviz-2307-xla-bfc-bar-gapped-bufferassignment-13-74gib-cut.txt", VerdictKind::Peak),
            ("paddledetection-9005-paddle-cannot-allocate-13-9eb.txt", VerdictKind::SingleTensor),
        ],
    );
    kinds(
        "messages-fifty-ninth",
        &[("xinfer-195-vllm-rs-kvcache-allocation-131072mb-required.txt", VerdictKind::Peak)],
    );
    kinds(
        "messages-sixty-first",
        &[
            ("models-1946-paddle-legacy-allocator-382mb-available-177mb.txt", VerdictKind::Others),
            ("paddle-18819-legacy-allocator-glued-lines-fraction-0-003.txt", VerdictKind::Others),
            ("tensorflow-wavenet-10-tf-0-10-stats-928mib-gapped-bar-not-a-failure.txt", VerdictKind::Peak),
            ("cudf-10517-rmm-bad-alloc-cuda-memory-resource-cut.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-sixty-second",
        &[
            ("mlc-llm-2751-android-logcat-insufficient-gpu-memory-cut.txt", VerdictKind::Peak),
            ("mlc-llm-3027-qwen-32b-four-gpus-insufficient-gpu-memory.txt", VerdictKind::Peak),
            ("exllamav2-761-colab-t4-cache-64mib-cut.txt", VerdictKind::Fragmentation),
        ],
    );
    refused_as("messages-fifty-ninth", &[("ollama-9685-jetson-orin-gemma27b-runner-signal-killed.txt", "SIGKILL")]);
    // What the sixty-third to sixty-fifth showed: the cudaMallocAsync block without its first
    // line; TF's Stats full to within the fragmentation margin (a peak, said without a `>`); a
    // glog check on a HIP status that is no allocation's.
    kinds(
        "messages-sixty-third",
        &[("comfyui-impact-pack-364-cudamallocasync-head-cut-7mib-free-4-82gib.txt", VerdictKind::Undetermined)],
    );
    let v = verdict("messages-sixty-fourth", "facenet-120-tf1-stats-request-fills-pool-to-2mib-cut.txt");
    assert!(v.kind == VerdictKind::Peak && v.evidence[0].contains("within 1.79MiB"), "{v:?}");
    refused_as(
        "messages-sixty-fourth",
        &[("tensorflow-upstream-2163-rocm-check-failed-hipsuccess-98.txt", "invalid device function")],
    );
    // What the sixty-sixth to sixty-eighth showed: vLLM's KV check wrapped at words; a CUDA
    // program's own account of the device (a miner's DAG beyond what the card can ever give);
    // a driver too old for a call an allocator made; a cuBLAS handle that would not start in a
    // build without kernels for the GPU.
    kinds(
        "messages-sixty-eighth",
        &[
            ("kaito-2132-vllm-kv-cache-22-5gib-needed-17-39gib-available-wrapped.txt", VerdictKind::Peak),
            ("nicehashminer-1857-phoenixminer-dag-3-33gb-4gb-total-3-30gb-free.txt", VerdictKind::SingleTensor),
        ],
    );
    refused_as(
        "messages-sixty-eighth",
        &[("lmdeploy-340-turbomind-api-call-not-supported-driver-allocator-h.txt", "driver is too old")],
    );
    refused_as(
        "messages-sixty-seventh",
        &[("sr4rs-26-cublas-not-initialized-then-no-binary-for-gpu.txt", "without kernels for this GPU")],
    );
    // What the sixty-ninth to seventy-first showed: NCCL's result's own name; TensorFlow's OOM
    // hint alone; OpenCV's errors a line each (the device's, then a pinned buffer's); DirectML's
    // allocator in garbled words.
    refused_as(
        "messages-sixty-ninth",
        &[("pytorch-111187-llama-efficient-tuning-wsl-nccl-invalid-argument-cut.txt", "NCCL")],
    );
    kinds(
        "messages-seventieth",
        &[
            ("keras-retinanet-928-tf-recv-node-and-oom-hint-only.txt", VerdictKind::Undetermined),
            ("opencv-23392-wsl2-setdevice-and-host-mem-allocate-out-of-memory.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-seventy-first",
        &[("harishanand95-diffusers-10-directml-8007000e-garbled-cut.txt", VerdictKind::Undetermined)],
    );
    // The engines' checks with their figures: what was needed against what was available.
    let v = verdict("messages-fifty-ninth", "xinfer-195-vllm-rs-kvcache-allocation-131072mb-required.txt");
    assert!(v.headline.contains("128.00 GiB") && v.headline.contains("28.67 GiB"), "{v:?}");
    let v = verdict("messages-sixty-second", "mlc-llm-3027-qwen-32b-four-gpus-insufficient-gpu-memory.txt");
    assert!(v.headline.contains("32.35 GiB") && v.headline.contains("23.11 GiB"), "{v:?}");
    // A runtime's figures in words of no known format, each named by the words beside it: the
    // request (`size 1610612736 bytes`, `alloc of 1209.60 MiB failed`, `trying to allocate
    // 8.016 MiB`, `Need: 1.5GB free`), never a figure no word names.
    let read_request = |set: &str, file: &str| read_in(set, file).unwrap().oom.map(|o| o.requested);
    let requests = [
        (
            "messages-forty-seventh",
            "faiss-2105-standardgpuresources-alloc-fail-temporarymemorybuffer-1610612736.txt",
            1610612736,
        ),
        (
            "messages-forty-third",
            "stable-diffusion-cpp-1621-rocm-pool-alloc-1209-60mib-failed-rocm-error-oom-cut.txt",
            1268357530,
        ),
        ("messages-thirty-fifth", "cuda-jl-579-out-of-gpu-memory-capped-14gib-discrepancy.txt", 8405385),
        ("messages-thirty-fourth", "stable-diffusion-webui-12703-not-enough-memory-need-have-fence.txt", 1610612736),
    ];
    for (set, file, bytes) in requests {
        assert_eq!(read_request(set, file), Some(bytes), "{set}/{file}");
    }
    // One step's own need against the free memory is not an engine's load budget: without
    // what the process holds, not enough information.
    let v = verdict("messages-thirty-fourth", "stable-diffusion-webui-12703-not-enough-memory-need-have-fence.txt");
    assert_eq!(v.kind, VerdictKind::Undetermined, "{v:?}");
    // TensorFlow's occupancy bar alone, glued to its logger's prefix: a report, its gaps free
    // memory of a size the text does not give.
    let v = verdict("messages-seventieth", "scs-1-tf-quoted-half-free-bar-no-stats-cut.txt");
    assert_eq!(v.kind, VerdictKind::Undetermined, "{v:?}");
    // A request retyped with `Gib` for GiB, beyond any GPU; `CUDA error: out o` cut at the
    // paste's end (no other of CUDA's errors starts so); a miner's function named `_cpu_`, no
    // host; TensorFlow's Stats and a full bar pasted without the header that names the request.
    kinds(
        "messages-seventy-second",
        &[
            ("attention-augmented-conv2d-18-title-retyped-32768-gib.txt", VerdictKind::SingleTensor),
            ("mmdetection3d-947-model-cuda-cut-inside-out-of-memory.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-seventy-fourth",
        &[("xmrig-2569-cuda-plugin-kawpow-mem-6686-8192-memory-3056.txt", VerdictKind::Undetermined)],
    );
    kinds(
        "messages-seventy-third",
        &[("recognize-771-tfjs-node-gpu-stats-full-bar-tf-status-8.txt", VerdictKind::Peak)],
    );
    refused_as("messages-seventy-second", &[("squad-5-train-posix-memalign-12-vs-0.txt", "posix_memalign")]);
    refused_as(
        "messages-eighty-second",
        &[("diffusers-4772-colab-session-crashed-all-available-ram.txt", "host memory")],
    );
    refused_as(
        "messages-eighty-sixth",
        &[
            ("continue-11223-ollama-500-unable-to-allocate-cuda-host-buffer.txt", "pinned host buffer"),
            ("kokkos-2164-hostspace-intel-mm-alloc-18446743565090964400.txt", "host memory space"),
            ("kokkos-6865-mig-cudamalloc-cudaerrornotsupported-gdb.txt", "does not support"),
        ],
    );
    refused_as(
        "messages-eighty-fifth",
        &[("pointpillars-16-tf22-not-a-failure-after-10pct-host-warning.txt", "not the GPU's")],
    );
    let e = read_in("messages-eighty-sixth", "tensorrtllm-backend-363-default-mempool-not-supported-table-wrapped.txt")
        .unwrap_err();
    assert!(e.contains("the paste's error is") && e.contains("[TensorRT-LLM][ERROR] CUDA runtime error"), "{e}");
    refused_as(
        "messages-eighty-seventh",
        &[("deepspeedexamples-321-memory-allocation-2097152-bytes-failed-interleaved.txt", "Rust program's allocator")],
    );
    refused_as(
        "messages-eighty-eighth",
        &[
            (
                "insightface-986-verification-cpu-device-storage-failed-title.txt",
                "MXNet failing to allocate host memory",
            ),
            ("tensorflow-33410-tflite-gpu-delegate-write-to-buffer-larger.txt", "TF Lite's GPU delegate"),
            ("tf-serving-1206-bfc-check-failed-in-use-aborted.txt", "consistency check"),
        ],
    );
    // A full bar after TF's refusals; OpenGL's out-of-memory error; TF's `No algorithm worked!`;
    // ExLlamaV2's and SGLang's load checks without figures; two workers' messages, each its
    // own; vLLM's utilization check in a cut title.
    kinds(
        "messages-eighty-seventh",
        &[("tacotron-2-196-windows-not-a-failure-then-bar-all-in-use-cut.txt", VerdictKind::Peak)],
    );
    kinds(
        "messages-eighty-eighth",
        &[
            ("tensorflow-26297-tflite-gl-delegate-gl-out-of-memory-cut.txt", VerdictKind::Undetermined),
            ("tf-serving-1825-no-algorithm-worked-gtx1660-4859mb.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-eighty-ninth",
        &[
            ("exllamav2-383-colab-load-autosplit-insufficient-vram-for-model-and-cache.txt", VerdictKind::Peak),
            ("gpustack-3831-sglang-ascend-not-enough-memory-mem-fraction-0-2.txt", VerdictKind::Peak),
            ("vllm-15105-v1-worker-process-listed-1-74gib-cut.txt", VerdictKind::Peak),
            ("vllm-omni-1144-title-free-memory-46-95-of-79-18-utilization-0-6-cut.txt", VerdictKind::Others),
        ],
    );
    // A process figure of 2^64 bytes (NVML's no-answer) left out, said so, the rest read;
    // Theano's array and TF's cuFFT plan without memory are OOMs; `Killed` glued after a
    // progress bar's figure, an allocation refused with another status, Grappler's cost warning
    // and a buffer where nothing names a device are not.
    let d = read_in("messages-ninetieth", "axolotl-998-mixtral-qlora-process-has-16-eib-capacty.txt").unwrap();
    let m = d.imported.as_ref().and_then(|i| i.message.as_ref()).unwrap();
    assert!(m.process_unanswered && m.process.is_none(), "{m:?}");
    assert_eq!(d.verdict.as_ref().unwrap().kind, VerdictKind::Fragmentation);
    let text = oomscope_report::message::summary(&d, m);
    assert!(text.contains("'this process has 17179869184.00 GiB' is 2^64 bytes, NVML's answer"), "{text}");
    kinds(
        "messages-ninety-first",
        &[
            (
                "biaxial-rnn-music-composition-22-theano-cudandarray-zeros-allocation-failed.txt",
                VerdictKind::Undetermined,
            ),
            ("spleeter-133-windows-cufft-plan-customized-allocator-fatal.txt", VerdictKind::Undetermined),
        ],
    );
    refused_as(
        "messages-ninety-first",
        &[
            ("keras-3476-killed-glued-to-progress-bar-backticks.txt", "OOM killer"),
            (
                "localcolabfold-179-unified-memory-cuda-error-invalid-value-cascade-cut.txt",
                "status that is not out of memory",
            ),
            ("megadetector-57-grappler-predictcost-warning-glued-to-tqdm-backticked.txt", "Grappler"),
        ],
    );
    refused_as(
        "messages-ninety-second",
        &[("llamaedge-130-wasi-nn-ggml-failed-to-allocate-buffer.txt", "nothing in the paste names a GPU")],
    );
    // PyTorch's message cut before its cache's figure; its advice alone; MLC-LLM's load check;
    // an allocation's line with another status under RMM's marker; Vulkan's device lost.
    kinds(
        "messages-ninety-third",
        &[
            ("second-me-209-checkpoint-backward-2-64-gib-twice-cut.txt", VerdictKind::Undetermined),
            ("so-vits-svc-fork-245-hint-line-only-head-lost.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-ninety-fifth",
        &[("mlc-llm-1999-qwen72b-serve-cannot-estimate-kv-cache-capacity-cut.txt", VerdictKind::Peak)],
    );
    // `out of memory` alone before kernel faults; a host failure beside TF's pool refusals; a
    // region a compiler planned; Dr.Jit's flushed cache.
    kinds(
        "messages-hundred-and-third",
        &[("roitransformer-dota-10-mxnet-out-of-memory-then-illegal-access-cut.txt", VerdictKind::Undetermined)],
    );
    kinds(
        "messages-forty-eighth",
        &[("freeanchor-16-out-of-memory-line-then-illegal-access.txt", VerdictKind::Undetermined)],
    );
    refused_as(
        "messages-hundred-and-third",
        &[("sdsandbox-7-numpy-memoryerror-tf-pool-backoff-forrtl.txt", "host memory (RAM)")],
    );
    kinds(
        "messages-hundred-and-fourth",
        &[("mlc-llm-860-relax-vm-storage-region-16777216-bytes-prompt-2049.txt", VerdictKind::SingleTensor)],
    );
    refused_as(
        "messages-hundred-and-fourth",
        &[("mitsuba3-149-jit-flush-malloc-cache-warning-in-template-bullet.txt", "flush")],
    );
    // TF's message cut inside its words; MXNet's cuBLAS handle; TF 0.x's OOM on a CPU node;
    // TensorRT's internal error; a pool's fallback, then another error.
    kinds(
        "messages-hundredth",
        &[
            ("deepfacelab-263-liaef128-gtx1060-error-oom-when-allocating-tenso-cut.txt", VerdictKind::Undetermined),
            ("mxnet-9167-gluon-stream-gpu-inl-create-cublas-handle-failed-1-vs-0-cut.txt", VerdictKind::Undetermined),
        ],
    );
    refused_as(
        "messages-hundredth",
        &[("tensorflow-576-mnist-cpu-vm-oom-shapedim-5000-28-28-32-cut.txt", "node placed on `/cpu:0`")],
    );
    refused_as(
        "messages-hundred-and-first",
        &[(
            "jetson-inference-1818-trt-checkmemlimit-unknown-embedded-device-assertion.txt",
            "TensorRT's internal error",
        )],
    );
    let e = read_in(
        "messages-hundred-and-first",
        "triton-server-8177-cnmem-fallback-pinned-then-copy-invalid-argument.txt",
    )
    .unwrap_err();
    assert!(e.contains("the paste's error is") && e.contains("failed to copy data: invalid argument"), "{e}");
    // A Chinese locale's bash reporting its job killed; xmrig's quoted status where nothing
    // names a device; SGLang's prefill check with its tokens and free slots.
    refused_as("messages-ninety-seventh", &[("ernie-24-chinese-locale-shell-killed-yi-sha-si.txt", "OOM killer")]);
    refused_as(
        "messages-ninety-eighth",
        &[("xmrig-1372-datasethost-reg-50-out-of-memory-retyped-backticks.txt", "nothing in the paste names a GPU")],
    );
    let v = verdict("messages-ninety-eighth", "sglang-34676-hybrid-mamba-prefill-out-of-memory-8192-tokens.txt");
    assert!(v.kind == VerdictKind::Peak && v.evidence[0].contains("8192 tokens asked for > 7936 free slots"), "{v:?}");
    assert!(v.fix.contains("--chunked-prefill-size below 8192"), "{v:?}");
    refused_as(
        "messages-ninety-fifth",
        &[
            ("cudf-4649-memoryerror-bad-alloc-cudaerrorillegaladdress.txt", "illegal memory access"),
            ("ray-tracing-in-one-weekend-4-sdl-gpu-vkqueuesubmit-device-lost.txt", "VK_ERROR_DEVICE_LOST"),
        ],
    );
    let v = verdict("messages-eighty-ninth", "vllm-omni-1144-title-free-memory-46-95-of-79-18-utilization-0-6-cut.txt");
    assert!(v.headline.contains("asks for 47.51 GiB"), "{v:?}");
    // TensorFlow's bar all in use beside a message without a figure; TGI's warm-up, the peak of
    // its warm-up, with its tokens; DeepSpeed's workspace lines with the error cut away.
    let v = verdict("messages-eighty-fifth", "keras-yolo3-96-full-bar-dst-tensor-not-initialized-k80.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    let v = verdict(
        "messages-eighty-sixth",
        "text-generation-inference-755-warmup-not-enough-memory-4096-prefill-title.txt",
    );
    assert!(v.kind == VerdictKind::Peak && v.headline.contains("4096 tokens"), "{v:?}");
    assert!(v.fix.contains("--max-batch-prefill-tokens below 4096"), "{v:?}");
    let v = verdict("messages-eighty-sixth", "xtts-webui-25-deepspeed-workspace-requested-free-total-cut.txt");
    assert!(v.kind == VerdictKind::Undetermined && v.headline.contains("with 46.94 MiB free of 4.00 GiB"), "{v:?}");
    // XLA's rematerialization with `below` broken by a paste; a bar whose free cells are all
    // at its end, with no Stats.
    let v = verdict("messages-eighty-second", "alphafold3-697-rematerialization-be-low-24-11gib-only-34-36gib.txt");
    assert!(v.kind == VerdictKind::Peak && v.headline.contains("24.11GiB"), "{v:?}");
    let v =
        verdict("messages-eighty-second", "tensorflow-wavenet-281-bar-one-free-cell-not-a-failure-then-summary.txt");
    assert_eq!(v.kind, VerdictKind::Peak, "{v:?}");
    // An XLA account cut before its totals yields to the allocator's full bar; a device that
    // says it has not enough memory; TensorRT's workspace limit, passed by one request.
    kinds(
        "messages-seventy-sixth",
        &[
            ("localcolabfold-50-unified-memory-bfc-12mib-bar-account-cut.txt", VerdictKind::Peak),
            ("magan-2-k80-totalmemory-11-17gib-failed-to-allocate-11-17g.txt", VerdictKind::Undetermined),
        ],
    );
    kinds(
        "messages-seventy-seventh",
        &[
            ("hashcat-516-v3-10-device-does-not-provide-enough-allocatable-750ti.txt", VerdictKind::Undetermined),
            ("tensorrt-llm-352-gptattention-plugin-scratch-56405524864-bytes-cut.txt", VerdictKind::SingleTensor),
        ],
    );
    // MIOpen's memory not available to allocate, cuRAND's allocation failure, a card named by
    // its maker's and line's name two lines above a bare `Error: out of memory`.
    kinds(
        "messages-seventy-ninth",
        &[
            ("miopen-47-tf-rocm-memory-not-available-655360000-no-suitable-algorithm.txt", VerdictKind::Undetermined),
            ("spacy-3397-cupy-curand-status-allocation-failed-backticks.txt", VerdictKind::Undetermined),
        ],
    );
    kinds("messages-eightieth", &[("bitcrack-13-starting-points-1855mb-out-of-memory.txt", VerdictKind::Undetermined)]);
    // CUDA.jl's cuDNN handle that could not be created; PaddlePaddle's buddy allocator's first
    // chunk.
    kinds(
        "messages-eighty-second",
        &[
            ("cuda-jl-692-worker-3-cudnn-status-internal-error-cudnncreate-cut.txt", VerdictKind::Undetermined),
            ("paddle-6265-ctest-242-enforce-allocating-less-than-available.txt", VerdictKind::Undetermined),
        ],
    );
    let v =
        verdict("messages-seventy-seventh", "tensorrt-llm-352-gptattention-plugin-scratch-56405524864-bytes-cut.txt");
    assert!(v.evidence[0].contains("52.53 GiB requested > 44.32 GiB"), "{v:?}");
    refused_as(
        "messages-seventy-third",
        &[("roundtrip-4-tf-cudnn-launch-failure-fusedbatchnorm-quoted.txt", "cuDNN kernel")],
    );
    // Live tensors and the request within the figures' rounding of what can be had: a full
    // device, said without a false `>`.
    let v = verdict("messages-eighteenth", "loc2vec-3-cached-form-400mib.txt");
    assert!(v.evidence[0].contains("<=") && v.evidence[0].contains("closer than the figures' rounding"), "{v:?}");
    refused_as(
        "messages-sixteenth",
        &[
            ("amdgpu-jl-591-hiperror-hostbuffer-pinned-cut.txt", "pinned host memory"),
            ("alenka-49-thrust-unspecified-launch-fail-freemem-totalmem.txt", "unspecified launch failure"),
        ],
    );
    // NCCL's CUDA failure with the error's code is an OOM, without figures.
    let v = verdict("messages-fourth", "peft-1703-nccl-cuda-failure-2-interleaved-ranks.txt");
    assert_eq!(v.kind, VerdictKind::Undetermined, "{v:?}");
    refused_as(
        "messages-fourth",
        &[
            // TF's warning wrapped after its `The`, the shell's report of a killed job, older
            // kernels' OOM killer, NCCL's communicator failing to start.
            ("tffrcnn-68-not-a-failure-autolinked-wrapped.txt", "so it is not an error"),
            ("deep-clustering-kingdra-2-timestamped-bash-killed.txt", "Linux OOM killer"),
            ("nervana-deepspeech-48-dmesg-kill-process-score.txt", "Linux OOM killer"),
            ("horovod-1195-ncclcomminitrank-wrapped-node.txt", "NCCL"),
        ],
    );
}

/// `replay SNAPSHOT --keep-going` goes on past the first OOM: the dump holds every failure and
/// the state at the end.
#[test]
fn a_snapshot_replayed_with_keep_going_shows_every_failure_and_the_end() {
    let snap = root().join("fixtures/torch-snapshots/oom.pickle");
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", snap.to_str().unwrap(), "--device", "256MiB", "--format", "json"];
        args.extend_from_slice(extra);
        let o = oomscope(&args);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)))
    };
    let (first, going) = (replay(&[]), replay(&["--keep-going"]));
    assert_eq!(first["ooms_total"], 1);
    assert!(going["ooms_total"].as_u64().unwrap() > 1, "{}", going["ooms_total"]);
    // The program freed everything by its end; at the first OOM it held most of the device.
    assert_eq!(going["stats"]["bytes_in_use"], 0);
    assert!(first["stats"]["bytes_in_use"].as_u64().unwrap() > 200 << 20);
    // The verdict is the first failure's.
    assert_eq!(going["verdict"]["kind"], first["verdict"]["kind"]);
}
