//! A TensorFlow program's probe: its requests, read from the BFC allocator's own log
//! (`TF_CPP_VMODULE=bfc_allocator=3`: every `AllocateRaw` with its size and address, every
//! `DeallocateRaw` with the size that was requested) and the step marks the hook writes
//! beside them (`oomscope-fit: step N`).
//!
//! Level 3 does not say which allocation a free is of, only its size: the latest live
//! allocation of that size is taken (an op frees what it made last first). Which of two
//! equal allocations is freed changes no figure of what is in use, only, at times, where
//! the free chunk lies. Level 4 says the address, with a stack trace per call, which makes a
//! probe of a small Keras CNN take minutes instead of seconds; its lines are read when
//! present.

use oomscope_core::record::Kind;
use oomscope_replay::scaled::{Probed, TapeEntry};
use std::collections::HashMap;

/// The name of TF's BFC allocator for the device: a GPU's, else the CPU's when
/// `TF_CPU_ALLOCATOR_USE_BFC=true`.
fn device_allocator(name: &str) -> bool {
    name == "bfc_cpu_allocator_for_gpu" || (name.starts_with("GPU_") && name.ends_with("_bfc"))
}

/// What a TF run's log says.
#[derive(Debug, Default)]
pub struct TfRun {
    pub probed: Probed,
    /// Step marks seen, and whether the hook ended it after its steps.
    pub steps: i64,
    pub stopped: bool,
    /// Allocations TF could not make.
    pub ooms: u64,
}

/// A log line without TF's prefix (`I0000 00:00:1795433278.865093   23376 file.cc:1049] `).
fn payload(line: &str) -> &str {
    match line.find("] ") {
        Some(i) if line.starts_with(['I', 'W', 'E']) && line[..i].contains(".cc:") => &line[i + 2..],
        _ => line,
    }
}

/// Reads `log` (a run's stderr) as a TF probe at `batch`; None when TF's allocator logged
/// nothing (not a TF program, or not on a BFC allocator).
pub fn read(log: &str, batch: u64) -> Option<TfRun> {
    let mut run = TfRun { probed: Probed { batch, entries: Vec::new(), ops: vec![String::new()] }, ..TfRun::default() };
    let mut live: HashMap<&str, u32> = HashMap::new();
    // Level 3: live allocations by requested size, latest last.
    let mut by_size: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut allocs = 0u32;
    let mut step = -1i64;
    let detailed = log.contains("[mem-debug] AllocateRaw,");
    for line in log.lines() {
        let p = payload(line);
        if !detailed && let Some(rest) = p.strip_prefix("AllocateRaw ") {
            // `AllocateRaw NAME  BYTES ADDRESS` once served (`AllocateRaw NAME  BYTES` is the ask).
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() == 3
                && device_allocator(f[0])
                && let Ok(bytes) = f[1].parse::<u64>()
            {
                by_size.entry(bytes).or_default().push(allocs);
                allocs += 1;
                run.probed.entries.push(TapeEntry::Alloc { bytes, stream: 0, op: 0, kind: Kind::Unknown, step });
            }
        } else if !detailed && let Some(rest) = p.strip_prefix("DeallocateRaw ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() == 2
                && device_allocator(f[0])
                && let Ok(bytes) = f[1].parse::<u64>()
                && let Some(alloc) = by_size.get_mut(&bytes).and_then(Vec::pop)
            {
                run.probed.entries.push(TapeEntry::Free { alloc });
            }
        } else if let Some(rest) = p.strip_prefix("[mem-debug] AllocateRaw,") {
            let f: Vec<&str> = rest.splitn(4, ',').collect();
            if f.len() >= 3 && device_allocator(f[0]) {
                let Ok(bytes) = f[1].parse::<u64>() else { continue };
                live.insert(f[2], allocs);
                allocs += 1;
                run.probed.entries.push(TapeEntry::Alloc { bytes, stream: 0, op: 0, kind: Kind::Unknown, step });
            }
        } else if let Some(rest) = p.strip_prefix("[mem-debug] DeallocateRaw,") {
            let f: Vec<&str> = rest.splitn(4, ',').collect();
            if f.len() >= 3
                && device_allocator(f[0])
                && let Some(alloc) = live.remove(f[2])
            {
                run.probed.entries.push(TapeEntry::Free { alloc });
            }
        } else if let Some(n) = p.strip_prefix("oomscope-fit: step ") {
            if let Ok(n) = n.trim().parse::<i64>() {
                step = n;
                run.steps = n + 1;
                run.probed.entries.push(TapeEntry::Step { step: n });
            }
        } else if p.starts_with("oomscope-fit: stop at step ") {
            run.stopped = true;
        } else if p.contains("ran out of memory trying to allocate") {
            run.ooms += 1;
        }
    }
    (allocs > 0).then_some(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocators_log_and_the_step_marks_are_the_tape() {
        let log = "\
I0000 00:00:1.0   5 bfc_allocator.cc:281] AllocateRaw bfc_cpu_allocator_for_gpu  8
I0000 00:00:1.0   5 bfc_allocator.cc:329] [mem-debug] AllocateRaw,bfc_cpu_allocator_for_gpu,8,0x10,*** Begin stack trace ***
\ttsl::CurrentStackTrace[abi:cxx11]()
I0000 00:00:1.0   5 bfc_allocator.cc:329] [mem-debug] AllocateRaw,cpu,64,0x99,*** Begin stack trace ***
oomscope-fit: step 0
I0000 00:00:1.0   5 bfc_allocator.cc:329] [mem-debug] AllocateRaw,bfc_cpu_allocator_for_gpu,4096,0x20,*** Begin
I0000 00:00:1.0   5 bfc_allocator.cc:695] [mem-debug] DeallocateRaw,bfc_cpu_allocator_for_gpu,8,0x10,*** Begin
I0000 00:00:1.0   5 bfc_allocator.cc:695] [mem-debug] DeallocateRaw,bfc_cpu_allocator_for_gpu,8,0x77,*** Begin
oomscope-fit: stop at step 1
";
        let run = read(log, 4).unwrap();
        assert!(run.stopped);
        assert_eq!(run.steps, 1);
        assert_eq!(
            run.probed.entries,
            vec![
                TapeEntry::Alloc { bytes: 8, stream: 0, op: 0, kind: Kind::Unknown, step: -1 },
                TapeEntry::Step { step: 0 },
                TapeEntry::Alloc { bytes: 4096, stream: 0, op: 0, kind: Kind::Unknown, step: 0 },
                TapeEntry::Free { alloc: 0 },
            ]
        );
        assert!(read("I0000 x.cc:1] nothing here\n", 4).is_none());
    }

    #[test]
    fn at_level_3_a_free_is_of_the_latest_live_allocation_of_its_size() {
        let log = "\
I0000 00:00:1.0   5 bfc_allocator.cc:281] AllocateRaw bfc_cpu_allocator_for_gpu  8
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  8 0x10
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  8 0x20
oomscope-fit: step 0
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  16 0x30
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 8
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 16
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 8
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 8
";
        let run = read(log, 2).unwrap();
        let frees: Vec<&TapeEntry> =
            run.probed.entries.iter().filter(|e| matches!(e, TapeEntry::Free { .. })).collect();
        // The third free of 8 bytes has nothing live of that size left: not on the tape.
        assert_eq!(
            frees,
            [&TapeEntry::Free { alloc: 1 }, &TapeEntry::Free { alloc: 2 }, &TapeEntry::Free { alloc: 0 }]
        );
    }
}
