//! `oomscope fit [--device CARD|SIZE] -- CMD ... {batch} ...`: flags in, the answer out
//! (`oomscope_fit` does the work).

use super::args::{FitArgs, FitFormat};
use super::{CliError, output};
use oomscope_core::device::cuda;
use oomscope_fit::{Launch, Progress, Request, RunDir};
use oomscope_format::fit::FitDevice;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The CUDA context's memory, outside any allocator: 552 402 944 bytes with PyTorch 2.11 and
/// CUDA 13.0 on an H200 (`docs/performance.md`).
const CUDA_CONTEXT: u64 = 552_402_944;

pub fn run(a: FitArgs) -> Result<u8, CliError> {
    if let Some(input) = &a.input {
        return Err(CliError(format!("give either a workload or trace ({input}) or a command after --, not both")));
    }
    let on_gpu = a.device.is_none() && cuda::driver_present();
    let (name, total) = match &a.device {
        Some(d) => (d.model.clone(), d.total),
        None if on_gpu => ("the GPU here".to_string(), 0),
        None => {
            return Err(CliError(
                "no GPU here: name the one to fit on with --device (a card: h100, a100-80, rtx-4090; or a size: \
                 24GiB); the program then runs emulated on this CPU"
                    .into(),
            ));
        }
    };
    let settings = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_default();
    let torch = oomscope_core::caching::Settings::parse(&settings)
        .map_err(|e| CliError(format!("PYTORCH_CUDA_ALLOC_CONF={settings}: {} (PyTorch would refuse it too)", e.0)))?;
    let mut probes = a.probes.clone();
    probes.sort_unstable();
    probes.dedup();
    if probes.len() < 2 || probes[0] == 0 {
        return Err(CliError("--probes: give at least two different batches of 1 or more (2,4,6)".into()));
    }
    let bin = std::env::current_exe().map_err(|e| CliError(format!("cannot find this program's path: {e}")))?;
    let arch = a.device.as_ref().and_then(|d| d.arch).unwrap_or(oomscope_core::device::DEFAULT_ARCH);
    let launch = Launch {
        bin,
        command: a.command.clone(),
        on_gpu,
        steps: a.steps,
        timeout: Duration::from_secs(a.timeout),
        arch,
    };
    let dir = RunDir::new()?;
    oomscope_fit::probe::end_runs_with_us();
    let mut device = FitDevice {
        name,
        total,
        // A named card emulated here: its CUDA context, which no allocator counts (what
        // PyTorch 2.11 with CUDA 13 held on an H200 before its first allocation).
        others: a.others.unwrap_or(if a.device.as_ref().is_some_and(|d| d.arch.is_some()) && !on_gpu {
            CUDA_CONTEXT
        } else {
            0
        }),
        capacity: 0,
        settings,
        probes_on: if on_gpu { "gpu" } else { "cpu" },
    };
    if on_gpu {
        // The GPU's own figures come with the first probe (`oomscope_fit`); until then,
        // none the probes use.
        device.total = u64::MAX / 4;
        device.name = "the GPU here".into();
    }
    if device.others >= device.total {
        return Err(CliError("--others leaves nothing of the device".into()));
    }
    device.capacity = a.limit.unwrap_or(u64::MAX).min(device.total - device.others);
    let r = Request {
        launch,
        device,
        torch,
        probes,
        max_batch: a.max_batch.unwrap_or(1 << 20),
        batch: a.batch,
        check: !a.no_check,
        dir: dir.path().to_path_buf(),
        tensorflow: false,
    };
    let command = a.command.join(" ");
    let mut progress = progress_line();
    if !r.launch.has_batch() {
        let p = kept_on_error(oomscope_fit::predict(&r, &mut progress), dir)?;
        let text = match a.format {
            FitFormat::Json => serde_json::to_string(&p).unwrap_or_default() + "\n",
            FitFormat::Text => oomscope_report::fit::prediction(&p, &command),
        };
        output::print(&text)?;
        return Ok(if p.fits { 0 } else { 1 });
    }
    let f = kept_on_error(oomscope_fit::fit(&r, &mut progress), dir)?;
    let text = match a.format {
        FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
        FitFormat::Text => oomscope_report::fit::command(&f, &command),
    };
    output::print(&text)?;
    // A run refuted the replay: no answer, as for a program that cannot be probed.
    Ok(if f.contradicted.is_some() {
        2
    } else if f.largest_batch.is_some() {
        0
    } else {
        1
    })
}

/// The runs' directory is removed when fit is done, and kept when its error names a run's
/// whole output there.
fn kept_on_error<T>(r: Result<T, oomscope_base::Problem>, dir: RunDir) -> Result<T, CliError> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => {
            if e.0.contains(&*dir.path().to_string_lossy()) {
                dir.keep();
            }
            Err(e.into())
        }
    }
}

/// Progress on stderr, on a terminal only.
fn progress_line() -> impl FnMut(Progress) {
    let on = std::io::stderr().is_terminal();
    move |p| {
        if !on {
            return;
        }
        let mut e = std::io::stderr().lock();
        let _ = match p {
            Progress::Run { what, batch, n, of } => write!(
                e,
                "oomscope fit: {what} {n} of {of}{} ...",
                batch.map_or(String::new(), |b| format!(", batch {b}"))
            ),
            Progress::Ran { seconds } if seconds > 0.0 => writeln!(e, " {seconds:.1} s"),
            Progress::Ran { .. } => writeln!(e, " done"),
            Progress::Replaying => writeln!(e, "oomscope fit: replaying"),
        };
    }
}
