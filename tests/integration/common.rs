//! Helpers shared by the integration tests: running the binary, temporary directories,
//! and golden files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Fails the test, with what to do, when `tool` cannot run. Tests that need a tool are
/// also `#[ignore]`d where the build found it missing (`build.rs`), except under CI, where
/// this is what reports it.
pub fn require(tool: &str) {
    let ok = Command::new(tool)
        .arg(if tool == "tmux" { "-V" } else { "--version" })
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{tool} is needed by this test and cannot run here; install it (.ci/run does)");
}

/// The Python with PyTorch named by `OOMSCOPE_TEST_PYTHON`; fails the test, with what to
/// do, when there is none.
pub fn torch_python() -> String {
    let py = std::env::var("OOMSCOPE_TEST_PYTHON")
        .unwrap_or_else(|_| panic!("set OOMSCOPE_TEST_PYTHON to a Python with PyTorch (.ci/run makes one)"));
    let ok = Command::new(&py).args(["-c", "import torch"]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "OOMSCOPE_TEST_PYTHON={py} cannot import torch");
    py
}

/// The Python with TensorFlow named by `OOMSCOPE_TEST_TF_PYTHON`; fails the test, with what
/// to do, when there is none.
pub fn tf_python() -> String {
    let py = std::env::var("OOMSCOPE_TEST_TF_PYTHON")
        .unwrap_or_else(|_| panic!("set OOMSCOPE_TEST_TF_PYTHON to a Python with tensorflow-cpu (.ci/run makes one)"));
    let ok = Command::new(&py).args(["-c", "import tensorflow"]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "OOMSCOPE_TEST_TF_PYTHON={py} cannot import tensorflow");
    py
}

/// `../shared`, with the real snapshots and the TF reference; fails the test when absent.
pub fn shared() -> PathBuf {
    let dir = root().join("../shared");
    assert!(
        dir.join("data/torch-snapshots").is_dir() && dir.join("reference/tf-bfc.md").is_file(),
        "{}: the shared real data is not here",
        dir.display()
    );
    dir
}

/// `liboomscope.so` as built for these tests: `cargo test` leaves it in `deps/`, `cargo
/// build` puts a copy beside the binary, which an earlier build may have left stale; the
/// newer of the two.
pub fn library() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_oomscope")).parent().expect("the binary is in a directory");
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [dir.join("liboomscope.so"), dir.join("deps/liboomscope.so")]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(modified)
        .unwrap_or_else(|| panic!("cargo builds liboomscope.so in {} or its deps/", dir.display()))
}

/// Runs `oomscope ARGS` from the repository root, killed after `guard` (which fails the
/// test: no test asserts a timing, but a hang must not hold the run), its address space
/// capped at `address_space` bytes when given (a blowup fails as a refused allocation
/// instead of taking the machine).
pub fn oomscope_bounded(args: &[&str], address_space: Option<u64>, guard: std::time::Duration) -> Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oomscope"));
    cmd.args(args).current_dir(root()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(limit) = address_space {
        // SAFETY: setrlimit is async-signal-safe and changes only the child about to exec.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_AS, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("the oomscope binary runs");
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for oomscope") {
            break s;
        }
        if start.elapsed() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!("oomscope {args:?} still ran after {guard:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output { status, stdout: out.join().expect("stdout"), stderr: err.join().expect("stderr") }
}

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A private directory (mode 700, as the live feed wants it) for one test's sockets:
/// `temp_dir(name)/live`.
pub fn live_dir(name: &str) -> PathBuf {
    let dir = temp_dir(name).join("live");
    oomscope_live::private_dir(&dir).expect("a private directory");
    dir
}

/// Runs `oomscope ARGS` from the repository root with `input` on its standard input (fed
/// from a thread, so an input larger than a pipe holds cannot block the child).
pub fn oomscope_with_stdin(args: &[&str], input: Vec<u8>) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the oomscope binary runs");
    let mut stdin = child.stdin.take().expect("piped");
    let feed = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let o = child.wait_with_output().expect("the oomscope binary runs");
    feed.join().expect("the feeding thread ends");
    o
}

/// Runs `oomscope ARGS` from the repository root.
pub fn oomscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the oomscope binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh, empty directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "oomscope-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Files in a directory (names), sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("readable dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Compares `actual` with `tests/golden/NAME`. With `UPDATE_GOLDEN=1` the file is written
/// instead; review the diff before committing it.
pub fn assert_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it, then review it)", path.display()));
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs at line {}:\n  expected: {:?}\n  actual:   {:?}\n(UPDATE_GOLDEN=1 rewrites it; review the diff)",
            path.display(),
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// A PyTorch snapshot's final segments of `device`, read straight from the pickle, in the
/// shape `oomscope replay SNAPSHOT --format json` promises for its regions: each segment's
/// `address`, `size` and `chunks` (`address`, `size`, `requested`, `in_use`, `pending_free`),
/// in address order.
pub fn snapshot_final_state(path: &Path, device: i128) -> serde_json::Value {
    use oomscope_ingest::pickle::{self, Value};
    use serde_json::json;
    let top = pickle::read(&std::fs::read(path).unwrap()).unwrap();
    let int = |v: &Value, k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap();
    let mut segs: Vec<(u64, serde_json::Value)> = Vec::new();
    for s in top.get("segments").unwrap().items().unwrap() {
        if s.get("device").and_then(|d| d.as_i128()) != Some(device) {
            continue;
        }
        let chunks: Vec<serde_json::Value> = s
            .get("blocks")
            .unwrap()
            .items()
            .unwrap()
            .iter()
            .map(|b| {
                let state = b.get("state").unwrap();
                json!({
                    "address": int(b, "address"),
                    "size": int(b, "size"),
                    "requested": int(b, "requested_size"),
                    "in_use": state.as_str() == Some("active_allocated"),
                    "pending_free": state.as_str() == Some("active_pending_free"),
                })
            })
            .collect();
        let addr = int(&s, "address");
        segs.push((addr, json!({"address": addr, "size": int(&s, "total_size"), "chunks": chunks})));
    }
    segs.sort_by_key(|s| s.0);
    serde_json::Value::Array(segs.into_iter().map(|s| s.1).collect())
}

/// A dump's regions in the shape of [`snapshot_final_state`].
pub fn dump_regions(d: &serde_json::Value) -> serde_json::Value {
    use serde_json::json;
    serde_json::Value::Array(
        d["regions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let chunks: Vec<serde_json::Value> = r["chunks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        json!({"address": c["address"], "size": c["size"], "requested": c["requested"],
                               "in_use": c["in_use"], "pending_free": c["pending_free"].as_bool().unwrap_or(false)})
                    })
                    .collect();
                json!({"address": r["address"], "size": r["size"], "chunks": chunks})
            })
            .collect(),
    )
}
