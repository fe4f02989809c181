//! The allocator's clock: nanoseconds since an origin, read on every allocation and free.
//!
//! A monotonic clock read (`clock_gettime`) costs about 25 ns here, two per alloc+free
//! pair; on x86-64 with an invariant TSC (`constant_tsc` and `nonstop_tsc`) the time stamp
//! counter costs a few, and is converted with a rate measured once per process against the
//! monotonic clock. PyTorch's own recorder does the same (`c10::ApproximateClock`). Elsewhere
//! the monotonic clock is used.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ticks per nanosecond as a 32.32 fixed-point factor, when the TSC can be used.
#[derive(Clone, Copy, Debug)]
struct Tsc {
    /// Nanoseconds per tick × 2^32.
    ns_per_tick_q32: u64,
}

fn tsc() -> Option<Tsc> {
    static TSC: OnceLock<Option<Tsc>> = OnceLock::new();
    *TSC.get_or_init(calibrate)
}

#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64; it reads a counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    0
}

fn calibrate() -> Option<Tsc> {
    if !cfg!(target_arch = "x86_64") || std::env::var_os(crate::env::NO_TSC).is_some() {
        return None;
    }
    let flags = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = flags.lines().find(|l| l.starts_with("flags"))?;
    if !(flags.contains(" constant_tsc") && flags.contains(" nonstop_tsc")) {
        return None;
    }
    // 2 ms against the monotonic clock: a rate good to a few parts in 10^4.
    let (t0, c0) = (Instant::now(), ticks());
    while t0.elapsed() < Duration::from_millis(2) {
        std::hint::spin_loop();
    }
    let (ns, c) = (t0.elapsed().as_nanos() as u64, ticks().wrapping_sub(c0));
    if c == 0 || ns == 0 {
        return None;
    }
    Some(Tsc { ns_per_tick_q32: ((u128::from(ns) << 32) / u128::from(c)) as u64 })
}

/// A clock started at its creation.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    origin_ticks: u64,
    tsc: Option<Tsc>,
}

impl Clock {
    pub fn start() -> Clock {
        let tsc = tsc();
        Clock { origin: Instant::now(), origin_ticks: if tsc.is_some() { ticks() } else { 0 }, tsc }
    }

    /// Nanoseconds since the start.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self.tsc {
            Some(t) => {
                ((u128::from(ticks().wrapping_sub(self.origin_ticks)) * u128::from(t.ns_per_tick_q32)) >> 32) as u64
            }
            None => self.origin.elapsed().as_nanos() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_follows_the_monotonic_clock() {
        let c = Clock::start();
        let t0 = Instant::now();
        let a = c.now_ns();
        std::thread::sleep(Duration::from_millis(30));
        let b = c.now_ns();
        let real = t0.elapsed().as_nanos() as u64;
        assert!(b > a, "monotonic: {a} then {b}");
        // Within 2% (and the sleep's own slack) of the monotonic clock.
        let d = (b - a).abs_diff(real);
        assert!(d < real / 50 + 200_000, "{} ns measured, {real} ns real", b - a);
    }
}
