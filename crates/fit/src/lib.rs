//! `oomscope fit -- CMD ... {batch} ...`: what fits, from the user's own program.
//!
//! 1. **Probes.** The command runs under `oomscope run` at a few small batches (2, 4, 6 by
//!    default), each ended after `steps` optimizer steps (the optimizer's state is made at
//!    the first), on the GPU when there is one, else on the CPU with PyTorch's tensors
//!    counted as the simulated GPU's. Each run's allocator keeps every request on a tape.
//! 2. **The step as a function of the batch** ([`oomscope_replay::scaled`]): the tapes must
//!    hold the same requests; each size is fitted as `fixed + per_sample × batch`.
//! 3. **The answer, by replay**: the step replayed through the caching allocator at any
//!    batch, on the device fit answers for; the largest batch that fits by doubling and
//!    bisection over replays (monotone: a batch that fits is assumed to fit at every
//!    smaller one).
//! 4. **The check, by a run**: the command at the answer (and the next batch) on that
//!    device, when this machine can run it; what was measured is said as such.

pub mod probe;
pub mod tape;
pub mod tf;

use oomscope_base::Problem;
use oomscope_format::fit::{
    Accumulation, CommandFit, CommandPrediction, FailedRequest, FitDevice, FitRow, KindBytes, Needs, ProbeRow,
    SettingsFits, SettingsRow,
};
use oomscope_replay::Settings;
use oomscope_replay::scaled::{Probed, Scaled, ScaledRun, scale};
pub use probe::{Launch, RunOutcome, Target};
use std::path::{Path, PathBuf};

/// What `fit` is asked.
#[derive(Clone, Debug)]
pub struct Request {
    pub launch: Launch,
    /// The device answered for: its memory and name; others' memory on it; the limit.
    pub device: FitDevice,
    /// The caching allocator's settings of the answer (parsed from `device.settings`).
    pub torch: oomscope_core::caching::Settings,
    /// Probe batches, ascending (at least two).
    pub probes: Vec<u64>,
    pub max_batch: u64,
    /// The batch the user trains at.
    pub batch: Option<u64>,
    pub check: bool,
    /// Where runs keep their files (a private directory the caller removes).
    pub dir: PathBuf,
    /// Set by the probes: the program runs on TensorFlow (its BFC allocator is replayed).
    pub tensorflow: bool,
}

/// What fit is doing, for a progress line.
#[derive(Clone, Debug)]
pub enum Progress {
    Run { what: &'static str, batch: Option<u64>, n: usize, of: usize },
    Ran { seconds: f64 },
    Replaying,
}

/// Replay settings for the device of `r` under `torch` (PyTorch's caching allocator), or
/// TensorFlow's BFC allocator as TF sets it up: on the CPU (`TF_CPU_ALLOCATOR_USE_BFC`)
/// growing on demand up to its limit; on a GPU as `TF_FORCE_GPU_ALLOW_GROWTH` says.
fn settings(r: &Request, torch: &oomscope_core::caching::Settings) -> Settings {
    let mut o = oomscope_core::bfc::Options::new(r.device.capacity);
    o.history = 0;
    let allocator = if r.tensorflow {
        o.allow_growth = !r.launch.on_gpu
            || std::env::var("TF_FORCE_GPU_ALLOW_GROWTH").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if !r.launch.on_gpu {
            o.name = "bfc_cpu_allocator_for_gpu".into();
        }
        oomscope_replay::Allocator::Bfc
    } else {
        oomscope_replay::Allocator::Caching(Box::new(torch.clone()))
    };
    Settings {
        options: o,
        device_total: r.device.total,
        device_others: r.device.others,
        device_model: r.device.name.clone(),
        keep_going: false,
        allocator,
    }
}

/// One run's own requests as a step (every size as it was), for its peaks.
fn as_step(p: &Probed) -> Result<Scaled, Problem> {
    scale(&[p.clone(), Probed { batch: p.batch + 1, ..p.clone() }]).map_err(|m| Problem(m.to_string()))
}

/// Replay settings of a device larger than any step: what a batch needs.
fn unlimited(r: &Request) -> Settings {
    let mut s = settings(r, &r.torch);
    s.device_total = 1 << 56;
    s.device_others = 0;
    s.options.limit = 1 << 56;
    s
}

fn row(run: &ScaledRun, how: &'static str) -> FitRow {
    FitRow {
        batch: run.batch,
        fits: run.fits,
        peak_allocated: run.peak_allocated,
        peak_reserved: run.peak_reserved,
        how,
        failed: run.failed.as_ref().map(|(op, bytes)| FailedRequest { op: op.clone(), bytes: *bytes }),
    }
}

fn kinds(run: &ScaledRun) -> Vec<KindBytes> {
    run.by_kind.iter().map(|&(kind, bytes)| KindBytes { kind, bytes }).collect()
}

/// The largest batch in `1..=max` whose replay fits, and every replay made on the way.
pub fn largest(step: &Scaled, s: &Settings, max: u64, runs: &mut Vec<ScaledRun>) -> Option<u64> {
    let fits = |b: u64, runs: &mut Vec<ScaledRun>| replayed(step, s, b, runs).fits;
    if !fits(1, runs) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= max && fits(hi, runs) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let mut hi = hi.min(max.saturating_add(1));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid, runs) { lo = mid } else { hi = mid }
    }
    Some(lo)
}

/// The replay at `batch`, made once.
fn replayed<'a>(step: &Scaled, s: &Settings, batch: u64, runs: &'a mut Vec<ScaledRun>) -> &'a ScaledRun {
    match runs.iter().position(|x| x.batch == batch) {
        Some(i) => &runs[i],
        None => {
            runs.push(step.replay(batch, s));
            runs.last().expect("pushed")
        }
    }
}

/// On the GPU here: its memory, and what the allocator may have of it (what was free when
/// the first probe first allocated, or the limit), as that probe's allocator saw them.
fn on_this_gpu(r: &mut Request, out: &RunOutcome) {
    let (Some(d), true) = (out.result.devices.first(), r.launch.on_gpu) else { return };
    r.device.total = d.total;
    r.device.others = outside(d).max(r.device.others).min(d.total);
    r.device.capacity = r.device.capacity.min(d.total - r.device.others);
}

/// What a run found used beside its allocator: at its first allocation (the context, other
/// processes), or at its end, when more: cuDNN and cuBLAS load their kernels at their first
/// call (on an H200 with PyTorch 2.11, ResNet-50 held 0.74 GiB outside PyTorch's cache by
/// then, 0.51 GiB at its first allocation).
fn outside(d: &oomscope_format::fit::ProbeDevice) -> u64 {
    d.total.saturating_sub(d.free).max(d.outside_at_end)
}

/// Runs the probes and learns the step.
fn learn(r: &mut Request, progress: &mut dyn FnMut(Progress)) -> Result<(Scaled, Vec<ProbeRow>), Problem> {
    let mut probed: Vec<Probed> = Vec::new();
    let mut rows = Vec::new();
    for (i, &b) in r.probes.clone().iter().enumerate() {
        progress(Progress::Run { what: "probe", batch: Some(b), n: i + 1, of: r.probes.len() });
        let out = r.launch.run(Some(b), &Target::Unlimited, &r.dir.join(format!("probe-{b}")))?;
        progress(Progress::Ran { seconds: out.seconds });
        if i == 0 {
            on_this_gpu(r, &out);
        }
        let p = match &out.tf {
            Some(tf) => {
                r.tensorflow = true;
                tf.probed.clone()
            }
            None => tape::read(&out.tape, b)?,
        };
        rows.push(probe_row(&out, &p));
        probed.push(p);
    }
    let step = scale(&probed).map_err(|m| {
        Problem(format!(
            "the program's requests do not follow the batch: {m}. fit needs a step that makes the same \
             requests at every batch (data-dependent shapes, a batch read from elsewhere than {{batch}}, or \
             randomness in what is allocated break it)"
        ))
    })?;
    Ok((step, rows))
}

fn probe_row(out: &RunOutcome, p: &Probed) -> ProbeRow {
    let (peak_allocated, peak_reserved) = measured_peaks(out);
    ProbeRow {
        batch: out.batch.unwrap_or(0),
        seconds: (out.seconds * 100.0).round() / 100.0,
        requests: p.entries.len() as u64,
        peak_allocated,
        peak_reserved,
    }
}

/// Whether this machine can run the command at a batch whose step reserves `reserved`
/// bytes (emulated on the CPU, the memory is the host's); why not, when it cannot.
fn can_check(r: &Request, reserved: u64) -> Result<(), String> {
    if !r.check {
        return Err("--no-check".into());
    }
    if r.launch.on_gpu {
        return Ok(());
    }
    let available = host_available().unwrap_or(0);
    let needed = reserved + reserved / 4 + (1 << 30);
    if needed > available {
        return Err(format!(
            "a run there, emulated on this CPU, would need about {} of host memory and {} is available",
            oomscope_base::size::human(needed),
            oomscope_base::size::human(available)
        ));
    }
    Ok(())
}

fn host_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A check run at `batch` on the device: how long it took, and whether it trained its
/// steps without an OOM.
fn check(r: &Request, batch: Option<u64>, name: &str) -> Result<(f64, FitRow, String), Problem> {
    let out = r.launch.run(batch, &Target::Device { capacity: r.device.capacity }, &r.dir.join(name))?;
    let fits = trained(&out.result);
    let (peak_allocated, peak_reserved) = measured_peaks(&out);
    // The request that ended it: the first OOM that was no convolution's workspace.
    let failed = if fits {
        None
    } else {
        let f = &out.result.failed;
        f.iter().find(|x| !oomscope_replay::scaled::convolution(&x.op)).or(f.last()).cloned()
    };
    let row = FitRow { batch: batch.unwrap_or(0), fits, peak_allocated, peak_reserved, how: "measured", failed };
    Ok((out.seconds, row, out.output_tail))
}

/// Whether a check run trained: without an OOM, or on to its last step past OOMs of
/// convolutions only (the first ones listed: cuDNN trying algorithm after algorithm may make
/// many), whose workspaces cuDNN does without ([`oomscope_replay::scaled::convolution`]).
fn trained(r: &oomscope_format::fit::ProbeResult) -> bool {
    r.ooms == 0
        || (r.stopped && !r.failed.is_empty() && r.failed.iter().all(|f| oomscope_replay::scaled::convolution(&f.op)))
}

/// A run's peaks of allocated and reserved bytes: its allocator's own counters (for a
/// TensorFlow run, as TF logged them: its peak in use, the regions it took).
fn measured_peaks(out: &RunOutcome) -> (u64, u64) {
    if let Some(tf) = &out.tf {
        return (tf.peak.unwrap_or(0), tf.reserved);
    }
    out.result.devices.first().map_or((0, 0), |d| (d.peak_allocated, d.peak_reserved))
}

/// The settings tried beside the user's: PyTorch's expandable segments, when not on.
fn other_settings(r: &Request) -> Vec<(String, oomscope_core::caching::Settings)> {
    let torch = &r.torch;
    let mut out = Vec::new();
    if !r.tensorflow && !torch.expandable_segments {
        let mut s = torch.clone();
        s.expandable_segments = true;
        out.push(("expandable_segments:True".to_string(), s));
    }
    out
}

/// The smallest number of accumulation steps whose micro-batch fits and keeps `want` exactly.
pub fn accumulation(want: u64, largest: u64) -> Option<Accumulation> {
    if largest == 0 || want <= largest {
        return None;
    }
    (want.div_ceil(largest)..=want)
        .find(|k| want.is_multiple_of(*k) && want / k <= largest)
        .map(|k| Accumulation { micro_batch: want / k, steps: k })
}

/// `fit` of a command with `{batch}`.
pub fn fit(r: &Request, progress: &mut dyn FnMut(Progress)) -> Result<CommandFit, Problem> {
    let mut r = r.clone();
    let (step, probes) = learn(&mut r, progress)?;
    let r = &r;
    progress(Progress::Replaying);
    let s = settings(r, &r.torch);
    let mut runs = Vec::new();
    let largest_batch = largest(&step, &s, r.max_batch, &mut runs);
    let mut out = CommandFit {
        largest_batch,
        device: r.device.clone(),
        steps: r.launch.steps,
        probes,
        requests: step.entries.len() as u64,
        growing: step.growing() as u64,
        batch: r.batch,
        ..CommandFit::default()
    };
    (out.irregular, out.irregular_bytes) = {
        let (n, b) = step.irregular();
        (n as u64, b)
    };
    // The table: powers of two up to the first that fails, the probes, the answer and the
    // next, the user's batch.
    let mut table: Vec<u64> = r.probes.clone();
    let mut p = 1u64;
    while p <= r.max_batch {
        table.push(p);
        if !replayed(&step, &s, p, &mut runs).fits {
            break;
        }
        p *= 2;
    }
    table.extend(largest_batch.iter().flat_map(|&l| [l, l + 1]));
    table.extend(r.batch);
    table.sort_unstable();
    table.dedup();
    for &b in &table {
        let run = replayed(&step, &s, b, &mut runs);
        out.batches.push(row(run, "replayed"));
    }
    // What that batch needs, whether it fits or not: its replay with memory to spare.
    let at = r.batch.or(largest_batch).unwrap_or(1);
    let at_run = step.replay(at, &unlimited(r));
    out.by_kind = kinds(&at_run);
    out.by_kind_batch = Some(at);
    out.needs = Some(Needs { peak_allocated: at_run.peak_allocated, peak_reserved: at_run.peak_reserved });
    if let Some(l) = largest_batch {
        let peak = out.batches.iter().find(|x| x.batch == l).map_or(0, |x| x.peak_reserved);
        out.headroom = Some(r.device.capacity.saturating_sub(peak));
        out.accumulation = r.batch.and_then(|want| accumulation(want, l));
    }
    for (name, torch) in other_settings(r) {
        let mut tried = Vec::new();
        out.settings.push(SettingsRow {
            settings: name,
            largest_batch: largest(&step, &settings(r, &torch), r.max_batch, &mut tried),
        });
    }
    checks(r, &mut out, progress)?;
    Ok(out)
}

/// A check run that took at most this long is cheap: the next batch is run too.
const CHEAP_CHECK_SECONDS: f64 = 30.0;

/// The answer's check by runs: at the largest batch, and at the next where that is cheap.
fn checks(r: &Request, out: &mut CommandFit, progress: &mut dyn FnMut(Progress)) -> Result<(), Problem> {
    let Some(l) = out.largest_batch else {
        out.unchecked = Some("nothing fits, not even batch 1 (replayed)".into());
        return Ok(());
    };
    // A run that does not fit stops at the device's capacity.
    let next = out.batches.iter().find(|x| x.batch == l + 1).map_or(r.device.capacity, |x| x.peak_reserved);
    if let Err(why) = can_check(r, next.min(r.device.capacity)) {
        out.unchecked = Some(why);
        return Ok(());
    }
    // One run at the answer; the next batch too where that was cheap.
    progress(Progress::Run { what: "check", batch: Some(l), n: 1, of: 1 });
    let (seconds, measured, output) = check(r, Some(l), &format!("check-{l}"))?;
    progress(Progress::Ran { seconds });
    let trained = measured.fits;
    out.batches.push(measured);
    if !trained {
        // The run says otherwise: no batch is answered that a run has refuted.
        out.contradicted = Some(l);
        out.contradicted_output = Some(output).filter(|o| !o.is_empty());
        out.largest_batch = None;
        out.headroom = None;
        out.accumulation = None;
    } else if l < r.max_batch && seconds <= CHEAP_CHECK_SECONDS {
        progress(Progress::Run { what: "check of the next batch", batch: Some(l + 1), n: 1, of: 1 });
        let (seconds, measured, _) = check(r, Some(l + 1), &format!("check-{}", l + 1))?;
        progress(Progress::Ran { seconds });
        if measured.fits {
            out.at_least = Some(l + 1);
        }
        out.batches.push(measured);
    }
    out.batches.sort_by_key(|x| (x.batch, x.how == "measured"));
    Ok(())
}

/// `fit` of a command without `{batch}`: its peaks on the device, and whether it fits.
pub fn predict(r: &Request, progress: &mut dyn FnMut(Progress)) -> Result<CommandPrediction, Problem> {
    progress(Progress::Run { what: "probe", batch: None, n: 1, of: 1 });
    let out = r.launch.run(None, &Target::Unlimited, &r.dir.join("probe"))?;
    progress(Progress::Ran { seconds: out.seconds });
    let mut r = r.clone();
    on_this_gpu(&mut r, &out);
    let p = match &out.tf {
        Some(tf) => {
            r.tensorflow = true;
            tf.probed.clone()
        }
        None => tape::read(&out.tape, 1)?,
    };
    let r = &r;
    let row = probe_row(&out, &p);
    // One probe: every size as it was.
    let step = as_step(&p)?;
    progress(Progress::Replaying);
    let run = step.replay(p.batch, &settings(r, &r.torch));
    let mut pred = CommandPrediction {
        fits: run.fits,
        peak_allocated: run.peak_allocated,
        peak_reserved: run.peak_reserved,
        headroom: run.fits.then(|| r.device.capacity.saturating_sub(run.peak_reserved)),
        device: r.device.clone(),
        steps: r.launch.steps,
        by_kind: kinds(&run),
        failed: run.failed.as_ref().map(|(op, bytes)| FailedRequest { op: op.clone(), bytes: *bytes }),
        probe: row,
        settings: Vec::new(),
    };
    for (name, torch) in other_settings(r) {
        let o = step.replay(p.batch, &settings(r, &torch));
        pred.settings.push(SettingsFits { settings: name, fits: o.fits, peak_reserved: o.peak_reserved });
    }
    Ok(pred)
}

/// A private directory for the runs' files, removed when dropped.
#[derive(Debug)]
pub struct RunDir(pub PathBuf);

impl RunDir {
    pub fn new() -> Result<RunDir, Problem> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("oomscope-fit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| Problem(format!("{}: cannot create: {e}", path.display())))?;
        Ok(RunDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Keeps the directory: an error names a run's log in it.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulation_keeps_the_batch_exactly_with_the_fewest_steps() {
        assert_eq!(accumulation(64, 50), Some(Accumulation { micro_batch: 32, steps: 2 }));
        assert_eq!(accumulation(64, 16), Some(Accumulation { micro_batch: 16, steps: 4 }));
        assert_eq!(accumulation(63, 20), Some(Accumulation { micro_batch: 9, steps: 7 }));
        assert_eq!(accumulation(16, 16), None);
        assert_eq!(accumulation(7, 3), Some(Accumulation { micro_batch: 1, steps: 7 }));
    }

    #[test]
    fn what_lies_outside_the_allocator_is_the_more_of_its_first_use_and_its_end() {
        use oomscope_format::fit::ProbeDevice;
        const GIB: u64 = 1 << 30;
        let d = |free, outside_at_end| ProbeDevice { total: 140 * GIB, free, outside_at_end, ..ProbeDevice::default() };
        assert_eq!(outside(&d(140 * GIB - GIB / 2, 3 * GIB / 4)), 3 * GIB / 4);
        assert_eq!(outside(&d(139 * GIB, 0)), GIB);
    }

    #[test]
    fn a_run_trained_past_convolutions_workspaces_only() {
        use oomscope_format::fit::{FailedRequest, ProbeResult};
        let failed = |ops: &[&str]| ops.iter().map(|op| FailedRequest { op: op.to_string(), bytes: 1 << 30 }).collect();
        let run = |stopped, ooms, f| ProbeResult { stopped, ooms, failed: f, ..ProbeResult::default() };
        assert!(trained(&run(true, 0, Vec::new())));
        assert!(trained(&run(true, 2, failed(&["R.layer4.0.conv1/ConvolutionBackward0", "R.conv1/conv2d"]))));
        // Ended by the OOM before its last step, or an OOM of another op: it did not train.
        assert!(!trained(&run(false, 1, failed(&["R.conv1/conv2d"]))));
        assert!(!trained(&run(true, 2, failed(&["R.conv1/conv2d", "R.layer4.2.relu/ReluBackward0"]))));
        assert!(!trained(&run(true, 1, Vec::new())));
    }

    /// A tape recorded on an H200 under oomscope's allocator (ResNet-50, bf16 autocast, batch
    /// 3290, two steps), replayed here: the peaks PyTorch's own allocator reported for that
    /// program and batch on that card, in a run without oomscope.
    #[test]
    fn a_gpu_tape_replays_to_the_gpus_own_peaks() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/torch-snapshots-h200");
        let tape = tape::read(&dir.join("resnet50-b3290-bf16.tape.jsonl"), 3290).unwrap();
        let checks = std::fs::read_to_string(dir.join("fit-checks.jsonl")).unwrap();
        let own: serde_json::Value = checks
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["model"] == "resnet50" && v["amp"] == "bf16" && v["batch"] == 3290)
            .expect("the run without oomscope at 3290");
        let (allocated, reserved) = (own["peak_allocated"].as_u64().unwrap(), own["peak_reserved"].as_u64().unwrap());
        let step = as_step(&tape).unwrap();
        // The card's memory, less what was outside PyTorch's cache by the run's end.
        let (total, others) = (150_109_880_320, 804_061_184);
        let mut o = oomscope_core::bfc::Options::new(total - others);
        o.history = 0;
        let s = Settings {
            options: o,
            device_total: total,
            device_others: others,
            device_model: "NVIDIA H200".into(),
            keep_going: false,
            allocator: oomscope_replay::Allocator::Caching(Box::default()),
        };
        let run = step.replay(3290, &s);
        assert!(run.fits, "{:?}", run.failed);
        assert_eq!(run.peak_reserved, reserved, "reserved: segments as PyTorch's allocator made them");
        let off = (run.peak_allocated as f64 - allocated as f64) / allocated as f64;
        assert!(off.abs() < 1e-4, "allocated {} against {allocated} ({:+.5}%)", run.peak_allocated, off * 100.0);
    }
}
