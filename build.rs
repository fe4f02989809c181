//! Names the build for `--version`: the version, and the commit and its date when built
//! from a git checkout (`oomscope 0.1.0 (abc1234 2026-11-23)`), the version alone otherwise.
//!
//! Finds what some integration tests need beyond Rust — python3, tmux, chromium, a Python
//! with PyTorch, one with TensorFlow, the package's wheel, the real data in `../shared` — and marks each such test `#[ignore]` with the
//! reason where it is missing, so `cargo test` reports it as skipped instead of passing it.
//! Under CI (`CI` set) nothing is ignored: a missing tool fails its tests.
//!
//! Sets `cfg(oomscope_missing = "<what>")`; a test says
//! `#[cfg_attr(oomscope_missing = "tmux", ignore = "needs tmux ...")]`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the tests may need.
const NEEDS: [&str; 9] =
    ["python3", "tmux", "chromium", "torch", "transformers", "trainers", "tensorflow", "wheel", "shared"];

/// Whether `python` finds these modules, without importing them (that takes seconds).
fn finds(python: &std::ffi::OsStr, modules: &[&str]) -> bool {
    let check =
        format!("import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in {modules:?}))");
    Command::new(python).args(["-c", &check]).status().is_ok_and(|s| s.success())
}

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// The version `--version` prints. Only this tree's own `.git` counts: a copy of the source
/// inside another repository (a vendored crate) must not take that repository's commit.
fn version() -> String {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    if !root.join(".git").exists() {
        return version;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(&root).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    // No git, or a repository git refuses (another user's): the version alone.
    let Some(commit) = git(&["log", "-1", "--date=short", "--format=%h %cd"]) else {
        return version;
    };
    // Build again when HEAD moves: a checkout changes HEAD, a commit the branch it names
    // (a loose ref, or packed-refs). A path that does not exist would rerun every build.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]).map(|p| root.join(p)).filter(|p| p.exists()) {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    }
    format!("{version} ({commit})")
}

fn main() {
    println!("cargo::rustc-env=OOMSCOPE_VERSION={}", version());
    println!(
        "cargo::rustc-check-cfg=cfg(oomscope_missing, values(\"python3\", \"tmux\", \"chromium\", \"torch\", \"transformers\", \"trainers\", \"tensorflow\", \"wheel\", \"shared\"))"
    );
    for var in ["CI", "PATH", "OOMSCOPE_TEST_PYTHON", "OOMSCOPE_TEST_TF_PYTHON", "OOMSCOPE_TEST_WHEEL"] {
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
            "python3" | "tmux" | "chromium" => on_path(need).is_some(),
            // A Python with PyTorch is named, not searched for: importing torch takes seconds.
            "torch" => std::env::var_os("OOMSCOPE_TEST_PYTHON").is_some_and(|v| !v.is_empty()),
            "transformers" => std::env::var_os("OOMSCOPE_TEST_PYTHON")
                .filter(|v| !v.is_empty())
                .is_some_and(|py| finds(&py, &["transformers"])),
            // The trainers' tests: Hugging Face's, PEFT, accelerate, Lightning.
            "trainers" => std::env::var_os("OOMSCOPE_TEST_PYTHON")
                .filter(|v| !v.is_empty())
                .is_some_and(|py| finds(&py, &["transformers", "peft", "accelerate", "pytorch_lightning"])),
            "tensorflow" => std::env::var_os("OOMSCOPE_TEST_TF_PYTHON").is_some_and(|v| !v.is_empty()),
            "wheel" => std::env::var_os("OOMSCOPE_TEST_WHEEL").is_some_and(|v| !v.is_empty()),
            _ => shared.join("data/torch-snapshots").is_dir() && shared.join("reference/tf-bfc.md").is_file(),
        };
        if !present {
            println!("cargo::rustc-cfg=oomscope_missing=\"{need}\"");
        }
    }
}
