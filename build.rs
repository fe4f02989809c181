//! Finds what some integration tests need beyond Rust — python3, tmux, a Python with
//! PyTorch, one with TensorFlow, the real data in `../shared` — and marks each such test `#[ignore]` with the
//! reason where it is missing, so `cargo test` reports it as skipped instead of passing it.
//! Under CI (`CI` set) nothing is ignored: a missing tool fails its tests.
//!
//! Sets `cfg(oomscope_missing = "<what>")`; a test says
//! `#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux ...")]`.

use std::path::{Path, PathBuf};

/// What the tests may need.
const NEEDS: [&str; 5] = ["python3", "tmux", "torch", "tensorflow", "shared"];

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(oomscope_missing, values(\"python3\", \"tmux\", \"torch\", \"tensorflow\", \"shared\"))"
    );
    for var in ["CI", "PATH", "OOMSCOPE_TEST_PYTHON", "OOMSCOPE_TEST_TF_PYTHON"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    // Installing a tool changes these directories: look again then.
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        if Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
    let shared = Path::new("../shared");
    if shared.is_dir() {
        println!("cargo::rerun-if-changed=../shared");
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        return;
    }
    for need in NEEDS {
        let present = match need {
            "python3" | "tmux" => on_path(need).is_some(),
            // A Python with PyTorch is named, not searched for: importing torch takes seconds.
            "torch" => std::env::var_os("OOMSCOPE_TEST_PYTHON").is_some_and(|v| !v.is_empty()),
            "tensorflow" => std::env::var_os("OOMSCOPE_TEST_TF_PYTHON").is_some_and(|v| !v.is_empty()),
            _ => shared.join("data/torch-snapshots").is_dir() && shared.join("reference/tf-bfc.md").is_file(),
        };
        if !present {
            println!("cargo::rustc-cfg=oomscope_missing=\"{need}\"");
        }
    }
}
