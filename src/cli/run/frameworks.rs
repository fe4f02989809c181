//! TensorFlow and JAX (XLA) under `oomscope run`: the lines read by the relay come here.
//! Each OOM episode becomes a dump with its verdict ([`oomscope_inputs::episodes`]) and
//! goes on the live feed; the memory the framework reports while it runs
//! (`python/oomscope/_tf.py`) becomes the live view's state.

use oomscope_format::feed::FrameworkSample;
use oomscope_format::live::{Hello, Message, OomEvent, PROTOCOL, State};
use oomscope_format::{AllocatorInfo, DeviceInfo, DeviceKind, Stats};
use oomscope_inputs::episodes::Episodes;
use oomscope_live::{self as live, Publisher};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The program's OOM episodes, and the live feed they and its samples go on.
pub struct Frameworks {
    pid: u32,
    command: String,
    pub episodes: Episodes,
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
            episodes: Episodes::new(pid, command, dump_dir),
            live,
            publishers: HashMap::new(),
            frames: 0,
            started_at: Instant::now(),
        }
    }

    /// A line of the program's stderr: a report made whole goes on the live feed.
    pub fn line(&mut self, line: &str) {
        if let Some(w) = self.episodes.line(line)
            && let Some(p) = self.publisher(&w.device)
        {
            p.send(&Message::Oom(Box::new(OomEvent { dump: w.dump, report: w.report })));
        }
    }

    /// The program ended: its last episode, with everything it printed after the reports.
    pub fn finish(&mut self) {
        self.episodes.finish();
    }

    /// What the user reads after the program's own error.
    pub fn report(&self) -> String {
        self.episodes.report()
    }

    /// The program's variables, from its hook: they name the chunks of its later dumps.
    pub fn variables(&mut self, v: oomscope_format::feed::Variables) {
        self.episodes.variables(v.variables);
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
}
