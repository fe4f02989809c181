//! A framework's OOM episodes, read from its output (TensorFlow and JAX under `oomscope
//! run`: their allocator is their own, and at an OOM it prints its state, the BFC dump, on
//! stderr). Each episode — the reports of one failure, and what the program prints after
//! them (the exception with the node) — becomes a dump in the dump directory with its
//! verdict, and, when the program ends, a report after its own error.

use oomscope_format::feed::Variable;
use oomscope_format::{DeviceTag, Dump, DumpName, Moment, Source, SourceKind};
use oomscope_ingest::import::{tf_log, tf_variables};
use oomscope_report as render;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A new OOM report this long after the last one starts a new episode (a run that recovered
/// and failed again); reports closer together are one failure seen by parallel ops.
const EPISODE_GAP: Duration = Duration::from_secs(5);
/// Text kept per episode: an allocator dump is a line per chunk, and a huge one is cut.
const EPISODE_TEXT: usize = 256 << 20;

/// One failure, as the program printed it.
#[derive(Debug)]
struct Episode {
    text: String,
    /// Reports whose dump ended (the occupancy bar).
    reports: usize,
    last_report: Instant,
    /// Where its dump is written, once the first report says on which device.
    path: Option<PathBuf>,
    number: usize,
}

/// A report made whole while the program runs: for the live feed.
#[derive(Debug)]
pub struct Whole {
    /// The device it is on, as [`device_key`] names it.
    pub device: String,
    pub dump: Dump,
    pub report: String,
}

/// The program's OOM episodes, and where their dumps go.
#[derive(Debug)]
pub struct Episodes {
    pid: u32,
    command: String,
    dump_dir: PathBuf,
    episode: Option<Episode>,
    /// Every episode's dump, written: (path, dump with its verdict).
    pub dumps: Vec<(PathBuf, Dump)>,
    /// Episodes started (numbers the dump files).
    started: usize,
    /// The program's variables, as its hook last listed them: they name the chunks they fit.
    variables: Vec<Variable>,
}

impl Episodes {
    /// For the program `pid`, started as `command`, its dumps into `dump_dir`.
    pub fn new(pid: u32, command: &str, dump_dir: &Path) -> Episodes {
        Episodes {
            pid,
            command: command.to_string(),
            dump_dir: dump_dir.to_path_buf(),
            episode: None,
            dumps: Vec::new(),
            started: 0,
            variables: Vec::new(),
        }
    }

    /// The program's variables (Keras: the weights, and the optimizer's slots once made), as
    /// its hook lists them while it trains: each later dump names the chunks they fit.
    pub fn variables(&mut self, variables: Vec<Variable>) {
        self.variables = variables;
    }

    /// A line of the program's stderr; a report it makes whole, for the live feed.
    pub fn line(&mut self, line: &str) -> Option<Whole> {
        let now = Instant::now();
        // TF and XLA log with a prefix (`W0000 00:00:…] `); the same report without one is
        // oomscope's own, from its allocator inside the program, and already handled there.
        if tf_log::is_oom_header(line) && tf_log::severity(line).is_some() {
            let over = self.episode.as_ref().is_some_and(|e| e.reports > 0 && now - e.last_report > EPISODE_GAP);
            if over {
                self.close();
            }
            if self.episode.is_none() {
                self.started += 1;
                self.episode = Some(Episode {
                    text: String::new(),
                    reports: 0,
                    last_report: now,
                    path: None,
                    number: self.started,
                });
            }
        }
        let e = self.episode.as_mut()?;
        if e.text.len() + line.len() < EPISODE_TEXT {
            e.text.push_str(line);
            e.text.push('\n');
        }
        if tf_log::is_occupancy(line) {
            e.reports += 1;
            e.last_report = now;
            // As soon as a report is whole: the dump and the live feed have it.
            return self.import(false);
        }
        None
    }

    /// The program ended: its last episode, with everything it printed after the reports.
    pub fn finish(&mut self) {
        self.close();
    }

    fn close(&mut self) {
        if self.episode.is_some() {
            self.import(true);
        }
        self.episode = None;
    }

    /// Imports the current episode and writes (or rewrites) its dump; unless it is the
    /// last, what the live feed shows of it.
    fn import(&mut self, last: bool) -> Option<Whole> {
        let e = self.episode.as_mut()?;
        let name = format!("oomscope-{}-oom{}.dump.json", self.pid, e.number);
        let mut d = tf_log::parse(Path::new(&name), &e.text).ok()?;
        tf_variables::name_variables(&mut d, &self.variables);
        // `oomscope-PID-gpuN-oomK.dump.json` (or cpuN, tpuN).
        let path = e
            .path
            .get_or_insert_with(|| {
                let device = DeviceTag::from_framework(&device_key(&d)).unwrap_or_else(|| DeviceTag::gpu(0));
                // Named as PyTorch's are; a program that also loaded oomscope's allocator
                // may have taken the name already, and then the next number is used.
                (e.number..)
                    .map(|k| {
                        let name = DumpName {
                            rank: None,
                            pid: self.pid,
                            device: device.clone(),
                            moment: Moment::Oom(k as u64),
                        };
                        self.dump_dir.join(name.to_string())
                    })
                    .find(|p| !p.exists())
                    .unwrap_or_default()
            })
            .clone();
        d.source = Source {
            kind: SourceKind::Run,
            path: None,
            command: Some(self.command.clone()),
            created_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|t| t.as_secs()),
        };
        let pm = oomscope_pipeline::at_oom(&mut d, |d| oomscope_format::write_atomic(&path, d));
        if let Err(err) = pm.written {
            eprintln!("oomscope: warning: {err}");
        }
        let whole = (!last).then(|| Whole { device: device_key(&d), dump: d.clone(), report: pm.report });
        match self.dumps.iter_mut().find(|(p, _)| *p == path) {
            Some(slot) => slot.1 = d,
            None => self.dumps.push((path, d)),
        }
        whole
    }

    /// What the user reads after the program's own error: each episode's verdict (the first
    /// in full) and where its dump is.
    pub fn report(&self) -> String {
        // Set off from the traceback above it.
        let mut out = if self.dumps.is_empty() { String::new() } else { "\n".to_string() };
        for (i, (path, d)) in self.dumps.iter().enumerate() {
            let request = d.oom.as_ref().map_or(String::new(), render::summary::request_line);
            out.push_str(&format!("oomscope: {} ran out of memory: {request}\n", d.allocator.name));
            if i == 0 {
                if let Some(v) = &d.verdict {
                    out.push_str(&render::verdict::render(v));
                }
            } else if let Some(v) = &d.verdict {
                out.push_str(&format!("  {}: {}\n", v.kind.name(), v.headline));
            }
            out.push_str(&format!(
                "oomscope: dump written to {}\n  look inside: oomscope tui {}\n",
                path.display(),
                path.display()
            ));
        }
        out
    }
}

/// The device an OOM is on (`CPU:0`, `GPU:1`), to publish it beside the device's samples:
/// from the allocator's name (`GPU_1_bfc`, `bfc_cpu_allocator_for_gpu`), which the report's
/// first line gives, else from the device the log names.
pub fn device_key(d: &Dump) -> String {
    let name = &d.allocator.name;
    let index = name.split('_').find_map(|p| p.parse::<u32>().ok()).unwrap_or(0);
    if name.contains("cpu") {
        format!("CPU:{index}")
    } else if name.starts_with("GPU") {
        format!("GPU:{index}")
    } else if name.starts_with("TPU") {
        format!("TPU:{index}")
    } else {
        d.device.name.rsplit("device:").next().unwrap_or(&d.device.name).to_string()
    }
}
