//! Golden files of the reports, produced by the binary from the fixtures. The goldens were
//! reviewed line by line (tf-reference against `tf-bfc.md`); a change to them is a change to
//! what users see.

use crate::common::*;

/// (golden name, trace, extra arguments)
const CASES: &[(&str, &str, &[&str])] = &[
    ("tf-reference", "fixtures/traces/tf-reference.jsonl", &["--limit", "18995773440"]),
    ("fragmentation", "fixtures/traces/fragmentation.jsonl", &["--limit", "64MiB"]),
    ("steps-growth", "fixtures/traces/steps-growth.jsonl", &["--limit", "120MiB"]),
    ("steps-growth-keep-going", "fixtures/traces/steps-growth.jsonl", &["--limit", "120MiB", "--keep-going"]),
    // No OOM: a preallocating allocator refused twice by a device others share.
    (
        "refused-no-oom",
        "fixtures/traces/fragmentation.jsonl",
        &["--limit", "11GiB", "--device", "11GiB", "--others", "1.9GiB"],
    ),
];

#[test]
fn reports_match_their_goldens() {
    for (name, trace, extra) in CASES {
        for format in ["tf", "summary"] {
            let mut args = vec!["replay", trace, "--format", format];
            args.extend_from_slice(extra);
            let out = oomscope(&args);
            assert!(matches!(out.status.code(), Some(0 | 1)), "{name}: {}", stderr(&out));
            assert_golden(&format!("{name}.{format}.txt"), &stdout(&out));
        }
    }
}

#[test]
fn the_dump_schema_matches_its_golden() {
    let out = oomscope(&["replay", "fixtures/traces/tf-reference.jsonl", "--limit", "18995773440", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let pretty = serde_json::to_string_pretty(&value).unwrap() + "\n";
    assert_golden("tf-reference.dump.json", &pretty);
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn the_tf_reference_case_prints_the_reference_text() {
    // Every line of the example in tf-bfc.md appears verbatim, except the two chunk lines
    // whose addresses are the reference machine's.
    let reference = std::fs::read_to_string(shared().join("reference/tf-bfc.md")).unwrap();
    let block = reference.split("## The OOM text (TF 2.4+)\n```\n").nth(1).unwrap().split("```").next().unwrap();
    let out = stdout(&oomscope(&["replay", "fixtures/traces/tf-reference.jsonl", "--limit", "18995773440"]));
    let ours: Vec<&str> = out.lines().collect();
    for line in block.lines() {
        let line = line.replace("\\t", "\t").replace("<op>", "model/decoder/MatMul");
        if line.starts_with("...") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("InUse at ").or(line.strip_prefix("Free  at ")) {
            let tail = rest.split_once(' ').unwrap().1;
            assert!(ours.iter().any(|l| l.ends_with(tail) && l[..5] == line[..5]), "no line like {line:?}");
            continue;
        }
        assert!(ours.contains(&line.as_str()), "missing reference line {line:?}\n--- ours:\n{out}");
    }
}
