//! Hostile jobs' directories: what another user or another run may leave in the dump
//! directory a job shares (FIFOs and symlinks named like dumps, a failure file that is a
//! link, unreadable or forged dumps, names whose numbers overflow, other runs' dumps), and
//! what `oomscope run`, `report DIR` and `diff DIR` do with each: never block, never write
//! through a link, never claim another run's failure, never lose the other ranks.

use crate::common::{library, oomscope_bounded, require, root, stderr, stdout, temp_dir};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(90);

/// Rank `rank` of a three-rank job `job` on the C ABI ([rank_state.py]): rank 1 runs out of
/// memory, the others write their state. Not started under `oomscope run`.
fn rank(dumps: &Path, job: &str, rank: u32) -> Command {
    let mut c = Command::new("python3");
    c.arg(root().join("tests/python/jobs/rank_state.py"))
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:128MiB")
        .env("OOMSCOPE_DUMP_DIR", dumps)
        .env("OOMSCOPE_QUIET", "1")
        .envs([("RANK", rank.to_string()), ("LOCAL_RANK", rank.to_string())])
        .envs([("WORLD_SIZE", "3"), ("LOCAL_WORLD_SIZE", "3"), ("TORCHELASTIC_RUN_ID", job)]);
    c
}

/// A job's three ranks' dumps in `dumps`.
fn job_dumps(dumps: &Path, job: &str) {
    for r in 0..3 {
        let o = rank(dumps, job, r).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `oomscope run --dump-dir DUMPS -- sh -c SCRIPT`, its ranks set by the script, started.
fn run(dumps: &Path, script: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:128MiB", "--dump-dir"])
        .arg(dumps)
        .args(["--", "sh", "-c", script])
        .env("RANK_STATE", root().join("tests/python/jobs/rank_state.py"))
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` within the guard: a hang fails the test instead of holding the run.
fn finish(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > GUARD {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what} still ran after {GUARD:?}: killed\n{}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The shell line that runs rank R of job J (three ranks) the way a launcher would.
fn rank_line(job: &str, r: u32) -> String {
    format!(
        "RANK={r} LOCAL_RANK={r} WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 TORCHELASTIC_RUN_ID={job} OOMSCOPE_QUIET=1 \
         python3 \"$RANK_STATE\" >/dev/null"
    )
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// A FIFO named like a rank's dump, and a symlink named like one, in the job's directory:
/// `report DIR`, `diff DIR` and `oomscope run` read neither, say so, and end.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_fifo_or_link_named_like_a_dump_is_not_opened() {
    require("python3");
    let dir = temp_dir("hostile-fifo");
    let dumps = dir.join("dumps");
    job_dumps(&dumps, "fifo");
    mkfifo(&dumps.join("oomscope-rank5-4242-gpu0-oom1.dump.json"));
    let elsewhere = dir.join("elsewhere.dump.json");
    let rank0 = std::fs::read_dir(&dumps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("oomscope-rank0-"))
        .unwrap();
    std::fs::copy(&rank0, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dumps.join("oomscope-rank6-4243-gpu0-oom1.dump.json")).unwrap();
    let d = dumps.to_str().unwrap();
    for args in [vec!["report", d], vec!["diff", d]] {
        let o = oomscope_bounded(&args, None, GUARD);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("oomscope-rank5-4242-gpu0-oom1.dump.json: not a regular file"), "{args:?}: {err}");
        assert!(err.contains("oomscope-rank6-4243-gpu0-oom1.dump.json: not a regular file"), "{args:?}: {err}");
        if args[0] == "report" {
            assert!(stdout(&o).contains("rank 1 of 3"), "{}", stdout(&o));
            assert!(!stdout(&o).contains("\n  5") && !stdout(&o).contains("\n  6"), "{}", stdout(&o));
        }
    }
    // A run whose rank fails in that directory ends when its program has ended.
    let o = finish(run(&dumps, &rank_line("fifo-run", 1)), "oomscope run");
    let err = stderr(&o);
    assert!(err.contains("rank 1 ran out of memory first; the state of 1 rank"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The job's failure file planted as a symlink to another file (its name is predictable):
/// the failing rank appends nothing through it, and says why the others were not told.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_failure_file_that_is_a_link_is_not_written_through() {
    require("python3");
    let dir = temp_dir("hostile-failures-link");
    let dumps = dir.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    let target = dir.join("victim.txt");
    std::fs::write(&target, "precious\n").unwrap();
    std::os::unix::fs::symlink(&target, dumps.join("oomscope-job-planted.failures")).unwrap();
    let o = rank(&dumps, "planted", 1).env_remove("OOMSCOPE_QUIET").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n", "nothing appended through the link");
    assert!(err.contains("the other ranks could not be told of this OOM"), "{err}");
    assert!(err.contains("a symbolic link, not the job's failure file"), "{err}");
    // Its OOM dump is written all the same.
    assert!(crate::common::files_in(&dumps).iter().any(|n| n.ends_with("-oom1.dump.json")));
    let _ = std::fs::remove_dir_all(dir);
}

/// Two runs at once in one directory: each claims only its own processes' dumps, and a job
/// summary is its own job's.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn runs_that_share_a_directory_claim_only_their_own_dumps() {
    require("python3");
    let dir = temp_dir("hostile-two-runs");
    let dumps = dir.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    // The first run's rank fails at once, then its program waits for the second run to fail.
    let first = run(
        &dumps,
        &format!("{}; while [ ! -e \"$OOMSCOPE_DUMP_DIR/second-done\" ]; do sleep 0.1; done", rank_line("first", 1)),
    );
    let start = Instant::now();
    while !crate::common::files_in(&dumps).iter().any(|n| n.starts_with("oomscope-rank1-")) && start.elapsed() < GUARD {
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = format!(
        "{}; {}; {}; touch \"$OOMSCOPE_DUMP_DIR/second-done\"",
        rank_line("second", 0),
        rank_line("second", 1),
        rank_line("second", 2)
    );
    let second = finish(run(&dumps, &script), "the second run");
    let first = finish(first, "the first run");
    let (e1, e2) = (stderr(&first), stderr(&second));
    assert!(e1.contains("rank 1 ran out of memory first; the state of 1 rank "), "the first run's own job: {e1}");
    assert!(e2.contains("rank 1 ran out of memory first; the state of 3 ranks "), "the second run's own job: {e2}");
    // Neither names a dump of the other's job.
    for name in crate::common::files_in(&dumps).iter().filter(|n| n.ends_with(".dump.json")) {
        let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dumps.join(name)).unwrap()).unwrap();
        let other = if d["process"]["job"] == "first" { &e2 } else { &e1 };
        assert!(!other.contains(name.as_str()), "{name} claimed by the other run:\n{other}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A 0-byte dump, a dump whose name and contents disagree, a name whose rank overflows, and
/// a host with a newline: `report DIR` shows the job from the rest, says what it passed
/// over, and no name forges a line.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn bad_dumps_in_a_jobs_directory_are_said_and_the_rest_shown() {
    require("python3");
    let dir = temp_dir("hostile-bad-dumps");
    let dumps = dir.join("dumps");
    job_dumps(&dumps, "bad");
    let names = crate::common::files_in(&dumps);
    let rank0 = dumps.join(names.iter().find(|n| n.starts_with("oomscope-rank0-")).unwrap());
    std::fs::write(dumps.join("oomscope-rank2-999-gpu2-oom1.dump.json"), "").unwrap();
    std::fs::copy(&rank0, dumps.join("oomscope-rank7-998-gpu0-state1.dump.json")).unwrap();
    std::fs::copy(&rank0, dumps.join("oomscope-rank99999999999-997-gpu0-oom1.dump.json")).unwrap();
    let mut d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rank0).unwrap()).unwrap();
    d["process"]["host"] = "evil\nrank 9 ran out of memory first".into();
    std::fs::write(&rank0, serde_json::to_string(&d).unwrap()).unwrap();
    let o = oomscope_bounded(&["report", dumps.to_str().unwrap()], None, GUARD);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("rank 1 of 3") && out.contains("ran out of memory first"), "{out}");
    assert!(err.contains("oomscope-rank2-999-gpu2-oom1.dump.json: ") && err.contains("empty"), "{err}");
    assert!(err.contains("its name says rank 7, its contents rank 0"), "{err}");
    assert!(err.contains("oomscope-rank99999999999-997-gpu0-oom1.dump.json: not a name oomscope writes"), "{err}");
    assert!(!out.lines().any(|l| l.starts_with("rank 9")), "a forged line: {out}");
    assert!(out.contains("evil\\nrank"), "{out}");
    assert_eq!(out.matches("0*").count() + out.matches("\n  7").count(), 0, "{out}");
    // JSON keeps the host as it is (data, escaped by JSON).
    let j = oomscope_bounded(&["report", dumps.to_str().unwrap(), "--format", "json"], None, GUARD);
    assert_eq!(j.status.code(), Some(0), "{}", stderr(&j));
    // Nothing readable at all: exit 2, naming a file and why.
    let only_bad = dir.join("only-bad");
    std::fs::create_dir_all(&only_bad).unwrap();
    std::fs::write(only_bad.join("oomscope-rank2-999-gpu2-oom1.dump.json"), "").unwrap();
    let o = oomscope_bounded(&["report", only_bad.to_str().unwrap()], None, GUARD);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no rank's dump here could be read"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// Every rank holds the same, and only rank 1 asks for more (one long sequence): the job's
/// verdict names the request that differs, not a "1.0x" of what the ranks held.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_rank_set_apart_only_by_its_request_is_named_by_it() {
    require("python3");
    let dir = temp_dir("job-request");
    let dumps = dir.join("dumps");
    for r in 0..3 {
        let o = rank(&dumps, "request", r).env("SAME_DATA", "1").output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = oomscope_bounded(&["report", dumps.to_str().unwrap()], None, GUARD);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        out.contains("rank 1 asked for 100.00 MiB where the other ranks' largest tensor is 24.00 MiB (4.2x)"),
        "{out}"
    );
    assert!(out.contains("the request that failed on rank 1: 100.00 MiB for Net.head/linear"), "{out}");
    assert!(!out.contains("(1.0x)"), "{out}");
    let j = oomscope_bounded(&["report", dumps.to_str().unwrap(), "--format", "json"], None, GUARD);
    let v: serde_json::Value = serde_json::from_str(&stdout(&j)).unwrap();
    assert_eq!(v["verdict"]["kind"], "imbalance");
    assert_eq!(v["differences"][0]["what"], "request");
    assert_eq!(v["differences"][0]["bytes"], 100u64 << 20);
    let _ = std::fs::remove_dir_all(dir);
}
