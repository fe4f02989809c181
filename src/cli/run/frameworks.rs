//! TensorFlow and JAX (XLA) under `oomscope run`: their allocator is their own, and at an
//! OOM it prints its state (the BFC dump) on stderr. The lines read by the relay come here:
//! each OOM episode — the reports of one failure, and what the program prints after them
//! (the exception with the node) — becomes a dump in the dump directory, on the live feed,
//! and, when the program ends, a verdict after its own error. The memory the framework
//! reports while it runs (`python/oomscope/_tf.py`) becomes the live view's state.

use oomscope_format::feed::FrameworkSample;
use oomscope_format::live::{Hello, Message, OomEvent, PROTOCOL, State};
use oomscope_format::{
    AllocatorInfo, DeviceInfo, DeviceKind, DeviceTag, Dump, DumpName, Moment, Source, SourceKind, Stats,
};
use oomscope_ingest::import::tf_log;
use oomscope_live::{self as live, Publisher};
use oomscope_report as render;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// The program's OOM episodes, and where they go.
pub struct Frameworks {
    pid: u32,
    command: String,
    dump_dir: PathBuf,
    episode: Option<Episode>,
    /// Every episode's dump, written: (path, dump with its verdict).
    pub dumps: Vec<(PathBuf, Dump)>,
    /// Episodes started (numbers the dump files).
    started: usize,
    /// The live feed, one publisher per device the framework reports (or the OOM names).
    live: Option<PathBuf>,
    publishers: HashMap<String, Arc<Publisher>>,
    frames: u64,
    started_at: Instant,
}

impl std::fmt::Debug for Frameworks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frameworks").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Frameworks {
    /// For the program `pid`; `live` is the live directory when the run is published.
    pub fn new(pid: u32, command: &str, dump_dir: &Path, live: Option<PathBuf>) -> Frameworks {
        Frameworks {
            pid,
            command: command.to_string(),
            dump_dir: dump_dir.to_path_buf(),
            episode: None,
            dumps: Vec::new(),
            started: 0,
            live,
            publishers: HashMap::new(),
            frames: 0,
            started_at: Instant::now(),
        }
    }

    /// A line of the program's stderr.
    pub fn line(&mut self, line: &str) {
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
        let Some(e) = self.episode.as_mut() else { return };
        if e.text.len() + line.len() < EPISODE_TEXT {
            e.text.push_str(line);
            e.text.push('\n');
        }
        if tf_log::is_occupancy(line) {
            e.reports += 1;
            e.last_report = now;
            // As soon as a report is whole: the dump and the live feed have it.
            self.import(false);
        }
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

    /// Imports the current episode; writes (or rewrites) its dump and publishes it.
    fn import(&mut self, last: bool) {
        let Some(e) = &mut self.episode else { return };
        let name = format!("oomscope-{}-oom{}.dump.json", self.pid, e.number);
        let Ok(mut d) = tf_log::parse(Path::new(&name), &e.text) else { return };
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
        let pm = render::post_mortem(&mut d, &mut oomscope_replay::what_if::from_history, |d| {
            oomscope_format::write_atomic(&path, d)
        });
        if let Err(err) = pm.written {
            eprintln!("oomscope: warning: {err}");
        }
        if !last {
            let device = device_key(&d);
            if let Some(p) = self.publisher(&device) {
                p.send(&Message::Oom(Box::new(OomEvent { dump: d.clone(), report: pm.report })));
            }
        }
        match self.dumps.iter_mut().find(|(p, _)| *p == path) {
            Some(slot) => slot.1 = d,
            None => self.dumps.push((path, d)),
        }
    }

    /// A memory sample from the program's framework (a JSON line from `python/oomscope/_tf.py`).
    pub fn sample(&mut self, s: &FrameworkSample) {
        let (device, current, limit) = (s.device.as_str(), s.current, s.limit);
        let peak = s.peak.unwrap_or(current);
        let t_ns = self.started_at.elapsed().as_nanos() as u64;
        let Some(p) = self.publisher(device) else { return };
        let state = State {
            seq: self.frames,
            t_ns,
            step: -1,
            stats: Stats { bytes_limit: limit, bytes_in_use: current, peak_bytes_in_use: peak, ..Stats::default() },
            samples: vec![[t_ns, current, 0]],
            ..State::default()
        };
        self.frames += 1;
        p.send(&Message::State(Box::new(state)));
    }

    /// The live feed's publisher for `device`, bound on first use.
    fn publisher(&mut self, device: &str) -> Option<Arc<Publisher>> {
        let dir = self.live.clone()?;
        if let Some(p) = self.publishers.get(device) {
            return Some(Arc::clone(p));
        }
        let index = self.publishers.len() as u32;
        let hello = Hello {
            protocol: PROTOCOL.to_string(),
            pid: self.pid,
            command: self.command.clone(),
            device: DeviceInfo {
                kind: DeviceKind::Other,
                name: device.to_string(),
                model: device.to_string(),
                ..DeviceInfo::default()
            },
            allocator: AllocatorInfo {
                name: format!("{device} (the framework's own allocator)"),
                ..AllocatorInfo::default()
            },
            started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            interval_ms: 500,
            process: None,
        };
        match Publisher::bind(&live::socket_path(&dir, self.pid, Some(index)), hello) {
            Ok(p) => {
                let p = Arc::new(p);
                self.publishers.insert(device.to_string(), Arc::clone(&p));
                Some(p)
            }
            Err(e) => {
                eprintln!("oomscope: warning: the live feed is off: {e}");
                self.live = None;
                None
            }
        }
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
fn device_key(d: &Dump) -> String {
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
