//! Feeding a trace through the allocator on a simulated device: TensorFlow's BFC allocator,
//! or PyTorch's caching allocator under given settings.

use oomscope_core::Engine;
use oomscope_core::bfc::{Bfc, Options};
use oomscope_core::caching::{Caching, CachingOptions, Settings as TorchSettings};
use oomscope_core::device::SimDevice;
use oomscope_core::trace::{Event, Trace};
use oomscope_format::{Dump, Source};

/// The allocator a replay feeds.
#[derive(Clone, Debug, PartialEq)]
pub enum Allocator {
    /// TensorFlow's BFC allocator, with [`Settings::options`].
    Bfc,
    /// PyTorch's caching allocator under these settings; of [`Settings::options`] it takes
    /// the history's length, and the limit as a memory fraction (the bytes PyTorch may
    /// reserve) when it is below the device.
    Caching(Box<TorchSettings>),
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The limit and the history's length (either allocator); growth, garbage collection
    /// and the fragmentation fraction (BFC's own).
    pub options: Options,
    /// Capacity of the simulated device (at least the limit is sensible).
    pub device_total: u64,
    /// Bytes of the device held by other processes.
    pub device_others: u64,
    /// The card the simulated device stands for.
    pub device_model: String,
    /// Go on after a failed allocation (frees of failed allocations are then ignored).
    pub keep_going: bool,
    pub allocator: Allocator,
}

impl Settings {
    /// A device exactly as large as the limit, nobody else on it, stop at the first OOM.
    pub fn new(options: Options) -> Settings {
        let total = options.limit;
        Settings {
            options,
            device_total: total,
            device_others: 0,
            device_model: "simulated GPU".into(),
            keep_going: false,
            allocator: Allocator::Bfc,
        }
    }

    /// The caching allocator's settings, when it is the one replayed.
    pub fn torch(&self) -> Option<&TorchSettings> {
        match &self.allocator {
            Allocator::Caching(s) => Some(s.as_ref()),
            Allocator::Bfc => None,
        }
    }

    /// A fresh allocator for `trace`, as these settings choose it.
    pub fn engine_for(&self, trace: &Trace) -> Engine {
        let device = Box::new(self.device_for(trace));
        match &self.allocator {
            Allocator::Bfc => Engine::Bfc(Bfc::new(self.options.clone(), device)),
            Allocator::Caching(s) => {
                let mut opts = CachingOptions::new(0);
                opts.history = self.options.history;
                let mut c = Caching::new(s.as_ref().clone(), opts, device);
                if self.options.limit < self.device_total.saturating_sub(self.device_others) {
                    c.set_allowed(self.options.limit);
                }
                Engine::Caching(c)
            }
        }
    }

    /// The simulated device these settings describe, fresh.
    pub fn device(&self) -> SimDevice {
        SimDevice::new(self.device_total, self.device_others).with_model(&self.device_model)
    }

    /// The device for `trace`: its regions where the recorded run's were, when it says.
    pub fn device_for(&self, trace: &Trace) -> SimDevice {
        self.device().with_addresses(trace.regions.iter().copied())
    }
}

/// What a replay did.
#[derive(Debug)]
pub struct Outcome {
    /// The state at the first failure (or, with `keep_going` or without failures, at the end).
    pub dump: Dump,
    /// Events replayed (up to and including the failing one when the replay stopped).
    pub events_replayed: usize,
    /// Line of the first failed allocation in the trace.
    pub first_failure_line: Option<u32>,
    /// Failed allocations.
    pub failures: u64,
}

/// Marks allocations that failed, so their frees are ignored.
const FAILED: u64 = u64::MAX;

/// Replays `trace`; `source_path` names it in the dump; `progress` gets the events done
/// every 65 536 events.
pub fn replay(
    trace: &Trace,
    settings: &Settings,
    source_path: Option<&str>,
    mut progress: impl FnMut(usize),
) -> Outcome {
    replay_observed(trace, settings, source_path, |_, i| {
        if i % 65_536 == 0 {
            progress(i);
        }
        true
    })
}

/// [`replay`] with a look at the allocator between events: `after(engine, events_done)` is
/// called before each event and once at the end; returning false stops the replay there
/// (the real-time demo paces and samples the run this way).
pub fn replay_observed(
    trace: &Trace,
    settings: &Settings,
    source_path: Option<&str>,
    mut after: impl FnMut(&Engine, usize) -> bool,
) -> Outcome {
    let mut engine = settings.engine_for(trace);
    *engine.names_mut() = trace.names.clone();
    let mut addrs = vec![0u64; trace.allocs as usize];
    let (mut failures, mut first_failure_line, mut replayed) = (0u64, None, 0usize);
    for (i, event) in trace.events.iter().enumerate() {
        if !after(&engine, i) {
            break;
        }
        replayed = i + 1;
        match *event {
            Event::Alloc { alloc, bytes, meta, outside } => {
                // PyTorch's allocator has no memory outside its pool: under it, such
                // requests are ordinary allocations.
                let result = match &mut engine {
                    Engine::Bfc(bfc) if outside => bfc.allocate_outside(bytes, meta),
                    e => e.allocate(bytes, 0, meta),
                };
                match result {
                    Ok(addr) => addrs[alloc as usize] = addr,
                    Err(_) => {
                        addrs[alloc as usize] = FAILED;
                        failures += 1;
                        first_failure_line.get_or_insert(trace.lines[i]);
                        if !settings.keep_going {
                            after(&engine, replayed);
                            break;
                        }
                    }
                }
            }
            Event::Free { alloc, t_ns, outside } => {
                let addr = addrs[alloc as usize];
                // The trace was checked: every free matches a live allocation.
                if addr != FAILED {
                    let _ = match &mut engine {
                        Engine::Bfc(bfc) if outside => bfc.free_outside(addr, t_ns),
                        e => e.free(addr, t_ns),
                    };
                }
            }
            Event::Step { step, t_ns } => engine.mark_step(step, t_ns),
        }
        if replayed == trace.events.len() {
            after(&engine, replayed);
        }
    }
    let source = Source {
        kind: oomscope_format::SourceKind::Replay,
        path: source_path.map(str::to_string),
        ..Source::default()
    };
    Outcome { dump: engine.snapshot(source), events_replayed: replayed, first_failure_line, failures }
}
