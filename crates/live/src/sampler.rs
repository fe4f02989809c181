//! A thread that samples an [`Allocator`] and publishes what it sees: a state frame every
//! interval, the step marks, and each OOM its owner hands over ([`Sampler::oom`]).
//!
//! Its cost to the allocator is the time the lock is held to copy the state (see
//! [`super::capture`]): the figures, then the chunks a slice at a time, so that no single
//! hold grows with the state. The interval stretches so that the holds together stay under
//! 2% of the time (at least 50 times the last copy), so a huge state is sampled less often
//! rather than slowing the training.

use super::capture::{Capture, Raw, SLOTS_PER_HOLD};
use super::publish::Publisher;
use oomscope_core::Allocator;
use oomscope_format::Dump;
use oomscope_format::live::{Message, OomEvent};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The interval when copying the state is cheap.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// OOMs handed over and not yet published: (the dump with its verdict, the report).
type Pending = Arc<Mutex<Vec<(Arc<Dump>, String)>>>;

/// Runs until dropped; dropping sends a last frame (the publisher says goodbye when its
/// last owner drops it).
pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
    ooms: Pending,
    /// The process that started the thread: a child forked from it has no such thread.
    owner: u32,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").finish_non_exhaustive()
    }
}

/// Copies what a frame needs from `allocator`, the chunks a slice of [`SLOTS_PER_HOLD`]
/// slots per hold of its lock; returns the copy and the time the lock was held in all.
pub fn copy(allocator: &Allocator, capture: &mut Capture) -> (Raw, Duration) {
    let started = Instant::now();
    let mut raw = allocator.with_engine(|e| capture.begin(e, allocator.elapsed_ns()));
    let mut held = started.elapsed();
    loop {
        raw.reserve(SLOTS_PER_HOLD);
        let started = Instant::now();
        let done = allocator.with_engine(|e| capture.more(e, &mut raw, SLOTS_PER_HOLD));
        held += started.elapsed();
        if done {
            return (raw, held);
        }
        // The lock is not fair: a thread that only yielded would take it again before a
        // woken waiter runs. A pause as long as the hold lets the allocator's callers in.
        std::thread::sleep(started.elapsed().min(Duration::from_millis(1)));
    }
}

impl Sampler {
    /// Samples `allocator` every `interval` (the first frame at once) into `publisher`.
    pub fn start(allocator: Arc<Allocator>, publisher: Arc<Publisher>, interval: Duration) -> std::io::Result<Sampler> {
        let (stop, stop_rx) = mpsc::channel::<()>();
        let ooms: Pending = Arc::default();
        let pending = Arc::clone(&ooms);
        let thread = std::thread::Builder::new().name("oomscope-live-sampler".into()).spawn(move || {
            let mut capture = Capture::new();
            let mut wait = Duration::ZERO;
            loop {
                let last = matches!(stop_rx.recv_timeout(wait), Ok(()) | Err(RecvTimeoutError::Disconnected));
                let (raw, held) = copy(&allocator, &mut capture);
                let (state, steps) = capture.build(raw);
                for step in steps {
                    publisher.send(&Message::Step(step));
                }
                publisher.send(&Message::State(Box::new(state)));
                // After the state that shows the failure, as a viewer expects to see it.
                let ooms = std::mem::take(&mut *pending.lock().unwrap_or_else(PoisonError::into_inner));
                for (dump, report) in ooms {
                    publisher.send(&Message::Oom(Box::new(OomEvent { dump: (*dump).clone(), report })));
                }
                if last {
                    break;
                }
                wait = interval.max(held * 50);
            }
            drop(publisher);
        })?;
        Ok(Sampler { stop, thread: Some(thread), ooms, owner: std::process::id() })
    }

    /// Publishes an OOM (its dump, with the verdict attached, and the report as printed)
    /// after the next state frame.
    pub fn oom(&self, dump: Arc<Dump>, report: String) {
        self.ooms.lock().unwrap_or_else(PoisonError::into_inner).push((dump, report));
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if std::process::id() != self.owner {
            // A forked child (a DataLoader worker): the thread, and the publisher it holds,
            // are the parent's; joining it would fail, and the socket is not the child's
            // to remove.
            std::mem::forget(self.thread.take());
            return;
        }
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
