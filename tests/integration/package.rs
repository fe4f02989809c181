//! The Python package as a user installs it: the wheel `.ci/run` builds (`pip wheel .`),
//! named by `OOMSCOPE_TEST_WHEEL`, installed into a fresh virtual environment in a directory
//! away from the checkout (PyTorch comes from the test Python's environment, through a `.pth`
//! file). Then the command on the environment's PATH, `python -m oomscope`, `oomscope run`
//! around an emulated PyTorch program, `oomscope.install()` inside a Python process, and a
//! notebook executed headlessly whose cell shows the report.

use crate::common::{temp_dir, torch_python};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn wheel() -> PathBuf {
    let w = std::env::var_os("OOMSCOPE_TEST_WHEEL")
        .unwrap_or_else(|| panic!("set OOMSCOPE_TEST_WHEEL to a wheel built by `pip wheel .` (.ci/run builds one)"));
    let w = PathBuf::from(w);
    assert!(w.is_file(), "OOMSCOPE_TEST_WHEEL={} is not a file", w.display());
    w
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A command in the fresh environment, run from `cwd`, with none of the checkout's or a
/// run's settings.
fn fresh(env: &Path, cwd: &Path, program: &str, args: &[&str]) -> Output {
    let mut c = Command::new(env.join("bin").join(program));
    c.args(args).current_dir(cwd).env_remove("PYTHONPATH");
    for (k, _) in std::env::vars() {
        if k.starts_with("OOMSCOPE_") {
            c.env_remove(k);
        }
    }
    c.env("OMP_NUM_THREADS", "1").output().unwrap()
}

#[test]
#[cfg_attr(
    any(oomscope_missing = "wheel", oomscope_missing = "torch"),
    ignore = "needs OOMSCOPE_TEST_WHEEL (a wheel built by `pip wheel .`) and OOMSCOPE_TEST_PYTHON (a Python with PyTorch); .ci/run makes both"
)]
fn the_wheel_installs_the_command_the_library_and_the_python_api() {
    let wheel = wheel();
    let py = torch_python();
    let dir = temp_dir("package");
    let env = dir.join("venv");
    // A fresh environment; PyTorch (and nbclient) from the test Python's, the checkout nowhere.
    let o = Command::new("python3").args(["-m", "venv"]).arg(&env).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let site = |python: &Path| {
        let o = Command::new(python).args(["-c", "import site; print(site.getsitepackages()[0])"]).output().unwrap();
        PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
    };
    std::fs::write(
        site(&env.join("bin/python")).join("test-torch.pth"),
        format!("{}\n", site(Path::new(&py)).display()),
    )
    .unwrap();
    let o = fresh(&env, &dir, "pip", &["install", "-q", "--no-index", wheel.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();

    // The command on the environment's PATH, and `python -m oomscope`.
    let o = fresh(&env, &work, "oomscope", &["--version"]);
    assert!(o.status.success() && text(&o).starts_with("oomscope 0.1.0"), "{}", text(&o));
    let o = fresh(&env, &work, "python", &["-m", "oomscope", "demo", "--format", "summary"]);
    assert!(text(&o).contains("Verdict: true peak"), "{}", text(&o));
    // Nothing in it refers to the checkout.
    let installed = site(&env.join("bin/python")).join("oomscope");
    for f in std::fs::read_dir(&installed).unwrap().flatten() {
        if f.path().extension().is_some_and(|x| x == "py") {
            let t = std::fs::read_to_string(f.path()).unwrap();
            assert!(!t.contains(crate::common::root().to_str().unwrap()), "{}", f.path().display());
        }
    }

    // `oomscope run` finds its library inside the package, around an emulated PyTorch program.
    let program = work.join("train.py");
    std::fs::write(
        &program,
        "import torch\nmodel = torch.nn.Linear(1024, 1024)\ntry:\n    model(torch.randn(100000, 1024))\n\
         except torch.cuda.OutOfMemoryError as e:\n    print('caught:', str(e)[:40])\n",
    )
    .unwrap();
    let mut run = Command::new(env.join("bin/oomscope"));
    run.args(["run", "--device", "sim:256MiB", "--dump-dir", "run-dumps", "--"])
        .arg(env.join("bin/python"))
        .arg(&program)
        .current_dir(&work)
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .env("OMP_NUM_THREADS", "1")
        .env_remove("OOMSCOPE_LIB")
        .env_remove("PYTHONPATH");
    let o = run.output().unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("caught: CUDA out of memory. Tried to allocate"), "{t}");
    assert!(t.contains("Verdict: one tensor too large"), "{t}");
    assert_eq!(std::fs::read_dir(work.join("run-dumps")).unwrap().count(), 1, "{t}");

    // oomscope.install() in a process that runs already: PyTorch's own error, the dump, the
    // verdict as data; called too late, a refusal that says what to do.
    let script = work.join("inside.py");
    std::fs::write(
        &script,
        r#"import os, oomscope, torch
oomscope.install(device="sim:64MiB", dump_dir="inside-dumps", emulate=True)
model = torch.nn.Linear(1024, 1024)
model(torch.randn(16, 1024))
now = oomscope.report()
assert now.kind == "fits" and "Linear/weight" in now.text, now.text
try:
    model(torch.randn(20000, 1024))
    raise SystemExit("no OOM")
except torch.cuda.OutOfMemoryError as e:
    assert str(e).startswith("CUDA out of memory. Tried to allocate 80.00 MiB"), e
dumps = sorted(os.listdir("inside-dumps"))
r = oomscope.load(os.path.join("inside-dumps", dumps[0]))
print("verdict", r.kind, r.requested, dict(r.breakdown)["weight"])
try:
    oomscope.install()
except RuntimeError as e:
    print("again:", e)
try:
    oomscope.load(__file__)
except ValueError as e:
    print("not an input:", str(e)[:60])
"#,
    )
    .unwrap();
    let o = fresh(&env, &work, "python", &[script.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("verdict single_tensor 81920000 4198400"), "{t}");
    assert!(t.contains("again: oomscope.install() was called already"), "{t}");
    assert!(t.contains("Verdict: one tensor too large"), "the report at the OOM: {t}");
    // Too late: this torch has no CUDA, so the check is shown with a stand-in that says it
    // was initialized.
    let late = work.join("late.py");
    std::fs::write(
        &late,
        "import types, sys\ntorch = types.ModuleType('torch')\ntorch.cuda = types.SimpleNamespace(is_initialized=lambda: True)\n\
         sys.modules['torch'] = torch\nimport oomscope\ntry:\n    oomscope.install()\nexcept RuntimeError as e:\n    print(e)\n",
    )
    .unwrap();
    let o = fresh(&env, &work, "python", &[late.to_str().unwrap()]);
    assert!(text(&o).contains("comes too late") && text(&o).contains("Restart the kernel"), "{}", text(&o));

    // A notebook executed headlessly: the OOM's report in the cell's output.
    let nb = work.join("run_notebook.py");
    std::fs::write(
        &nb,
        r#"import nbformat
from nbclient import NotebookClient
cells = [
    "%load_ext oomscope\nimport oomscope\noomscope.install(device='sim:64MiB', dump_dir='nb-dumps', emulate=True)",
    "import torch\nmodel = torch.nn.Linear(1024, 1024)\nmodel(torch.randn(16, 1024))\nmodel(torch.randn(20000, 1024))",
    "%oomscope",
]
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
NotebookClient(nb, kernel_name="python3", timeout=180, allow_errors=True).execute()
nbformat.write(nb, "executed.ipynb")
"#,
    )
    .unwrap();
    let o = fresh(&env, &work, "python", &[nb.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let executed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("executed.ipynb")).unwrap()).unwrap();
    let outputs = |i: usize| executed["cells"][i]["outputs"].as_array().unwrap().clone();
    // A stream's text is a string, or its lines.
    let streamed = |outs: &[serde_json::Value]| -> String {
        outs.iter()
            .map(|o| match &o["text"] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(lines) => lines.iter().filter_map(|l| l.as_str()).collect(),
                _ => String::new(),
            })
            .collect()
    };
    let oom = outputs(1);
    assert!(streamed(&oom).contains("Verdict: one tensor too large"), "{oom:?}");
    assert!(oom.iter().any(|o| o["ename"] == "OutOfMemoryError"), "PyTorch's own error: {oom:?}");
    let magic = streamed(&outputs(2));
    assert!(magic.contains("Linear/weight"), "%oomscope: {magic}");
    std::fs::remove_dir_all(dir).unwrap();
}
