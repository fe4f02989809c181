//! A trace played in real time, as a live feed: the simulated run a user can watch climb to
//! its OOM (`oomscope demo --tui`, `--publish`). The allocator is the same as in
//! [`crate::replay`]; events are spread evenly over the run's length and stamped with the
//! time they are played at, and the state is sampled as a live process's would be.

use crate::capture::Capture;
use oomscope_core::record::Meta;
use oomscope_core::trace::{Event, Trace};
use oomscope_format::live::{Hello, Message};
use oomscope_replay::replay::{Outcome, Settings, replay, replay_observed};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a state frame is taken, in played time.
pub const FRAME_EVERY: Duration = Duration::from_millis(100);

/// Plays `trace` over about `length` (up to its first failure, or its end), sending the
/// hello, the state frames and the step marks to `emit`. Returns the outcome, or `None`
/// when `stop` was set before the end.
pub fn play(
    trace: &Trace,
    settings: &Settings,
    source_path: Option<&str>,
    length: Duration,
    stop: &AtomicBool,
    command: &str,
    mut emit: impl FnMut(Message),
) -> Option<Outcome> {
    // A quick replay finds how far the run gets, so that the played part fills `length`.
    let events = replay(trace, settings, source_path, |_| {}).events_replayed.max(1);
    let per_event = length.as_nanos() as u64 / events as u64;
    let stamped = stamp(trace, per_event);
    emit(Message::Hello(Box::new(hello(settings, command))));
    let start = Instant::now();
    let mut capture = Capture::new();
    let mut next_frame = Duration::ZERO;
    let mut stopped = false;
    let outcome = replay_observed(&stamped, settings, source_path, |engine, done| {
        if stop.load(Ordering::Relaxed) {
            stopped = true;
            return false;
        }
        let due = Duration::from_nanos(per_event * done as u64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let last = done >= events;
        if due >= next_frame || last {
            next_frame = due + FRAME_EVERY;
            let (state, steps) = capture.state(engine, due.as_nanos() as u64);
            for s in steps {
                emit(Message::Step(s));
            }
            emit(Message::State(Box::new(state)));
        }
        true
    });
    (!stopped).then_some(outcome)
}

/// The trace with event `i` stamped at `i × per_event` nanoseconds.
fn stamp(trace: &Trace, per_event: u64) -> Trace {
    let mut t = trace.clone();
    for (i, e) in t.events.iter_mut().enumerate() {
        let at = per_event * i as u64;
        match e {
            Event::Alloc { meta: Meta { t_ns, .. }, .. } | Event::Free { t_ns, .. } | Event::Step { t_ns, .. } => {
                *t_ns = at
            }
        }
    }
    t
}

/// The hello of a played run: this process, the simulated device, the allocator.
pub fn hello(settings: &Settings, command: &str) -> Hello {
    let engine = settings.engine_for(&Trace::default());
    crate::hello_for_this_process(command, &engine, FRAME_EVERY)
}
