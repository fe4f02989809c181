//! A TensorFlow program's probe: its requests, read from TF's own log.
//!
//! - The BFC allocator's (`TF_CPP_VMODULE=bfc_allocator=3`): every `AllocateRaw` with its
//!   size and the address TF gave it, every `DeallocateRaw` with the size that was
//!   requested, but not which allocation. A free of size S is first taken to be of the
//!   latest live allocation of size S; when TF later puts a request where one of those
//!   still lies, that one was freed, and the tape is corrected (`Places`). Equal sizes
//!   give the same figures in use either way, but where the free chunk lies decides where
//!   later requests go: without the correction a Keras CNN's probe replayed 35% above TF's
//!   own peak at batch 32, with it to the byte.
//! - TF's memory log (`log_memory=2`, `__LOG_MEMORY__` lines), when a log has it: each
//!   tensor's kernel, and each tensor's deallocation by the allocator's id for it. Probes do
//!   not turn it on: it changes what TF allocates (the same CNN at batch 16 on 72 MiB
//!   trained with it and ran out of memory without).
//! - The step marks the hook writes beside them (`oomscope-fit: step N`), and TF's own peak
//!   in use when the hook ended the run.

use oomscope_core::record::Kind;
use oomscope_replay::scaled::{Probed, TapeEntry};
use std::collections::{BTreeMap, HashMap};

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
    /// Allocations TF could not make (not those its caller could do without).
    pub ooms: u64,
    /// TF's own peak of bytes in use: as the hook read it when it ended the run, or as the
    /// allocator logged it rising.
    pub peak: Option<u64>,
    /// The bytes of the regions the allocator took (it never returns them while it runs).
    pub reserved: u64,
}

/// A log line without TF's prefix (`I0000 00:00:1795433278.865093   23376 file.cc:1049] `),
/// and the thread that wrote it (0 when the line has no prefix).
fn payload(line: &str) -> (&str, u64) {
    match line.find("] ") {
        Some(i) if line.starts_with(['I', 'W', 'E']) && line[..i].contains(".cc:") => {
            let thread = line[..i].split_whitespace().nth(2).and_then(|t| t.parse().ok()).unwrap_or(0);
            (&line[i + 2..], thread)
        }
        _ => (line, 0),
    }
}

/// The value of `key: ` in a memory log line (a number, or a quoted string without quotes).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    let rest = &line[at..];
    match rest.strip_prefix('"') {
        Some(q) => q.find('"').map(|e| &q[..e]),
        None => rest.split_whitespace().next(),
    }
}

/// Reads `log` (a run's stderr) as a TF probe at `batch`; None when TF's allocator logged
/// nothing (not a TF program, or not on a BFC allocator).
pub fn read(log: &str, batch: u64) -> Option<TfRun> {
    let mut run = TfRun { probed: Probed { batch, entries: Vec::new(), ops: vec![String::new()] }, ..TfRun::default() };
    let mut names: HashMap<&str, u32> = HashMap::new();
    // Live allocations: by address; by requested size, latest last (stale ones skipped).
    let mut by_addr: HashMap<u64, u32> = HashMap::new();
    let mut by_size: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut live: Vec<bool> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    // Each allocation's entry on the tape.
    let mut at: Vec<usize> = Vec::new();
    // The memory log's tensors: id -> allocation; per thread, the free it announced.
    let mut tensors: HashMap<u64, u32> = HashMap::new();
    let mut announced: HashMap<u64, u32> = HashMap::new();
    let mut places = Places::default();
    let mut step = -1i64;
    // The allocator extending its pool is ours: the region it logs next is its.
    let mut extending = false;
    for line in log.lines() {
        let (p, thread) = payload(line);
        if let Some(rest) = p.strip_prefix("AllocateRaw ") {
            // `AllocateRaw NAME  BYTES ADDRESS` once served (`AllocateRaw NAME  BYTES` is the ask).
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() == 3
                && device_allocator(f[0])
                && let Ok(bytes) = f[1].parse::<u64>()
            {
                let alloc = live.len() as u32;
                let addr = u64::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0);
                // Where TF put it says which earlier frees were of which allocation.
                for (x, y) in places.allocated(addr, bytes, alloc, &at) {
                    live[x as usize] = false;
                    live[y as usize] = true;
                    by_size.entry(sizes[y as usize]).or_default().push(y);
                    if let Some(TapeEntry::Free { alloc }) = run.probed.entries.get_mut(places.free_entry(x)) {
                        *alloc = x;
                    }
                }
                live.push(true);
                sizes.push(bytes);
                at.push(run.probed.entries.len());
                by_size.entry(bytes).or_default().push(alloc);
                by_addr.insert(addr, alloc);
                run.probed.entries.push(TapeEntry::Alloc { bytes, stream: 0, op: 0, kind: Kind::Unknown, step });
            }
        } else if let Some(rest) = p.strip_prefix("DeallocateRaw ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() == 2
                && device_allocator(f[0])
                && let Ok(bytes) = f[1].parse::<u64>()
            {
                let named = announced.remove(&thread).filter(|&a| live[a as usize] && sizes[a as usize] == bytes);
                let alloc = named.or_else(|| {
                    let stack = by_size.get_mut(&bytes)?;
                    while let Some(a) = stack.pop() {
                        if live[a as usize] {
                            return Some(a);
                        }
                    }
                    None
                });
                if let Some(alloc) = alloc {
                    live[alloc as usize] = false;
                    places.freed(alloc, named.is_some(), run.probed.entries.len());
                    run.probed.entries.push(TapeEntry::Free { alloc });
                }
            }
        } else if let Some(rest) = p.strip_prefix("__LOG_MEMORY__ MemoryLogTensorAllocation ") {
            // Names the allocation at its address (the latest made there).
            if field(rest, "allocator_name: ").is_some_and(device_allocator)
                && let Some(addr) = field(rest, "ptr: ").and_then(|v| v.parse::<u64>().ok())
                && let Some(&alloc) = by_addr.get(&addr)
                && live[alloc as usize]
            {
                if let Some(id) = field(rest, "allocation_id: ").and_then(|v| v.parse().ok()) {
                    tensors.insert(id, alloc);
                }
                let kernel = field(rest, "kernel_name: ").unwrap_or("");
                if !kernel.is_empty() && !kernel.starts_with("Unknown") {
                    let next = run.probed.ops.len() as u32;
                    let op = *names.entry(kernel).or_insert(next);
                    if op == next {
                        run.probed.ops.push(kernel.to_string());
                    }
                    if let Some(TapeEntry::Alloc { op: o, .. }) = run.probed.entries.get_mut(at[alloc as usize]) {
                        *o = op;
                    }
                }
            }
        } else if let Some(rest) = p.strip_prefix("__LOG_MEMORY__ MemoryLogTensorDeallocation ") {
            // The id is the allocator's count of its allocations (from 1): the allocation
            // it names when its tensor's line said nothing else.
            if field(rest, "allocator_name: ").is_some_and(device_allocator)
                && let Some(id) = field(rest, "allocation_id: ").and_then(|v| v.parse::<u64>().ok())
                && let Some(alloc) = tensors.remove(&id).or_else(|| u32::try_from(id.checked_sub(1)?).ok())
                && live.get(alloc as usize) == Some(&true)
            {
                announced.insert(thread, alloc);
            }
        } else if let Some(n) = p.strip_prefix("oomscope-fit: step ") {
            if let Ok(n) = n.trim().parse::<i64>() {
                step = n;
                run.steps = n + 1;
                run.probed.entries.push(TapeEntry::Step { step: n });
            }
        } else if p.starts_with("oomscope-fit: stop at step ") {
            run.stopped = true;
        } else if let Some(n) = p.strip_prefix("oomscope-fit: peak ") {
            run.peak = n.trim().parse().ok();
        } else if let Some(rest) = p.strip_prefix("Extending allocation by ") {
            extending = rest.rsplit(" for ").next().is_some_and(|n| device_allocator(n.trim_end_matches('.')));
        } else if let Some(rest) = p.strip_prefix("Allocated memory at ") {
            let f: Vec<&str> = rest.split(" to ").collect();
            let hex = |v: &str| u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok();
            if std::mem::take(&mut extending)
                && let [from, to] = f[..]
                && let (Some(a), Some(b)) = (hex(from), hex(to))
            {
                run.reserved += b.saturating_sub(a);
            }
        } else if let Some(rest) = p.strip_prefix("New Peak memory usage of ") {
            // The allocator's own peak as it rose (level 2): what a run that failed reached.
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() >= 4
                && device_allocator(f[3].trim_end_matches('.'))
                && let Ok(n) = f[0].parse::<u64>()
            {
                run.peak = Some(run.peak.unwrap_or(0).max(n));
            }
        } else if p.contains("ran out of memory trying to allocate")
            && !p.contains("caller indicates that this is not a failure")
        {
            run.ooms += 1;
        }
    }
    (!live.is_empty()).then_some(run)
}

/// Where the live allocations are, for the frees TF's log gives by size alone: a free of
/// size S is first taken to be of the latest live allocation of size S; when TF later puts
/// an allocation where one of those still lies, that one was the one freed, and the
/// allocation first taken is live again (equal sizes: the figures in use are the same
/// either way, but where the free chunk lies decides where the next requests go).
#[derive(Default)]
struct Places {
    /// Live allocations by address: (allocation, rounded size).
    live: BTreeMap<u64, (u32, u64)>,
    /// Allocations taken to be freed whose place TF has not reused since: by address, and
    /// by requested size (latest last).
    guessed: BTreeMap<u64, u32>,
    guessed_by_size: HashMap<u64, Vec<u32>>,
    /// Per allocation: its address, rounded and requested size; the tape entry of its free.
    addr: Vec<u64>,
    rounded: Vec<u64>,
    bytes: Vec<u64>,
    free: HashMap<u32, usize>,
}

/// TF's BFC rounding of a request: 256 bytes at least, in 256-byte steps.
fn chunk(bytes: u64) -> u64 {
    bytes.max(256).div_ceil(256) * 256
}

impl Places {
    fn free_entry(&self, alloc: u32) -> usize {
        self.free.get(&alloc).copied().unwrap_or(usize::MAX)
    }

    /// Allocation `alloc` of `bytes`, placed at `addr` by TF: the swaps it reveals, each
    /// (allocation freed, allocation live again), the tape's free to be re-pointed from the
    /// second to the first (`free_entry` of the first, after this call). `at` is each
    /// allocation's tape entry.
    fn allocated(&mut self, addr: u64, bytes: u64, alloc: u32, at: &[usize]) -> Vec<(u32, u32)> {
        let end = addr + chunk(bytes);
        let mut swaps = Vec::new();
        // Live allocations under the new one: each was freed, by a free given to another of
        // its size, made while it was live.
        let under: Vec<u64> =
            self.live.range(..end).rev().take_while(|(a, (_, r))| **a + *r > addr).map(|(a, _)| *a).collect();
        for a in under {
            let (x, _) = self.live.remove(&a).expect("listed");
            let size = self.bytes[x as usize];
            let candidates = self.guessed_by_size.entry(size).or_default();
            let pick = candidates.iter().rposition(|&y| self.free.get(&y).is_some_and(|&f| f > at[x as usize]));
            if let Some(i) = pick {
                let y = candidates.remove(i);
                let entry = self.free.remove(&y).expect("guessed frees have entries");
                self.guessed.remove(&self.addr[y as usize]);
                self.free.insert(x, entry);
                self.live.insert(self.addr[y as usize], (y, self.rounded[y as usize]));
                swaps.push((x, y));
            }
        }
        // Frees whose place this reuses: no longer in doubt.
        // (Neither live nor guessed allocations overlap one another: walking down from the
        // end, the first that ends before `addr` is the last that can touch it.)
        let reused: Vec<(u64, u32)> = self
            .guessed
            .range(..end)
            .rev()
            .take_while(|(a, y)| **a + self.rounded[**y as usize] > addr)
            .map(|(a, y)| (*a, *y))
            .collect();
        for (a, y) in reused {
            self.guessed.remove(&a);
            if let Some(v) = self.guessed_by_size.get_mut(&self.bytes[y as usize]) {
                v.retain(|&z| z != y);
            }
        }
        debug_assert_eq!(self.addr.len(), alloc as usize);
        self.addr.push(addr);
        self.rounded.push(chunk(bytes));
        self.bytes.push(bytes);
        self.live.insert(addr, (alloc, chunk(bytes)));
        swaps
    }

    /// Allocation `alloc` freed by tape entry `entry`; `certain` when the log named it.
    fn freed(&mut self, alloc: u32, certain: bool, entry: usize) {
        let Some(&addr) = self.addr.get(alloc as usize) else { return };
        self.live.remove(&addr);
        self.free.insert(alloc, entry);
        if !certain {
            self.guessed.insert(addr, alloc);
            self.guessed_by_size.entry(self.bytes[alloc as usize]).or_default().push(alloc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocators_log_the_memory_log_and_the_step_marks_are_the_tape() {
        // Two tensors of 64 bytes; the memory log says the first is freed (a free by size
        // alone would take the latest), on thread 5, while thread 9 frees without a name.
        let log = "\
I0000 00:00:1.0   5 bfc_allocator.cc:281] AllocateRaw bfc_cpu_allocator_for_gpu  8
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  8 0x10
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw cpu  8 0x99
oomscope-fit: step 0
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  64 0x100
I0000 00:00:1.0   5 log_memory.cc:34] __LOG_MEMORY__ MemoryLogTensorAllocation { goo.gle/debugproto   step_id: 3 kernel_name: \"model/conv/Conv2D\" tensor { dtype: DT_FLOAT shape { dim { size: 16 } } allocation_description { requested_bytes: 64 allocated_bytes: 256 allocator_name: \"bfc_cpu_allocator_for_gpu\" allocation_id: 7 has_single_reference: true ptr: 256 } } }
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  64 0x200
I0000 00:00:1.0   5 log_memory.cc:34] __LOG_MEMORY__ MemoryLogTensorAllocation { goo.gle/debugproto   step_id: 3 kernel_name: \"Unknown\" tensor { allocation_description { requested_bytes: 64 allocator_name: \"bfc_cpu_allocator_for_gpu\" allocation_id: 8 ptr: 512 } } }
I0000 00:00:1.0   5 log_memory.cc:34] __LOG_MEMORY__ MemoryLogTensorDeallocation { goo.gle/debugproto   allocation_id: 7 allocator_name: \"bfc_cpu_allocator_for_gpu\" }
I0000 00:00:1.0   9 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 8
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 64
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 8
I0000 00:00:1.0   5 bfc_allocator.cc:176] Extending allocation by 2.00MiB bytes for bfc_cpu_allocator_for_gpu.
I0000 00:00:1.0   5 bfc_allocator.cc:186] Allocated memory at 0x1000 to 0x201000
I0000 00:00:1.0   5 bfc_allocator.cc:176] Extending allocation by 2.00MiB bytes for gpu_host_bfc.
I0000 00:00:1.0   5 bfc_allocator.cc:186] Allocated memory at 0x9000000 to 0x9200000
I0000 00:00:1.0   5 bfc_allocator.cc:616] New Peak memory usage of 2048 bytes for bfc_cpu_allocator_for_gpu
oomscope-fit: peak 4096
oomscope-fit: stop at step 1
";
        let run = read(log, 4).unwrap();
        assert!(run.stopped);
        assert_eq!(run.steps, 1);
        assert_eq!(run.peak, Some(4096));
        assert_eq!(run.reserved, 2 << 20);
        assert_eq!(run.probed.ops, ["", "model/conv/Conv2D"]);
        assert_eq!(
            run.probed.entries,
            vec![
                TapeEntry::Alloc { bytes: 8, stream: 0, op: 0, kind: Kind::Unknown, step: -1 },
                TapeEntry::Step { step: 0 },
                TapeEntry::Alloc { bytes: 64, stream: 0, op: 1, kind: Kind::Unknown, step: 0 },
                TapeEntry::Alloc { bytes: 64, stream: 0, op: 0, kind: Kind::Unknown, step: 0 },
                TapeEntry::Free { alloc: 0 },
                TapeEntry::Free { alloc: 1 },
            ]
        );
        assert!(read("I0000 x.cc:1] nothing here\n", 4).is_none());
    }

    #[test]
    fn where_tf_puts_a_later_request_says_which_of_two_equal_allocations_was_freed() {
        // Two 1 KiB allocations; a free of 1 KiB is first taken to be of the latest (at
        // 0x1400), but TF then puts a request at 0x1000: the first was the one freed.
        let log = "\
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  1024 0x1000
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  1024 0x1400
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 1024
I0000 00:00:1.0   5 bfc_allocator.cc:328] AllocateRaw bfc_cpu_allocator_for_gpu  512 0x1000
I0000 00:00:1.0   5 bfc_allocator.cc:693] DeallocateRaw bfc_cpu_allocator_for_gpu 1024
";
        let run = read(log, 2).unwrap();
        let frees: Vec<&TapeEntry> =
            run.probed.entries.iter().filter(|e| matches!(e, TapeEntry::Free { .. })).collect();
        assert_eq!(frees, [&TapeEntry::Free { alloc: 0 }, &TapeEntry::Free { alloc: 1 }]);
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
