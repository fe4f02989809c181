//! `liboomscope.so` without a GPU: its C ABI driven from Python's ctypes on the simulated
//! device, its C++ exception caught by a C++ caller, `oomscope run` wrapping Python programs
//! (output, exit codes, reports, dumps, child processes, the sitecustomize chain, the torch
//! hook against a stand-in torch), and, where PyTorch is installed, a real training loop.

use crate::common::{files_in, library, require, root, temp_dir, torch_python};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `python3` (the test fails when it cannot run; `.ci/run` installs it).
fn python() -> &'static str {
    require("python3");
    "python3"
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn tests_python() -> PathBuf {
    root().join("tests/python")
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn ctypes_drives_the_c_abi_on_the_simulated_device() {
    let py = python();
    let dir = temp_dir("abi-ctypes");
    // A blank in the path: the command the library suggests must still be typeable.
    let dumps = dir.join("my dumps");
    let o = Command::new(py)
        .arg(tests_python().join("abi_basic.py"))
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_ALLOCATOR", "bfc")
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_DUMP_DIR", &dumps)
        .env("TEST_OUT", &dir)
        .env("PYTHONPATH", tests_python())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "the script's checks failed:\n{out}\n{err}");
    assert!(out.contains("every check holds"), "{out}");
    // At the OOM: TF's report with the ranked nodes and the verdict, once, on stderr.
    assert_eq!(err.matches("Current usage from device").count(), 1, "{err}");
    assert!(err.contains("64.00MiB from model/layer1"), "{err}");
    assert!(err.contains("Verdict: one tensor too large"), "{err}");
    assert!(err.contains("oomscope: dump written to"), "{err}");
    let suggested = err.lines().find_map(|l| l.trim().strip_prefix("look inside: oomscope tui ")).expect("a command");
    assert!(suggested.starts_with('\'') && suggested.ends_with('\'') && suggested.contains("my dumps/"), "{err}");
    // Garbage in: warnings, at most five of a kind.
    assert!(err.contains("not an allocation of this allocator (double free?): ignored"), "{err}");
    assert!(err.contains("where nothing was allocated"), "{err}");
    assert!(err.contains("oomscope_scope_push: NULL instead of a string"), "{err}");
    assert!(err.contains("oomscope_scope_pop with no scope pushed"), "{err}");
    assert!(err.contains("more than one CUDA stream"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    assert_eq!(files_in(&dumps).len(), 1, "one OOM, one dump");
    assert!(dir.join("no/such/dir/x.json").is_file());
    std::fs::remove_dir_all(dir).unwrap();
}

/// `oomscope_dump(NULL)` writes into the dump directory and stays within its limit, as the
/// dumps at an OOM or at exit do; a memory fraction set for a device not used yet opens no
/// device (no empty allocator in every dump) and applies once it is used.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn explicit_dumps_keep_the_directory_limit_and_fractions_open_no_device() {
    let py = python();
    let dir = temp_dir("abi-dump-limits");
    let dumps = dir.join("dumps");
    let o = Command::new(py)
        .arg(tests_python().join("abi_dump_limits.py"))
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_DUMP_DIR", &dumps)
        .env("OOMSCOPE_DUMP_DIR_LIMIT", "65536")
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env("PYTHONPATH", tests_python())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "the script's checks failed:\n{out}\n{err}");
    assert!(out.contains("every check holds"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A process that publishes its live feed forks (a DataLoader worker) and the child exits
/// normally: no panic in the child (it has no sampler thread to join), its exit status kept,
/// and the parent's socket left in place.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_forked_child_of_a_live_process_exits_cleanly() {
    use std::os::unix::fs::PermissionsExt;
    let py = python();
    let dir = temp_dir("abi-fork-live");
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = Command::new(py)
        .arg(tests_python().join("abi_fork_live.py"))
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_LIVE", "1")
        .env("OOMSCOPE_LIVE_DIR", &live)
        .env("OOMSCOPE_DUMP_DIR", dir.join("dumps"))
        .env("OOMSCOPE_DUMP_AT_EXIT", "1")
        .env("PYTHONPATH", tests_python())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.contains("child exit status 7"), "{out}");
    assert!(out.contains("parent sockets after the child's exit: 1"), "{out}");
    // One exit dump, the parent's: the child's copy of its state is not dumped again.
    assert_eq!(files_in(&dir.join("dumps")).len(), 1, "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The library's default allocator is PyTorch's caching allocator: PyTorch's figures, its
/// streams, empty_cache, the memory fraction and its OOM message; the settings a program puts
/// in PYTORCH_CUDA_ALLOC_CONF before its first allocation apply.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn the_c_abi_serves_with_pytorchs_caching_allocator_by_default() {
    let py = python();
    for conf in ["", "expandable_segments:False,garbage_collection_threshold:0.8"] {
        let dir = temp_dir("abi-caching");
        let dumps = dir.join("dumps");
        let o = Command::new(py)
            .arg(tests_python().join("abi_caching.py"))
            .env("OOMSCOPE_LIB", library())
            .env("OOMSCOPE_DEVICE", "sim:1GiB")
            .env("OOMSCOPE_DUMP_DIR", &dumps)
            .env("TEST_OUT", &dir)
            .env("TEST_CONF", conf)
            .env_remove("PYTORCH_ALLOC_CONF")
            .env("PYTHONPATH", tests_python())
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{conf}: the script's checks failed:\n{out}\n{err}");
        assert!(out.contains("every check holds"), "{out}");
        // The report at the OOM, in PyTorch's words, once.
        assert_eq!(err.matches("torch.OutOfMemoryError: CUDA out of memory.").count(), 1, "{err}");
        assert!(err.contains("PyTorch caching allocator on cuda:0"), "{err}");
        assert!(!err.contains("more than one CUDA stream"), "streams are the allocator's own: {err}");
        assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
    // Settings PyTorch refuses: every allocation fails with the reason.
    let o = Command::new(py)
        .args([
            "-c",
            "from oomscope_ctypes import lib, last_error\nprint(lib.oomscope_malloc(1024, 0, None), last_error())",
        ])
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:10")
        .env_remove("PYTORCH_ALLOC_CONF")
        .env("PYTHONPATH", tests_python())
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(out.starts_with("None PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:10"), "{out}");
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn a_bad_setting_fails_every_allocation_with_the_reason() {
    let py = python();
    let script = "from oomscope_ctypes import lib, last_error\n\
                  print(lib.oomscope_malloc(1024, 0, None), last_error())";
    let o = Command::new(py)
        .args(["-c", script])
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_LIMIT", "12GB")
        .env("PYTHONPATH", tests_python())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("None OOMSCOPE_LIMIT=12GB"), "{out}");
    assert_eq!(err.matches("OOMSCOPE_LIMIT=12GB").count(), 1, "said once on stderr: {err}");
}

/// Builds `tests/abi/SOURCE` with `compiler` (gcc and g++ build the library's C++ helper, so
/// they are installed) and runs it on the library, on a simulated device, quietly.
fn caller(dir: &Path, compiler: &str, source: &str, libs: &[&str]) -> Output {
    caller_with(dir, compiler, source, libs, &[])
}

/// `tests/abi/SOURCE` built with `compiler` into `dir`: the program's path.
fn built(dir: &Path, compiler: &str, source: &str, libs: &[&str]) -> PathBuf {
    let exe = dir.join(source.split('.').next().unwrap());
    let built = Command::new(compiler)
        .arg(root().join("tests/abi").join(source))
        .arg("-o")
        .arg(&exe)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("{compiler} runs: {e}"));
    assert!(built.status.success(), "{}", text(&built).1);
    exe
}

/// The libc10.so of PyTorch in `py`.
fn libc10(py: &str) -> String {
    let o = Command::new(py)
        .args(["-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libc10.so'))"])
        .output()
        .unwrap();
    let c10 = text(&o).0.trim().to_string();
    assert!(Path::new(&c10).is_file(), "{c10}: PyTorch's libc10.so");
    c10
}

/// [`caller`], the program given `args` after the library.
fn caller_with(dir: &Path, compiler: &str, source: &str, libs: &[&str], args: &[&str]) -> Output {
    Command::new(built(dir, compiler, source, libs))
        .arg(library())
        .args(args)
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_QUIET", "1")
        .env("OOMSCOPE_DUMP_DIR", dir.join("dumps"))
        .output()
        .unwrap()
}

/// PyTorch turns a C++ exception from the allocator into a Python RuntimeError; this is the
/// C++ side of that, checked with a C++ caller.
#[test]
fn torch_malloc_throws_a_runtime_error_with_pytorchs_words() {
    let dir = temp_dir("abi-cxx");
    let o = caller(&dir, "g++", "throw_check.cpp", &["-ldl"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // 1 TiB, as PyTorch's message prints it.
    assert!(
        out.contains("caught std::runtime_error: CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0"),
        "{out}"
    );
    assert!(out.contains("caught std::runtime_error: oomscope could not allocate: a negative size"), "{out}");
    assert!(err.contains("oomscope: OOM #1 on GPU 0"), "quiet: one line: {err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// With PyTorch's libc10 in the process (loaded locally, as Python loads it), an OOM is the
/// `c10::OutOfMemoryError` PyTorch's allocator throws: cuDNN's convolutions catch that type
/// and try an algorithm with a smaller workspace, where a `std::runtime_error` ended the run.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch (OOMSCOPE_TEST_PYTHON, or python3 with torch; .ci/run installs it)"
)]
fn torch_malloc_throws_pytorchs_out_of_memory_error_when_pytorch_is_loaded() {
    let py = torch_python();
    let c10 = libc10(&py);
    let dir = temp_dir("abi-c10");
    let o = caller_with(&dir, "g++", "throw_c10_check.cpp", &["-ldl"], &[&c10]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(
        out.matches("caught c10::OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0").count(),
        2,
        "{out}"
    );
    assert!(out.contains("caught std::runtime_error: oomscope could not allocate: a negative size"), "{out}");
    // In Python, which loads torch's libraries locally: the pieces are found once torch is
    // imported, and not before.
    let check = "import ctypes, sys\n\
                 lib = ctypes.CDLL(sys.argv[1])\n\
                 before = lib.oomscope_c10_oom_available()\n\
                 import torch\n\
                 print(before, lib.oomscope_c10_oom_available())\n";
    let o = Command::new(&py)
        .args(["-c", check])
        .arg(library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_QUIET", "1")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(out.trim(), "0 1", "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// An OOM in a convolution, with PyTorch's libc10 in the process, is not reported or dumped
/// at once: PyTorch's cuDNN code catches it and tries another algorithm (on an H200,
/// ResNet-50 went on past 34 such OOMs in a step and trained). A line says the first; the
/// thread's next allocation shows the program went on (told at exit); an error that reaches
/// the program (Python's hook says so) gets the report and the dump; one that was the
/// thread's last allocation is dumped at exit.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch (OOMSCOPE_TEST_PYTHON, or python3 with torch; .ci/run installs it)"
)]
fn an_oom_in_a_convolution_is_reported_whole_only_when_it_reaches_the_program() {
    let c10 = libc10(&torch_python());
    let dir = temp_dir("abi-conv-oom");
    let exe = built(&dir, "g++", "conv_oom_check.cpp", &["-ldl"]);
    let run = |how: &str| {
        let o = Command::new(&exe)
            .arg(library())
            .arg(&c10)
            .arg(how)
            .env("OOMSCOPE_DEVICE", "sim:1GiB")
            .env("OOMSCOPE_DUMP_DIR", dir.join(format!("dumps-{how}")))
            .env_remove("OOMSCOPE_QUIET")
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{how}: {out}\n{err}");
        err
    };
    let caught = run("caught");
    assert!(
        caught.contains("oomscope: an OOM in a convolution on GPU 0: ")
            && caught.contains("cuDNN tries another algorithm"),
        "{caught}"
    );
    assert!(!caught.contains("Verdict:"), "no report for an OOM the program went on past: {caught}");
    assert!(caught.contains("the program went on past 1 OOM(s) in convolutions"), "{caught}");
    let dumps = |how: &str| std::fs::read_dir(dir.join(format!("dumps-{how}"))).map_or(0, |d| d.count());
    assert_eq!(dumps("caught"), 0, "no dump either: {caught}");
    let escaped = run("escaped");
    assert_eq!(escaped.matches("Verdict:").count(), 1, "{escaped}");
    assert!(escaped.contains("ResNet.layer4.2.conv3"), "the report names the convolution: {escaped}");
    assert!(!escaped.contains("went on past"), "{escaped}");
    assert_eq!(dumps("escaped"), 1, "its dump: {escaped}");
    // Ended right after it, with nothing allocated since: dumped at exit, in case it ended
    // the program (one without Python's hook, a libtorch one).
    let last = run("last");
    assert!(last.contains("was its thread's last allocation, nothing allocated after it: dumped to"), "{last}");
    assert!(!last.contains("went on past") && !last.contains("Verdict:"), "{last}");
    assert_eq!(dumps("last"), 1, "{last}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn oomscope_run(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oomscope"));
    c.arg("run").args(args).current_dir(root());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A process that ran out of memory 16 times and ended with `os._exit` (no exit handler)
/// never prints its total; the run says it, from what the allocator told it at each OOM.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn run_says_how_many_ooms_a_process_had_when_it_could_not() {
    let py = python();
    let dir = temp_dir("abi-run-many");
    let dumps = dir.join("dumps");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--dump-dir"])
        .arg(&dumps)
        .args(["--", py])
        .arg(tests_python().join("run_many_ooms.py"))
        .env("PYTHONPATH", tests_python())
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("ran out of memory 16 times in all, 5 dumped (it ended without saying so)"), "{err}");
    assert_eq!(files_in(&dumps).len(), 5, "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn run_passes_output_and_exit_code_and_reports_each_processs_oom() {
    let py = python();
    let dir = temp_dir("abi-run");
    let dumps = dir.join("dumps");
    let user_site = tests_python().join("user_site");
    let pythonpath = std::env::join_paths([tests_python(), user_site]).unwrap();
    let run = |allocator: &[&str], expect: &str| {
        Command::new(env!("CARGO_BIN_EXE_oomscope"))
            .args(["run", "--device", "sim:1GiB", "--dump-dir"])
            .arg(&dumps)
            .args(allocator)
            .args(["--", py])
            .arg(tests_python().join("run_oom.py"))
            .env("PYTHONPATH", &pythonpath)
            .env("TEST_EXPECT", expect)
            .env_remove("PYTORCH_ALLOC_CONF")
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .current_dir(root())
            .output()
            .unwrap()
    };
    // By default, PyTorch's caching allocator and PyTorch's words.
    let o = run(&[], "CUDA out of memory. Tried to allocate 600.00 MiB. GPU 0 has a total capacity of 1024.00 MiB");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "the program's exit code:\n{out}\n{err}");
    // The program's output, untouched.
    assert_eq!(out.matches("program: stdout line\n").count(), 2, "parent and child: {out}");
    assert!(
        out.contains("program: caught the OOM in child") && out.contains("program: caught the OOM in parent"),
        "{out}"
    );
    assert_eq!(err.matches("program: stderr line\n").count(), 2, "{err}");
    // The user's sitecustomize still runs, in each Python process.
    assert_eq!(err.matches("user sitecustomize ran").count(), 2, "{err}");
    // Each process's first OOM: the whole report; then the dumps are listed.
    assert_eq!(err.matches("torch.OutOfMemoryError: CUDA out of memory.").count(), 2, "{err}");
    assert_eq!(err.matches("PyTorch caching allocator on cuda:0 (PYTORCH_CUDA_ALLOC_CONF: defaults)").count(), 2);
    assert!(err.contains("600.00 MiB in     1 blocks  child/Conv2D"), "{err}");
    assert!(err.contains("600.00 MiB in     1 blocks  parent/MatMul"), "{err}");
    assert!(err.contains("oomscope: 2 OOM dumps were written:"), "{err}");
    let written = files_in(&dumps);
    assert_eq!(written.len(), 2, "{written:?}");
    let pids: std::collections::HashSet<&str> = written.iter().map(|f| f.split('-').nth(1).unwrap()).collect();
    assert_eq!(pids.len(), 2, "one dump per process: {written:?}");
    for f in &written {
        let d = oomscope_format::read(&dumps.join(f)).unwrap();
        assert!(d.allocator.caching.is_some() && d.regions.iter().all(|r| r.pool.is_some()), "{f}");
    }
    std::fs::remove_dir_all(&dumps).unwrap();
    // --allocator bfc: TensorFlow's allocator and its words.
    let o = run(&["--allocator", "bfc"], "CUDA out of memory. Tried to allocate 600.00MiB (629145600 bytes)");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    assert_eq!(err.matches("Current usage from device").count(), 2, "{err}");
    assert!(err.contains("600.00MiB from child/Conv2D") && err.contains("600.00MiB from parent/MatMul"), "{err}");
    for f in files_in(&dumps) {
        assert!(oomscope_format::read(&dumps.join(&f)).unwrap().allocator.name.ends_with("_bfc"), "{f}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn the_torch_hook_installs_the_allocator_and_names_by_module_and_only_when_torch_is_imported() {
    let py = python();
    let dir = temp_dir("abi-fake-torch");
    let pythonpath = std::env::join_paths([tests_python().join("faketorch"), tests_python()]).unwrap();
    let run = |script: &str| {
        Command::new(env!("CARGO_BIN_EXE_oomscope"))
            .args(["run", "--device", "sim:1GiB", "--no-ops", "--dump-dir"])
            .arg(dir.join("dumps"))
            .args(["--", py])
            .arg(tests_python().join(script))
            .env("PYTHONPATH", &pythonpath)
            .env("OOMSCOPE_TORCH_STANDIN", "1")
            .env("TEST_OUT", &dir)
            .current_dir(root())
            .output()
            .unwrap()
    };
    let o = run("fake_torch_train.py");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("fake torch: every check holds"), "{out}");
    assert!(!err.contains("warning"), "{err}");
    let o = run("no_torch.py");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "library loaded: False", "the hook loads nothing until torch is imported");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_refuses_what_it_cannot_do_with_what_to_do() {
    let dir = temp_dir("abi-run-bad");
    let o = oomscope_run(&["--device", "sim:1GiB", "--", "/no/such/program"], &[]);
    assert_eq!(o.status.code(), Some(127), "as a shell exits for a missing command");
    assert!(text(&o).1.contains("/no/such/program: no such file"), "{}", text(&o).1);
    let o = oomscope_run(&["--device", "sim:lots", "--", "true"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--device sim:lots"), "{}", text(&o).1);
    let o = oomscope_run(&["--device", "sim:1GiB"], &[]);
    assert_eq!(o.status.code(), Some(2), "no command");
    let missing = dir.join("nothing.so");
    let o = oomscope_run(&["--device", "sim:1GiB", "--", "true"], &[("OOMSCOPE_LIB", &missing)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("OOMSCOPE_LIB=") && text(&o).1.contains("no such file"), "{}", text(&o).1);
    // A library that is not this oomscope's (an old build): refused, with what to do.
    let other = dir.join("libother.so");
    std::fs::write(dir.join("other.c"), "int unrelated(void) { return 1; }\n").unwrap();
    let built = Command::new("g++")
        .args(["-x", "c", "-shared", "-fPIC", "-o"])
        .arg(&other)
        .arg(dir.join("other.c"))
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built).1);
    let o = oomscope_run(&["--device", "sim:1GiB", "--", "true"], &[("OOMSCOPE_LIB", &other)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("is from another oomscope") && text(&o).1.contains("cargo build --release"),
        "{}",
        text(&o).1
    );
    if !oomscope_core::device::cuda::driver_present() {
        // No GPU to watch, but a TensorFlow or JAX program's own reports are still read:
        // the program runs, with one line saying so.
        let o = oomscope_run(&["--", "true"], &[]);
        assert_eq!(o.status.code(), Some(0));
        let err = text(&o).1;
        assert!(err.contains("no CUDA driver") && err.contains("--device sim:"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // A program that succeeds: exit 0, nothing added to its output but nothing.
    let o =
        oomscope_run(&["--device", "sim:1GiB", "--dump-dir", dir.join("d").to_str().unwrap(), "--", "echo", "hi"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o), ("hi\n".to_string(), String::new()), "silent when nothing ran out");
    std::fs::remove_dir_all(dir).unwrap();
}

/// With PyTorch installed (CPU is enough: `OOMSCOPE_TORCH_EMULATE` records CPU tensors as
/// if on the simulated GPU), a real training loop: forward and backward names by module
/// and op, the OOM as `torch.cuda.OutOfMemoryError`, and batch halving that recovers.
/// `OOMSCOPE_TEST_PYTHON` picks the interpreter (a virtualenv with torch).
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn a_real_pytorch_training_loop() {
    let py = torch_python();
    let dir = temp_dir("abi-torch");
    let dumps = dir.join("dumps");
    let train = |options: &[&str], dumps: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_oomscope"))
            .args(["run", "--device", "sim:128MiB"])
            .args(options)
            .arg("--dump-dir")
            .arg(dumps)
            .args(["--", &py])
            .arg(tests_python().join("torch_train.py"))
            .env("OOMSCOPE_TORCH_EMULATE", "1")
            .current_dir(root())
            .output()
            .unwrap()
    };
    let o = train(&[], &dumps);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("OOM at batch 8192; halving"), "{out}");
    let trained: Vec<u32> = out.lines().filter_map(|l| l.strip_prefix("trained at batch ")?.parse().ok()).collect();
    assert!(trained.len() == 2 && trained[0] == 256 && (256..8192).contains(&trained[1]), "recovered: {out}");
    // PyTorch's caching allocator, in PyTorch's words, names the request.
    assert!(err.contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"), "{err}");
    // Names by module and the torch function the program called (a function mode, which
    // changes nothing PyTorch allocates).
    assert!(err.contains(" bytes by Net.blocks.0.fc1/linear"), "forward names: {err}");
    let first = dumps.join(files_in(&dumps).into_iter().find(|f| f.contains("-oom1")).unwrap());
    let d = oomscope_format::read(&first).unwrap();
    let ops: Vec<&str> = d.events.iter().filter_map(|e| e.op.as_deref()).collect();
    // The backward pass by module and autograd node, from hooks on the nodes; a loss
    // computed outside the model by its node alone.
    assert!(ops.contains(&"Net.blocks.0.fc1/AddmmBackward0"), "backward names by module: {ops:?}");
    assert!(ops.contains(&"Net.blocks.0.act/GeluBackward0"), "{ops:?}");
    assert!(ops.contains(&"NllLossBackward0"), "{ops:?}");
    assert!(!ops.iter().any(|o| o.starts_with("backward/")), "no node named inside the caller's scope: {ops:?}");
    assert!(ops.contains(&"Adam/zeros_like"), "the optimizer's state: {ops:?}");

    // On request, aten ops through a dispatch mode.
    let o = train(&["--aten-ops"], &dir.join("aten"));
    let (out, err) = text(&o);
    assert!(o.status.success() && out.contains("OOM at batch 8192; halving"), "{out}\n{err}");
    assert!(err.contains(" bytes by Net.blocks.0.fc1/aten::addmm"), "aten names: {err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// In emulation, as through the pluggable allocator's hooks on a GPU: `empty_cache` and
/// `set_per_process_memory_fraction` act on oomscope's caching allocator.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn pytorchs_cache_calls_reach_the_caching_allocator() {
    let py = torch_python();
    let dir = temp_dir("abi-torch-cache");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:64MiB", "--no-ops", "--dump-dir"])
        .arg(dir.join("dumps"))
        .args(["--", &py])
        .arg(tests_python().join("torch_cache_calls.py"))
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .env("OOMSCOPE_QUIET", "1")
        .env("PYTHONPATH", tests_python())
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success() && out.contains("every check holds"), "{out}\n{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A thread-exit destructor (a pthread key's) runs after the thread's Rust thread-locals are
/// destroyed; every entry point called from there works or returns an error value, and the
/// host process lives on.
#[test]
fn the_c_abi_called_from_a_thread_exit_destructor_does_not_abort_the_process() {
    let dir = temp_dir("abi-thread-exit");
    let o = caller(&dir, "gcc", "thread_exit.c", &["-ldl", "-lpthread"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "the process died: {:?}\n{out}\n{err}", o.status);
    assert!(out.contains("destructor calls: 4"), "{out}");
    assert_eq!(out.matches("malloc in destructor: ok").count(), 4, "allocation still works: {out}");
    assert_eq!(out.matches("huge malloc in destructor: null").count(), 4, "{out}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A program that retries a failing allocation in a loop: the first OOMs are dumped, the
/// rest counted (the caller still gets each message), with a line now and then and a total
/// at exit; and nothing is written once the dump directory holds its limit.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn ooms_in_a_retry_loop_are_dumped_a_few_times_then_counted() {
    let py = python();
    let script = "import ctypes, os\n\
        lib = ctypes.CDLL(os.environ['OOMSCOPE_LIB'])\n\
        lib.oomscope_malloc.restype = ctypes.c_void_p\n\
        lib.oomscope_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]\n\
        lib.oomscope_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]\n\
        buf = ctypes.create_string_buffer(4096)\n\
        for i in range(300):\n\
        \x20   assert not lib.oomscope_malloc(1 << 40, 0, None)\n\
        \x20   lib.oomscope_last_error(buf, 4096)\n\
        \x20   assert b'CUDA out of memory' in buf.value, buf.value\n\
        print('last:', buf.value.decode())\n";
    let dir = temp_dir("abi-retry");
    let dumps = dir.join("dumps");
    let o = Command::new(py)
        .args(["-c", script])
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_DUMP_DIR", &dumps)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(files_in(&dumps).len(), 5, "the first five OOMs are dumped: {:?}", files_in(&dumps));
    assert!(out.contains("OOM #300, not dumped: OOMSCOPE_MAX_DUMPS=5"), "the caller's message says so: {out}");
    assert!(err.contains("OOM #5 was the last to get a dump (OOMSCOPE_MAX_DUMPS=5)"), "{err}");
    assert!(err.contains("1 more OOM(s) on GPU 0 (6 in all), not dumped"), "{err}");
    assert!(err.contains("oomscope: 300 OOMs in all, 5 dump(s) written"), "a total at exit: {err}");
    assert!(err.lines().count() < 120, "a line per OOM past the first ones is too many: {} lines", err.lines().count());

    // A dump directory at its limit: no more dumps, and the message says why.
    let o = Command::new(py)
        .args(["-c", script])
        .env("OOMSCOPE_LIB", library())
        .env("OOMSCOPE_DEVICE", "sim:1GiB")
        .env("OOMSCOPE_DUMP_DIR", &dumps)
        .env("OOMSCOPE_DUMP_DIR_LIMIT", "1KiB")
        .env("OOMSCOPE_QUIET", "1")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(files_in(&dumps).len(), 5, "nothing more is written: {:?}", files_in(&dumps));
    assert!(err.contains("already holds") && err.contains("OOMSCOPE_DUMP_DIR_LIMIT="), "{err}");
    assert!(err.contains("300 OOMs in all, 0 dump(s) written"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `oomscope run --dump-at-step --dump-at-exit` on a program that keeps 4 MiB more every
/// step: a dump when it marks step 2 and one when it exits, named so and listed at the end
/// with the `diff` to type (quoted: the directory has a space); a step never marked gets
/// none, which the end says, with why; `oomscope diff` of the two shows what grew, and the
/// exit dump's summary describes the peak (the activations of the last step), not the end.
#[test]
fn run_writes_dumps_at_the_steps_and_exit_asked_for_which_diff_compares() {
    let dir = temp_dir("abi-dump-at");
    let exe = dir.join("steps_leak");
    let built = Command::new("gcc")
        .arg(root().join("tests/abi/steps_leak.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("gcc runs: {e}"));
    assert!(built.status.success(), "{}", text(&built).1);
    let dumps = dir.join("my dumps");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--dump-at-step", "2,9", "--dump-at-exit", "--dump-dir"])
        .arg(&dumps)
        .arg("--")
        .arg(&exe)
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out, "trained 5 steps\n", "the program's output, untouched");
    let written = files_in(&dumps);
    assert_eq!(written.len(), 2, "step 2 and exit; step 9 never came: {written:?}");
    let step = written.iter().find(|f| f.ends_with("-gpu0-step00002.dump.json")).expect("the step's dump");
    let exit = written.iter().find(|f| f.ends_with("-gpu0-exit.dump.json")).expect("the exit dump");
    let (step, exit) = (dumps.join(step), dumps.join(exit));
    assert!(err.contains(&format!("oomscope: dump at step 2 written to {}", step.display())), "{err}");
    assert!(err.contains(&format!("oomscope: dump at exit written to {}", exit.display())), "{err}");
    assert!(err.contains("oomscope: 2 dumps were written at the steps and exit asked for:"), "{err}");
    assert!(
        err.contains(&format!("what grew between two: oomscope diff '{}' '{}'\n", step.display(), exit.display())),
        "{err}"
    );
    assert!(
        err.contains(
            "oomscope: no dump at step 9 (--dump-at-step): the program never marked it while it had memory on the GPU\n"
        ) && err.contains("a program driving the C ABI calls oomscope_step(N)"),
        "{err}"
    );
    assert!(!err.contains("step 2 (--dump-at-step)") && !err.contains("warning"), "{err}");
    let keep = |path: &Path| {
        let d = oomscope_format::read(path).unwrap();
        assert!(d.oom.is_none() && d.source.kind == oomscope_format::SourceKind::Run, "{}", path.display());
        let n = d.usage_by_node.iter().find(|n| n.op == "cache/keep").expect("cache/keep is live");
        (n.bytes, n.count)
    };
    assert_eq!(keep(&step), (8 << 20, 2), "at the mark of step 2, steps 0 and 1 kept theirs");
    assert_eq!(keep(&exit), (20 << 20, 5));
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope")).arg("diff").arg(&step).arg(&exit).output().unwrap();
    let (diff, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(diff.contains("live   24.00MiB -> 36.00MiB (+12.00MiB)"), "{diff}");
    assert!(diff.contains("+12.00MiB  cache/keep  (2 -> 5 allocations)"), "{diff}");
    // Nothing failed: the summary of the exit dump is about the peak.
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["report", "--format", "summary"])
        .arg(&exit)
        .output()
        .unwrap();
    let (summary, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        summary.contains("  peak             68.00MiB in use by 7 allocations at step 4, reached by model/forward\n"),
        "{summary}"
    );
    assert!(summary.contains("Live memory by node at the peak (68.00MiB in 3 nodes):"), "{summary}");
    assert!(summary.contains("32.00MiB   47.1%       1 x  model/forward"), "{summary}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_refuses_a_step_that_is_not_one() {
    for bad in ["x", "10,", "-3", "2.5"] {
        let o = oomscope_run(&["--device", "sim:1GiB", &format!("--dump-at-step={bad}"), "--", "true"], &[]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = text(&o).1;
        assert!(
            err.contains("--dump-at-step") && err.contains("is not a step; expected whole numbers from 0"),
            "{err}"
        );
    }
}

/// `oomscope run --dump-at-exit` on a Python program whose globals hold GPU memory until the
/// interpreter tears its modules down: the PyTorch hook (on the stand-in torch) writes the
/// exit dump from `atexit`, while they still hold it, once; `--dump-at-step 0` gets the
/// state before the first forward (the weights); a child process that imports torch and
/// never allocates writes nothing and says nothing; a step never marked is said at the end.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn the_exit_dump_of_a_python_program_is_taken_before_its_globals_are_freed() {
    let py = python();
    let dir = temp_dir("abi-exit-held");
    let dumps = dir.join("dumps");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--no-ops", "--dump-at-step", "0,2,7", "--dump-at-exit", "--dump-dir"])
        .arg(&dumps)
        .args(["--", py])
        .arg(tests_python().join("fake_torch_held.py"))
        .env("PYTHONPATH", std::env::join_paths([tests_python().join("faketorch"), tests_python()]).unwrap())
        .env("OOMSCOPE_TORCH_STANDIN", "1")
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out, "holding until exit\n");
    assert!(!err.contains("warning"), "nothing to warn of, in the parent or the child: {err}");
    let written = files_in(&dumps);
    assert_eq!(written.len(), 3, "steps 0 and 2 and exit, from the parent only: {written:?}");
    let find = |end: &str| dumps.join(written.iter().find(|f| f.ends_with(end)).unwrap_or_else(|| panic!("{end}")));
    let usage = |path: &Path| -> Vec<(String, u64, u64)> {
        let d = oomscope_format::read(path).unwrap();
        d.usage_by_node.into_iter().map(|n| (n.op, n.bytes, n.count)).collect()
    };
    let weights = ("model/weights".to_string(), 16 << 20, 1);
    assert_eq!(usage(&find("-step00000.dump.json")), vec![weights.clone()], "before the first forward");
    assert_eq!(
        usage(&find("-exit.dump.json")),
        vec![weights, ("cache/keep".to_string(), 12 << 20, 3)],
        "what the globals held at the program's end"
    );
    assert_eq!(err.matches("oomscope: dump at exit written to").count(), 1, "once: {err}");
    assert!(err.contains("oomscope: no dump at step 7 (--dump-at-step)"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// With PyTorch (emulated on the CPU): the dump at step 0 is taken at the first forward,
/// with the weights; the dump at exit holds the tensors a global keeps until the
/// interpreter frees it.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn a_pytorch_programs_exit_dump_holds_what_its_globals_held() {
    let py = torch_python();
    let dir = temp_dir("abi-torch-exit");
    let dumps = dir.join("dumps");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:256MiB", "--dump-at-step", "0", "--dump-at-exit", "--dump-dir"])
        .arg(&dumps)
        .args(["--", &py])
        .arg(tests_python().join("torch_exit_held.py"))
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success() && out == "holding until exit\n", "{out}\n{err}");
    assert!(!err.contains("warning"), "{err}");
    let written = files_in(&dumps);
    assert_eq!(written.len(), 2, "{written:?}");
    let read =
        |end: &str| oomscope_format::read(&dumps.join(written.iter().find(|f| f.ends_with(end)).expect(end))).unwrap();
    let step0 = read("-step00000.dump.json");
    // Linear(512, 512): a 1 MiB weight and a 2 KiB bias.
    assert!(step0.stats.bytes_in_use >= 1 << 20, "the weights: {:?}", step0.usage_by_node);
    let exit = read("-exit.dump.json");
    let zeros = exit.usage_by_node.iter().find(|n| n.op == "zeros").expect("the cache is live");
    assert_eq!((zeros.bytes, zeros.count), (4 << 20, 4), "{:?}", exit.usage_by_node);
    assert!(exit.stats.bytes_in_use >= (5 << 20), "the weights too: {:?}", exit.usage_by_node);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The library alone: a step asked for that is marked before anything is allocated is not
/// done (its next mark dumps it), and one never marked again is said at exit;
/// `oomscope_dump_at_exit` writes the exit dump once (the destructor then writes none), and
/// nothing in a process that never allocated.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn steps_marked_before_the_first_allocation_and_the_exit_dump_entry_point() {
    let py = python();
    let script = "from oomscope_ctypes import lib\n\
        assert lib.oomscope_dump_at_exit() == 0, 'nothing allocated'\n\
        lib.oomscope_step(1)\n\
        lib.oomscope_step(3)\n\
        p = lib.oomscope_malloc(8 << 20, 0, None)\n\
        lib.oomscope_step(3)\n\
        print('exit dump:', lib.oomscope_dump_at_exit(), lib.oomscope_dump_at_exit())\n\
        lib.oomscope_free(p, 0, 0, None)\n";
    let dir = temp_dir("abi-step-early");
    let dumps = dir.join("dumps");
    let run = |script: &str| {
        Command::new(py)
            .args(["-c", script])
            .env("OOMSCOPE_LIB", library())
            .env("OOMSCOPE_DEVICE", "sim:1GiB")
            .env("OOMSCOPE_DUMP_DIR", &dumps)
            .env("OOMSCOPE_DUMP_AT_STEPS", "1,3")
            .env("OOMSCOPE_DUMP_AT_EXIT", "1")
            .env("PYTHONPATH", tests_python())
            .output()
            .unwrap()
    };
    let o = run(script);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out, "exit dump: 1 0\n", "written by the first call only");
    let written = files_in(&dumps);
    assert_eq!(written.len(), 2, "{written:?}");
    assert!(written.iter().any(|f| f.ends_with("-gpu0-step00003.dump.json")), "{written:?}");
    let exit = dumps.join(written.iter().find(|f| f.ends_with("-gpu0-exit.dump.json")).expect("exit dump"));
    assert_eq!(oomscope_format::read(&exit).unwrap().stats.bytes_in_use, 8 << 20, "taken before the free");
    assert_eq!(err.matches("oomscope: dump at exit written to").count(), 1, "{err}");
    assert!(
        err.contains("oomscope: warning: no dump at step 1: it was marked before anything was allocated on a GPU"),
        "{err}"
    );
    assert!(!err.contains("step 3:"), "{err}");
    // Nothing allocated: no dump, not a word.
    std::fs::remove_dir_all(&dumps).unwrap();
    let o = run("from oomscope_ctypes import lib\nlib.oomscope_step(1)\nprint(lib.oomscope_dump_at_exit())\n");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!((out.as_str(), err.as_str()), ("0\n", ""));
    assert!(!dumps.exists() || files_in(&dumps).is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A script that profiles itself (`torch.cuda.max_memory_allocated()`,
/// `reset_peak_memory_stats()`, `synchronize()`, `memory._record_memory_history` and
/// `_dump_snapshot`) runs emulated, and the calls answer with the emulated device's figures:
/// a peak that a reset brings down to what is live, a snapshot PyTorch's tools read.
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn a_scripts_own_memory_calls_answer_with_the_emulated_devices_figures() {
    let py = torch_python();
    let dir = temp_dir("abi-cuda-calls");
    let snapshot = dir.join("snap.pickle");
    let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
        .args(["run", "--device", "sim:1GiB", "--dump-dir"])
        .arg(dir.join("dumps"))
        .args(["--", &py])
        .arg(tests_python().join("cuda_calls.py"))
        .arg(&snapshot)
        .env("OOMSCOPE_TORCH_EMULATE", "1")
        .env("OOMSCOPE_QUIET", "1")
        .current_dir(root())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let figures = |name: &str| -> Vec<u64> {
        let line = out.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {out}"));
        line.split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect()
    };
    let big = figures("after_big")[0];
    // Batch 512's activations (512 × 1024 floats, 2 MiB, and more) and the 65 MiB of cuBLAS
    // workspaces an H100 keeps.
    assert!(big > 65 << 20, "{out}");
    let reserved = figures("reserved");
    assert!(reserved[0] >= big && reserved[1] >= reserved[0], "{out}");
    let (peak, live) = (figures("after_reset")[0], figures("after_reset")[1]);
    assert_eq!(peak, live, "a reset brings the peak to what is live: {out}");
    let small = figures("after_small");
    assert!(small[0] >= small[1] && small[0] < big, "batch 8's peak is below batch 512's: {out}");
    assert!(figures("snapshot_segments")[0] > 0, "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A program that names CUDA itself (`.cuda()`, `device="cuda"`, `.to("cuda:0")`,
/// `torch.autocast("cuda")`, `torch.cuda.set_device`) runs emulated on a machine without CUDA
/// and allocates what the same program allocates where it picks its device: the same peaks,
/// bf16 autocast included (CUDA's autocast turned off would make float32 activations).
#[test]
#[cfg_attr(
    oomscope_missing = "torch",
    ignore = "needs PyTorch: set OOMSCOPE_TEST_PYTHON to a Python with torch (.ci/run makes one)"
)]
fn a_program_that_names_cuda_itself_runs_emulated_as_one_that_picks_its_device() {
    let py = torch_python();
    let peaks = |how: &str| -> (u64, u64) {
        let o = Command::new(env!("CARGO_BIN_EXE_oomscope"))
            .args(["run", "--device", "sim:1GiB", "--", &py])
            .arg(tests_python().join("cuda_named.py"))
            .arg(how)
            .env("OOMSCOPE_TORCH_EMULATE", "1")
            .env("OOMSCOPE_QUIET", "1")
            .env("OOMSCOPE_DUMP_AT_EXIT", "0")
            .current_dir(root())
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{how}: {out}\n{err}");
        let line = out.lines().find(|l| l.starts_with("peak ")).unwrap_or_else(|| panic!("{how}: {out}"));
        let v: Vec<u64> = line.split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect();
        (v[0], v[1])
    };
    let hard = peaks("hard");
    let portable = peaks("portable");
    // The weights alone: 2 × 512 × 2048 floats (8 MiB) and AdamW's two states of them.
    assert!(portable.0 > 24 << 20, "{portable:?}");
    assert_eq!(hard, portable, "(allocated, reserved) peaks: naming cuda against picking the device");
}

/// The emulation's rule for a reduction's staging buffer (`python/oomscope/_scratch.py`,
/// from `Reduce.cuh`'s `setReduceConfig`) gives the sizes an H100 allocated for the bias
/// gradients of a transformer (`fixtures/torch-snapshots/default.pickle`: `[tokens, width]`
/// summed over the tokens, fp32), staging and semaphores; and none for a few rows.
#[test]
#[cfg_attr(oomscope_missing = "python3", ignore = "needs python3, which is not installed (.ci/run installs it)")]
fn the_reduction_staging_rule_gives_the_h100s_sizes() {
    let script = "
from oomscope import _scratch as s
for rows, width in ((4096, 8000), (4096, 512), (4096, 2048), (4096, 1536), (3072, 512), (5120, 1536), (2048, 8000), (6, 1024)):
    print(rows, width, *s.reduce_scratch([rows, width], [width, 1], [0], 4, 132, 2048))
";
    let o = Command::new("python3").arg("-c").arg(script).env("PYTHONPATH", root().join("python")).output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let expected = "\
4096 8000 139264000 252
4096 512 16777216 16
4096 2048 67108864 64
4096 1536 50331648 48
3072 512 12582912 16
5120 1536 62914560 48
2048 8000 131072000 252
6 1024 0 0
";
    assert_eq!(out, expected);
}
