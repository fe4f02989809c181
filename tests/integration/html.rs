//! The page to share (`--format html`), opened in a real browser: Debian's Chromium,
//! headless. Each page loads without a script error, its DOM (after its script ran) holds the
//! verdict and the drawings, nothing is requested from the network, and a screenshot is
//! taken (kept in the test's directory when `OOMSCOPE_KEEP_SCREENSHOTS` is set, to look at).

use crate::common::{oomscope, require, root, shared, stderr, temp_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What Chromium made of a page: its DOM after load, the console's errors, the URLs the page
/// itself asked for (not the browser's own update checks), and the screenshot's size.
struct Loaded {
    dom: String,
    errors: Vec<String>,
    requests: Vec<String>,
    screenshot: u64,
}

fn chromium(page: &Path, dir: &Path) -> Loaded {
    require("chromium");
    let profile = dir.join("profile");
    let net = dir.join("net.json");
    let shot = page.with_extension("png");
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ];
    let url = format!("file://{}", page.display());
    let run = |extra: &[String]| {
        let o = Command::new("chromium")
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url)
            .output()
            .unwrap();
        assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = run(&[format!("--log-net-log={}", net.display()), "--dump-dom".into()]);
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let errors = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .map(str::to_string)
        .collect();
    // A request the page made has an initiator (the file's opaque origin, `null`); the
    // browser's own (update checks) have none ("not an origin").
    let log: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&net).unwrap()).unwrap();
    let mut requests: Vec<String> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let p = &e["params"];
            let url = p["url"].as_str()?;
            (p["initiator"].as_str().is_some_and(|i| i != "not an origin") && !url.starts_with("file:"))
                .then(|| url.to_string())
        })
        .collect();
    requests.dedup();
    run(&["--window-size=1100,1600".into(), format!("--screenshot={}", shot.display())]);
    let screenshot = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    Loaded { dom, errors, requests, screenshot }
}

/// Writes the page with `args` (`report DUMP` or `import INPUT`, and `--format html -o`).
fn page(args: &[&str], dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--format", "html", "-o", out.to_str().unwrap()]);
    let o = oomscope(&all);
    assert!(o.status.success(), "{all:?}: {}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("<!doctype html>"), "{}", &text[..text.len().min(200)]);
    // One file: nothing outside it is referred to (a URL in the text, as PyTorch's message
    // has one, is text).
    for refers in [" src=", " href=", "<link", "@import", "url("] {
        assert!(!text.contains(refers), "{name} refers to {refers}");
    }
    out
}

fn check(l: &Loaded, name: &str, must: &[&str]) {
    assert!(l.errors.is_empty(), "{name}: console errors {:?}", l.errors);
    assert!(l.requests.is_empty(), "{name}: the page asked for {:?}", l.requests);
    assert!(l.screenshot > 10_000, "{name}: a screenshot of {} bytes", l.screenshot);
    for m in must {
        assert!(l.dom.contains(m), "{name}: the DOM lacks {m:?}");
    }
}

fn keep(dir: &Path) {
    if std::env::var_os("OOMSCOPE_KEEP_SCREENSHOTS").is_none() {
        std::fs::remove_dir_all(dir).unwrap();
    } else {
        eprintln!("pages and screenshots kept in {}", dir.display());
    }
}

/// The harness sees what it must: a page with a script error and a fetched image is caught.
#[test]
#[cfg_attr(oomscope_missing = "chromium", ignore = "needs chromium, which is not installed (.ci/run installs it)")]
fn the_browser_check_catches_a_script_error_and_a_request() {
    let dir = temp_dir("html-control");
    let bad = dir.join("bad.html");
    std::fs::write(
        &bad,
        "<!doctype html><html><body><p>x</p><img src=\"http://192.0.2.1/a.png\"><script>nosuchfunction();</script></body></html>",
    )
    .unwrap();
    let l = chromium(&bad, &dir);
    assert!(l.errors.iter().any(|e| e.contains("nosuchfunction")), "{:?}", l.errors);
    assert!(l.requests.iter().any(|r| r.contains("192.0.2.1")), "{:?}", l.requests);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A dump (the demo's OOM, with its history and blocks), a real PyTorch snapshot, a real
/// TensorFlow log and a replay's what-ifs.
#[test]
#[cfg_attr(oomscope_missing = "chromium", ignore = "needs chromium, which is not installed (.ci/run installs it)")]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs ../shared (the real snapshots)")]
fn pages_of_a_dump_a_snapshot_a_log_and_a_replay_load_whole() {
    let dir = temp_dir("html-pages");
    // The demo's OOM: the verdict, memory over time by op, the nodes, the map.
    let dump = dir.join("demo.dump.json");
    let o = oomscope(&["demo", "-o", dump.to_str().unwrap(), "--format", "summary"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = page(&["report", dump.to_str().unwrap()], &dir, "demo.html");
    let l = chromium(&p, &dir);
    check(
        &l,
        "the demo's dump",
        &[
            "Verdict: true peak",
            "train at batch 1",
            "<svg id=\"timeline-svg\"",
            "<svg id=\"map-svg\"",
            "shared_model/resize_images_1/ResizeBilinear",
            "Current usage from device",
        ],
    );
    // The script ran: the filter it shows is visible.
    assert!(l.dom.contains("<input id=\"filter\" placeholder"), "the filter is shown by the script");
    // A real snapshot, a user's, whose trace starts from an empty allocator.
    let snap = shared()
        .join("data/torch-snapshots/NiuHuangxiaozi__assignment2-systems__9d868b9b__forward_memory_snapshot_100.pickle");
    let p = page(&["import", snap.to_str().unwrap()], &dir, "snapshot.html");
    check(
        &chromium(&p, &dir),
        "a real snapshot",
        &["id=\"verdict\"", "<svg id=\"map-svg\"", "<svg id=\"timeline-svg\"", "The snapshot's figures"],
    );
    // A real TensorFlow log (a user's U-Net): what it lacked is said.
    let log = root().join("fixtures/logs/seed-003-unet.txt");
    let p = page(&["import", log.to_str().unwrap()], &dir, "tflog.html");
    check(
        &chromium(&p, &dir),
        "a real TF log",
        &["id=\"verdict\"", "What the input lacked", "shared_model/unet_00/Conv2D"],
    );
    // A replay with its what-ifs: the table.
    let replayed = dir.join("whatif.dump.json");
    let snapshot = root().join("fixtures/torch-snapshots/oom.pickle");
    let o = oomscope(&[
        "replay",
        snapshot.to_str().unwrap(),
        "--device",
        "256MiB",
        "--set",
        "expandable_segments:True",
        "-o",
        replayed.to_str().unwrap(),
    ]);
    assert!(o.status.code().is_some(), "{}", stderr(&o));
    let p = page(&["report", replayed.to_str().unwrap()], &dir, "whatif.html");
    check(
        &chromium(&p, &dir),
        "a replay",
        &["The same requests under other settings", "expandable_segments:True", "<svg id=\"timeline-svg\""],
    );
    keep(&dir);
}

/// A job's ranks (three processes on the C ABI, one running out of memory) and `run --html`.
#[test]
#[cfg_attr(oomscope_missing = "chromium", ignore = "needs chromium, which is not installed (.ci/run installs it)")]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_jobs_page_shows_every_rank_and_run_writes_pages() {
    require("python3");
    let dir = temp_dir("html-job");
    let dumps = dir.join("dumps");
    for rank in 0..3 {
        let o = Command::new("python3")
            .arg(root().join("tests/python/jobs/rank_state.py"))
            .env("OOMSCOPE_LIB", crate::common::library())
            .env("OOMSCOPE_DEVICE", "sim:128MiB")
            .env("OOMSCOPE_DUMP_DIR", &dumps)
            .env("OOMSCOPE_QUIET", "1")
            .envs([("RANK", rank.to_string()), ("LOCAL_RANK", rank.to_string())])
            .envs([("WORLD_SIZE", "3"), ("LOCAL_WORLD_SIZE", "3"), ("TORCHELASTIC_RUN_ID", "html-job")])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let p = page(&["report", dumps.to_str().unwrap()], &dir, "job.html");
    check(
        &chromium(&p, &dir),
        "a job",
        &[
            "Job html-job: rank 1 ran out of memory first",
            "<svg id=\"ranks-svg\"",
            "What sets the failing rank apart",
            "The failing rank",
        ],
    );
    // `run --html`: a page beside the dump the program's OOM wrote.
    let run_dumps = dir.join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--html", "--dump-dir"])
        .arg(&run_dumps)
        .args(["--", "python3"])
        .arg(root().join("tests/python/run_oom.py"))
        .arg("child")
        .env("PYTHONPATH", root().join("tests/python"))
        .env("TEST_EXPECT", "CUDA out of memory")
        .current_dir(root())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let pages: Vec<PathBuf> = std::fs::read_dir(&run_dumps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .collect();
    assert_eq!(pages.len(), 1, "{err}");
    assert!(err.contains("a page to share, open in a browser:"), "{err}");
    let dump = pages[0].with_extension("dump.json");
    assert!(dump.exists(), "the page is beside its dump {}", dump.display());
    check(&chromium(&pages[0], &dir), "run --html", &["id=\"verdict\"", "child/Conv2D"]);
    keep(&dir);
}
