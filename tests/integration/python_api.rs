//! The Python API from the checkout (`python/oomscope`, the command and library named by
//! `OOMSCOPE_BIN` and `OOMSCOPE_LIB`), with PyTorch on the CPU: keywords it cannot honour
//! refused with a `ValueError` naming them, any path `load()` is given read as a file, and
//! the report `install()` prints at each OOM that OOM's own, past the dump cap too.

use crate::common::{library, root, temp_dir, torch_python};
use std::process::{Command, Stdio};

#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs OOMSCOPE_TEST_PYTHON, a Python with PyTorch (.ci/run installs one)"
)]
fn the_api_refuses_what_it_cannot_honour_and_reports_each_oom_as_its_own() {
    let dir = temp_dir("python-api");
    let o = Command::new(torch_python())
        .arg(root().join("tests/python/install_api.py"))
        .arg(root().join("tests/golden/tf-reference.dump.json"))
        .env("PYTHONPATH", root().join("python"))
        .env("OOMSCOPE_BIN", env!("CARGO_BIN_EXE_oomscope"))
        .env("OOMSCOPE_LIB", library())
        .env("OMP_NUM_THREADS", "1")
        .env_remove("OOMSCOPE_DUMP_DIR")
        .env_remove("OOMSCOPE_MAX_DUMPS")
        .current_dir(&dir)
        // An open pipe that never ends: load("-") must not read it.
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("=== done: 0 failed"), "{err}");
    // Each OOM's report is its own: the first five name their dump and request; later ones
    // (no dump: OOMSCOPE_MAX_DUMPS=5) say so instead of showing an earlier OOM's.
    let sizes =
        ["800.00 MiB", "1000.00 MiB", "1.95 GiB", "600.00 MiB", "700.00 MiB", "800.00 MiB", "1000.00 MiB", "1.95 GiB"];
    for (i, size) in sizes.iter().enumerate() {
        let n = i + 1;
        let start = err.find(&format!("=== OOM {n}:")).unwrap_or_else(|| panic!("OOM {n}: {err}"));
        let section = &err[start..];
        let section = &section[..section[1..].find("===").map_or(section.len(), |e| e + 1)];
        if n <= 5 {
            assert!(section.contains(&format!("Tried to allocate {size}")), "OOM {n}: {section}");
            assert!(section.contains(&format!("-oom{n}.dump.json)")), "OOM {n}: {section}");
        } else {
            assert!(section.contains(&format!("this OOM got no dump, so no report (OOM #{n}")), "OOM {n}: {section}");
            assert!(!section.contains("Tried to allocate"), "OOM {n} shows another OOM's report: {section}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
