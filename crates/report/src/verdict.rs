//! The verdict as people read it: the words for a [`Diagnosis`] (the cause, the figures
//! behind it, the fix), and the verdict's text as reports print it.

use oomscope_base::shape;
use oomscope_base::size::{human, human_bytes_driver};
use oomscope_diagnose::{Cause, Diagnosis, Elsewhere, Fix, Request, SplitFirst, StepBytes, Survivor};
use oomscope_format::op_text;
use oomscope_format::{Dump, Kind, KindBytes, SettingChange, Verdict, WhatIf};
use std::fmt::Write;

/// Width the verdict is wrapped to.
const WIDTH: usize = 100;

/// Sets `dump.verdict` (the diagnosis in words) when it has none. `replay(dump, set)` tries a
/// fix of the caching allocator's settings on the requests that led to the dump
/// (`oomscope_replay::what_if::from_history` replays the dump's own history); `&mut |_, _|
/// None` gives the diagnosis without a replayed fix.
pub fn attach(d: &mut Dump, replay: &mut dyn FnMut(&Dump, SettingChange) -> Option<WhatIf>) {
    if d.verdict.is_none() {
        let v = oomscope_diagnose::analyze(d, &mut |set| replay(d, set));
        d.verdict = Some(words(&v));
    }
}

/// The diagnosis in words: the headline, the evidence and the fix, as the dump keeps them.
pub fn words(d: &Diagnosis) -> Verdict {
    let ((headline, evidence), fix) = match d {
        Diagnosis::State(s) => {
            let mut f = fix(&s.fix);
            // A peak with its free memory in pieces: the setting is not enough, the batch is.
            if let oomscope_diagnose::Cause::Peak { pieces: Some(p), .. } = &s.cause {
                f = format!("{f}; {}", find_batch(p.fit.as_deref()));
            }
            (cause(&s.cause, &s.breakdown), f)
        }
        Diagnosis::Message(m) => (super::message::cause(&m.cause), super::message::fix(&m.fix)),
    };
    Verdict {
        kind: d.kind(),
        headline,
        evidence,
        fix,
        breakdown: d.breakdown().to_vec(),
        what_if: d.what_if().cloned(),
    }
}

/// A settings fix as the replay answered it.
fn tried(w: &WhatIf) -> String {
    use oomscope_base::size::torch as size;
    let conf = if w.settings.is_empty() { w.set.clone() } else { format!("{},{}", w.settings, w.set) };
    let (c, r) = (&w.changed, &w.as_run);
    if !c.out_of_memory {
        format!(
            "PYTORCH_CUDA_ALLOC_CONF={conf}: replayed with it, the same {} requests fit in the {} PyTorch could have \
             (peak reserved {} instead of {}; peak allocated {})",
            w.requests,
            size(w.capacity),
            size(c.peak_reserved),
            size(r.peak_reserved),
            size(c.peak_allocated)
        )
    } else {
        format!(
            "{} is not enough: replayed with it, the same {} requests still run out of the {} PyTorch could have \
             (peak reserved {}, peak allocated {}), so fragmentation is not all of it: reduce what is live at the failure \
             (a smaller batch, or tensors freed sooner), then set PYTORCH_CUDA_ALLOC_CONF={conf}",
            w.set,
            w.requests,
            size(w.capacity),
            size(c.peak_reserved),
            size(c.peak_allocated)
        )
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

/// `, shape [10000,32,28,28]`, or nothing.
fn shape_text(shape: &Option<Vec<i64>>) -> String {
    shape.as_ref().map_or(String::new(), |s| format!(", shape {}", shape::text(s)))
}

/// `957.03MiB for Conv2D, shape [10000,32,28,28]`
fn request_text(r: &Request) -> String {
    if r.requested == 0 {
        // A log that names the tensor but not its type: its size is not known.
        return format!("a tensor for {}{}", op_text(&r.op), shape_text(&r.shape));
    }
    format!("{} for {}{}", human(r.requested), op_text(&r.op), shape_text(&r.shape))
}

/// `activations 7.47GiB (99%), inputs 84.38MiB (1%)`
fn describe_breakdown(b: &[KindBytes], total: u64) -> String {
    b.iter()
        .filter(|k| k.bytes > 0)
        .map(|k| format!("{} {} ({:.0}%)", k.kind.plural(), human(k.bytes), pct(k.bytes, total)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn driver_sizes(sizes: &[u64]) -> String {
    sizes.iter().map(|&r| human_bytes_driver(r)).collect::<Vec<_>>().join(" and ")
}

/// What other processes and the device's refusals show.
fn elsewhere(e: &Elsewhere) -> Vec<String> {
    let mut evidence = Vec::new();
    if e.others > 0 {
        evidence.push(format!(
            "other processes hold {} of the {} device ({:.0}%)",
            human(e.others),
            human(e.total),
            pct(e.others, e.total)
        ));
    }
    if !e.refused.is_empty() {
        evidence.push(format!(
            "the device refused the allocator's region requests of {} before giving {}",
            driver_sizes(&e.refused),
            human(e.pool_peak)
        ));
    }
    evidence
}

fn node_lines(top: &[(String, u64)]) -> impl Iterator<Item = String> + '_ {
    top.iter().map(|(op, bytes)| format!("{op} holds {}", human(*bytes)))
}

/// The headline and the evidence.
fn cause(c: &Cause, b: &[KindBytes]) -> (String, Vec<String>) {
    match c {
        Cause::OutsideRequest { request, device_free, pool, pool_free, preallocated, elsewhere: e } => {
            let mut evidence = vec![format!(
                "the allocator's pool holds {} ({} of it free){}",
                human(*pool),
                human(*pool_free),
                if *preallocated { ", taken up front because allow_growth is off" } else { "" }
            )];
            evidence.extend(elsewhere(e));
            (
                format!(
                    "{} asked the device for {} outside the allocator's pool, and the device had only {} free: \
                     the pool and other processes had taken the rest",
                    op_text(&request.op),
                    human(request.requested),
                    human(*device_free)
                ),
                evidence,
            )
        }
        Cause::DeviceRefused { request, limit, limit_headroom, device_free, elsewhere: e } => {
            let mut evidence = elsewhere(e);
            evidence.push(format!(
                "the limit ({}) allowed {} more, but the device had {} free",
                human(*limit),
                human(*limit_headroom),
                human(*device_free)
            ));
            (
                format!(
                    "{} for {} was refused by the device, not by the allocator's limit: memory is held outside this allocator",
                    human(request.requested),
                    op_text(&request.op)
                ),
                evidence,
            )
        }
        Cause::PoolTookDevice { op, outside, refused, taken, card } => {
            pool_took_device_words(op, outside, refused, taken, card)
        }
        Cause::PartialUsage { request, live, nodes, top, layout_copies } => {
            partial_usage_words(request, live, nodes, top, layout_copies, b)
        }
        Cause::PartialFull { request, in_use, limit, free_tail } => {
            partial_full_words(request, in_use, limit, *free_tail)
        }
        Cause::PartialEmpty { request, in_use, limit } => (
            format!(
                "One request larger than the allocator's whole limit ({}): almost nothing ({}) was in use when {} failed",
                human(*limit),
                human(*in_use),
                request.as_ref().filter(|r| r.requested > 0).map_or_else(|| "it".to_string(), request_text)
            ),
            vec![format!(
                "Stats: {} in use of the {} limit ({:.2}%): no other tensor took the room",
                human(*in_use),
                human(*limit),
                pct(*in_use, *limit)
            )],
        ),
        Cause::BeyondAnyGpu { request, limit } => beyond_any_gpu_words(request, limit),
        Cause::DeviceMisreported { first, last } => (
            format!(
                "TensorFlow asked the device for a first pool region of {}, more than any GPU has (the largest \
                 hold 288 GB): it sizes that region from the memory the device reports, so that figure is wrong",
                human(*first)
            ),
            vec![format!(
                "the device refused {} and each smaller try down to {}: a driver or runtime (CUDA, ROCm) that \
                 misreads this GPU, not memory in use",
                human(*first),
                human(*last)
            )],
        ),
        Cause::PartialRequest { request } => (
            match request {
                Some(r) => format!(
                    "{} could not be allocated; the log does not show what else was in use, nor a failure after it",
                    request_text(r)
                ),
                None => "An allocation failed, but the log shows neither its size nor what else was in use".to_string(),
            },
            Vec::new(),
        ),
        Cause::SingleTensor { request, capacity, fixed } => (
            format!(
                "One tensor of {} ({}{}) is larger than all the memory this process can ever have free: {}",
                human(request.requested),
                op_text(&request.op),
                shape_text(&request.shape),
                human(capacity.saturating_sub(fixed.unwrap_or(0)))
            ),
            vec![match fixed {
                Some(fixed) => format!(
                    "{} can be had in all (pool and what the device could still give), of which weights, optimizer state and inputs take {}",
                    human(*capacity),
                    human(*fixed)
                ),
                None => format!(
                    "{} can be had in all (pool and what the device could still give); the input does not say which live tensors are weights or inputs",
                    human(*capacity)
                ),
            }],
        ),
        Cause::Growth { first, last, per_step, oom_step, survivors } => {
            growth_words(first, last, per_step, oom_step, survivors)
        }
        Cause::Fragmentation { request, pool_free, pieces, fragmentation, largest_free, pinning } => {
            fragmentation_words(request, pool_free, pieces, fragmentation, largest_free, pinning)
        }
        Cause::ManyOfOneSize { request, size, count, bytes, in_use } => (
            format!(
                "{count} tensors of {} hold {} of the {} in use, and the failed request ({} for {}) is one more of \
                 them: a loop that keeps a tensor every step grows this way (so would a very deep stack of \
                 identical layers)",
                human(*size),
                human(*bytes),
                human(*in_use),
                human(request.requested),
                op_text(&request.op)
            ),
            vec![format!(
                "{count} Chunks of size {size} totalling {} ({:.0}% of what is in use)",
                human(*bytes),
                pct(*bytes, *in_use)
            )],
        ),
        Cause::Peak { request, in_use, capacity, top, pieces: None } => peak_words(request, in_use, capacity, top, b),
        Cause::Peak { request, in_use, capacity, top, pieces: Some(p) } => {
            peak_in_pieces_words(request, *in_use, *capacity, top, p, b)
        }
        Cause::GrowingNoOom { first, last, per_step, limit, pool_peak, reached_near } => (
            format!(
                "No allocation failed, but live memory grows by {} per step: at this rate the limit is reached near step {reached_near}",
                human(*per_step)
            ),
            vec![
                format!("peak pool {} of the {} limit", human(*pool_peak), human(*limit)),
                format!(
                    "live bytes at step boundaries went from {} at step {} to {} at step {}",
                    human(first.bytes),
                    first.step,
                    human(last.bytes),
                    last.step
                ),
            ],
        ),
        Cause::Fits { peak, pool_peak, limit_known: false, .. } => (
            format!(
                "No allocation failed: the peak was {}; the GPU's size is not recorded, so the \
                 headroom is unknown (give it with --device SIZE)",
                human(*peak)
            ),
            vec![format!("the cache (reserved memory) peaked at {}", human(*pool_peak))],
        ),
        Cause::Fits { peak, limit, pool_peak, refused, others, limit_known: true } => {
            fits_words(peak, limit, pool_peak, refused, others)
        }
    }
}

const OPTIMIZER_DOMINATES: &str =
    "; optimizer state dominates: momentum keeps one slot per weight where Adam keeps two";

/// `for example 10 chunks of 1000`
fn eval_chunks(samples: u64, chunk: u64) -> String {
    let k = samples.div_ceil(chunk.max(1));
    let m = samples.div_ceil(k.max(1));
    format!("for example {k} chunks of {m}")
}

fn fix(f: &Fix) -> String {
    let dominates = |on: bool| if on { OPTIMIZER_DOMINATES } else { "" };
    match f {
        Fix::Nothing => "nothing to change".to_string(),
        Fix::DeviceShort { allow_growth: true } => {
            "nothing failed, but the device is short: keep in mind that other processes share it".to_string()
        }
        Fix::DeviceShort { allow_growth: false } => "nothing failed, but the pool took everything the device would give: let it grow on demand \
             (TF_FORCE_GPU_ALLOW_GROWTH=true) to leave memory to other processes and to libraries such as cuDNN"
            .to_string(),
        Fix::AllowGrowth { peak_in_use, fraction, total } => format!(
            "let the pool grow on demand instead of taking the device up front: TF_FORCE_GPU_ALLOW_GROWTH=true \
             (config.gpu_options.allow_growth = True); this run had {} in use at its peak, or cap the pool: \
             per_process_gpu_memory_fraction={fraction:.2} ({})",
            human(*peak_in_use),
            human((fraction * *total as f64) as u64)
        ),
        Fix::FreeDevice { others, fraction } => format!(
            "free device memory: other processes hold {} (nvidia-smi lists them), or cap this process below what is free: \
             per_process_gpu_memory_fraction={fraction:.2}",
            human(*others)
        ),
        Fix::GrowOrCap { fraction, card } => format!(
            "let the pool grow on demand: config.gpu_options.allow_growth = True (or TF_FORCE_GPU_ALLOW_GROWTH=true); or cap it so cuDNN and the desktop keep room: per_process_gpu_memory_fraction={fraction:.2}{}",
            if *card > 0 { format!(" ({})", human((fraction * *card as f64) as u64)) } else { String::new() }
        ),
        Fix::FromUsage { dominant, layout_copies } => from_usage_fix(dominant, layout_copies),
        Fix::WholeLog { split, state_first } => whole_log_fix(split, state_first),
        Fix::SplitBatch { batch: n, at_most, known, eval } => {
            let along = if *known { String::new() } else { format!(" (if its first dimension, {n}, is the batch)") };
            if *eval {
                format!(
                    "split the evaluation into chunks of at most {at_most}{along}: this tensor alone allows {at_most} of the {n}; \
                     `oomscope fit` finds the largest chunk by replay; average the results"
                )
            } else {
                format!(
                    "reduce the batch from {n} to at most {at_most}{along}: this tensor alone allows {at_most}; `oomscope fit` checks by replay"
                )
            }
        }
        Fix::RowTooLarge { row } => format!(
            "even one row of this tensor ({}) does not fit: make the sample smaller (resolution, sequence length) or use float16",
            human(*row)
        ),
        Fix::CheckDeviceMemory => "check that the driver and the runtime support this GPU (nvidia-smi or rocm-smi \
             should show its real memory), or give TensorFlow a limit of your own: \
             tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=MB)])"
            .to_string(),
        Fix::FindShape { request } => format!(
            "find the shape that makes this {} request: print the shapes going into the failing op (an uninitialized \
             or negative size, an overflow, a broadcast of two large dimensions make requests like it)",
            human(*request)
        ),
        Fix::ShrinkWorkingSet { need } => format!(
            "{}: a smaller batch (or sequence length, or resolution), or activation checkpointing; for which tensors, \
             give oomscope the whole log (TF prints the usage by node after the allocator's state) or run the program \
             under `oomscope run`",
            match need {
                Some(n) if *n > 0 => format!("cut at least {} from what is live", human(*n)),
                _ => "cut what is live at the failure".to_string(),
            }
        ),
        Fix::ShrinkTensor { below } => format!(
            "make this tensor smaller than {}: fewer samples per call, a smaller resolution, or float16",
            human(*below)
        ),
        Fix::KeepNumbers { culprit } => format!(
            "free what {} keeps each step: in Python, keep a number (loss.item(), float(x)) instead of the tensor, and do \
             not append tensors to a list across steps; a larger device only delays the OOM",
            culprit.as_deref().unwrap_or("the growing tensors")
        ),
        Fix::FreeBeforeLimit { culprit } => format!(
            "free what {} keeps each step before it reaches the limit",
            culprit.as_deref().unwrap_or("the growing tensors")
        ),
        Fix::MaxSplitSize { what_if: None } => "cap splitting of large blocks: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128, or call torch.cuda.empty_cache() \
             between phases that allocate different sizes"
            .to_string(),
        Fix::ExpandableSegments { what_if: None } => "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments then grow in place and free pieces can merge \
             (PyTorch's own OOM message suggests it)"
            .to_string(),
        Fix::MaxSplitSize { what_if: Some(w) } | Fix::ExpandableSegments { what_if: Some(w) } => tried(w),
        Fix::GarbageCollection { empty_regions } => format!(
            "turn on garbage collection of empty regions (TF_ENABLE_GPU_GARBAGE_COLLECTION=true): {empty_regions} region(s) hold nothing and \
             would be returned for one large enough"
        ),
        Fix::OneRegion { regions } => format!(
            "preallocate one region (allow_growth off): free blocks in different regions cannot merge, and this pool is {regions} regions"
        ),
        Fix::Reorder { pinning, rounded } => format!(
            "allocate long-lived tensors before short-lived ones, or free the tensors that split the free space{} before \
             asking for {}; or let the driver place each tensor: TF_GPU_ALLOCATOR=cuda_malloc_async",
            pinning.as_ref().map_or(String::new(), |op| format!(" ({op} here)")),
            human(*rounded)
        ),
        Fix::ReduceBatch { from, fraction, optimizer_dominates, known, fit } => format!(
            "reduce the batch{}: the batch-sized part must shrink to {:.0}% or less of what it is at {from} to get past \
             this allocation alone, and later ones (the backward pass, the optimizer's state) may need more; {}{}",
            if *known { String::new() } else { format!(" (if the failed tensor's first dimension, {from}, is the batch)") },
            // Down, not to nearest: 99.6% must read 99%, or the fix would not fit.
            (fraction * 100.0).floor(),
            find_batch(fit.as_deref()),
            dominates(*optimizer_dominates)
        ),
        Fix::KeepLess { size } => format!(
            "if a loop keeps each step's output (appending tensors to a list, summing losses as tensors), keep a \
             number instead (float(x), loss.item()) or write it out; if these {} tensors are layers' activations, \
             reduce the batch; `oomscope run` records steps and tells the two apart",
            human(*size)
        ),
        Fix::EvenBatchOne { optimizer_dominates } => format!(
            "even a batch of 1 would not fit: use float16 activations (half the bytes), gradient checkpointing, or a smaller input{}",
            dominates(*optimizer_dominates)
        ),
        Fix::CutBatchSized { fraction, optimizer_dominates, fit } => format!(
            "cut the batch-sized memory to {:.0}% or less (a smaller batch, resolution or sequence length): that gets \
             past this allocation, and later ones may need more; {}{}",
            (fraction * 100.0).floor(),
            find_batch(fit.as_deref()),
            dominates(*optimizer_dominates)
        ),
        Fix::TrainAt { batch, from, free_at_peak } => format!(
            "train at batch {batch} (or keep batch {from} with gradient accumulation over {} steps): replayed through the \
             allocator, batch {batch} fits with {} free at its peak and batch {} does not",
            from.div_ceil((*batch).max(1)),
            human(*free_at_peak),
            batch + 1
        ),
        Fix::EvalInChunks { chunk, samples, free_at_peak } => format!(
            "split the evaluation into chunks of at most {chunk} ({}), and average the results; replayed through the \
             allocator, a chunk of {chunk} fits with {} free at its peak",
            eval_chunks(*samples, *chunk),
            human(*free_at_peak)
        ),
        Fix::NothingFits { needed, capacity } => format!(
            "even batch 1 does not fit: it needs {} and {} can be had; use float16 activations, gradient \
             checkpointing, or a smaller input",
            human(*needed),
            human(*capacity)
        ),
        Fix::GrowthReplayed { peak_pool, cap } => growth_replayed_fix(peak_pool, cap),
    }
}

/// How to find the batch that trains: the `oomscope fit` line for this very command, when
/// the run's command is known.
fn find_batch(fit: Option<&str>) -> String {
    match fit {
        Some(line) if line.contains("{batch}") => format!(
            "`{line}` finds the largest batch that trains, replaying this program's own step at any batch and \
             checking the answer by a run"
        ),
        Some(line) => format!(
            "`{line}`, with {{batch}} where the batch goes, finds the largest batch that trains, replaying this \
             program's own step at any batch and checking the answer by a run"
        ),
        None => "which batch trains is found by trying (for a PyTorch program, `oomscope fit -- YOUR TRAINING COMMAND`, \
                 with {batch} where the batch goes, finds it by replaying the program's own step and checks it by a run)"
            .to_string(),
    }
}

/// Wraps `text` at spaces to `WIDTH`, the first line after `first`, the rest after `rest`.
fn wrap(out: &mut String, first: &str, rest: &str, text: &str) {
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split(' ') {
        if !empty && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

/// `Verdict: <class>` and the indented headline, evidence and fix.
pub fn render(v: &Verdict) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Verdict: {}", v.kind.name());
    wrap(&mut o, "  ", "  ", &v.headline);
    for e in &v.evidence {
        wrap(&mut o, "  - ", "    ", e);
    }
    wrap(&mut o, "Fix: ", "     ", &v.fix);
    o
}

fn peak_words(
    request: &Request,
    in_use: &u64,
    capacity: &u64,
    top: &[(String, u64)],
    b: &[KindBytes],
) -> (String, Vec<String>) {
    let need = in_use + request.rounded;
    let live: u64 = b.iter().map(|k| k.bytes).sum();
    let dominant = b.first().map(|k| k.kind).unwrap_or(Kind::Activation);
    // (A log that gives the live memory but not what it is, a BFC Stats block alone, says
    // nothing by kind.)
    let what = if dominant == Kind::Unknown || live == 0 {
        String::new()
    } else {
        format!("; {} take {} of the {} live", dominant.plural(), human(b.first().map_or(0, |k| k.bytes)), human(live))
    };
    // (Needed just under what can be had: a pool full to within its rounding, said so, not
    // as a `>` the figures do not show.)
    let close = need <= *capacity && capacity - need < (request.rounded / 50).max(16 << 20);
    let mut evidence = vec![if close {
        format!(
            "{} live + {} requested = {} needed, within {} of the {} that can be had: too close for the free \
             memory to lie in one piece",
            human(*in_use),
            human(request.rounded),
            human(need),
            human(capacity - need),
            human(*capacity)
        )
    } else {
        format!(
            "{} live + {} requested = {} needed; {} can be had",
            human(*in_use),
            human(request.rounded),
            human(need),
            human(*capacity)
        )
    }];
    if live > 0 {
        evidence.push(format!("live by kind: {}", describe_breakdown(b, live)));
    }
    evidence.extend(node_lines(top));
    (
        if close {
            format!(
                "A true peak: {} is needed at this point, the whole of the {} that can be had but {}{what}",
                human(need),
                human(*capacity),
                human(capacity - need)
            )
        } else {
            format!("A true peak: {} is needed at this point and {} can be had{what}", human(need), human(*capacity))
        },
        evidence,
    )
}

fn fragmentation_words(
    request: &Request,
    pool_free: &u64,
    pieces: &Option<u64>,
    fragmentation: &f64,
    largest_free: &Option<u64>,
    pinning: &[(Option<String>, u64)],
) -> (String, Vec<String>) {
    let mut evidence = vec![match pieces {
        Some(pieces) => format!(
            "{} free in {pieces} pieces ({:.1}% fragmentation); the request needs {} in one piece",
            human(*pool_free),
            fragmentation * 100.0,
            human(request.rounded)
        ),
        None => format!(
            "the pool cannot grow, and the allocator fails a request only when no free chunk holds it; the \
             input does not list the chunks, so the sizes of the {} free pieces are not known",
            human(*pool_free)
        ),
    }];
    if !pinning.is_empty() {
        let names: Vec<String> = pinning
            .iter()
            .map(|(op, n)| match op {
                Some(op) => format!("{op} ({n})"),
                None => format!("{n} the input does not name"),
            })
            .collect();
        evidence.push(format!("live tensors sitting between free blocks: {}", names.join(", ")));
    }
    let largest = match largest_free {
        Some(l) => format!("the largest free block is {}", human(*l)),
        None => "no free block is large enough".to_string(),
    };
    (
        format!(
            "{} is free in the pool, but {largest}: the {} request does not fit in any piece",
            human(*pool_free),
            human(request.rounded)
        ),
        evidence,
    )
}

fn growth_words(
    first: &StepBytes,
    last: &StepBytes,
    per_step: &u64,
    oom_step: &i64,
    survivors: &[Survivor],
) -> (String, Vec<String>) {
    let mut evidence = vec![format!(
        "live bytes at step boundaries went from {} at step {} to {} at step {}: {} per step",
        human(first.bytes),
        first.step,
        human(last.bytes),
        last.step,
        human(*per_step)
    )];
    for s in survivors {
        evidence.push(format!(
            "{}: {} tensors from steps {}..{} are still live ({})",
            s.op,
            s.tensors,
            s.first_step,
            s.last_step,
            human(s.bytes)
        ));
    }
    (
        format!(
            "Live memory grows by {} every step until the OOM at step {oom_step}: tensors made in earlier steps are never freed",
            human(*per_step)
        ),
        evidence,
    )
}

fn fits_words(peak: &u64, limit: &u64, pool_peak: &u64, refused: &[u64], others: &u64) -> (String, Vec<String>) {
    let mut evidence = vec![format!("peak pool {} of the {} limit", human(*pool_peak), human(*limit))];
    if !refused.is_empty() {
        evidence.push(format!(
            "the device refused region requests of {}: the pool got {} of its {} limit{}",
            driver_sizes(refused),
            human(*pool_peak),
            human(*limit),
            if *others > 0 { format!(" (other processes hold {})", human(*others)) } else { String::new() }
        ));
    }
    (
        format!(
            "No allocation failed: the peak was {} of the {} limit, {} to spare",
            human(*peak),
            human(*limit),
            human(limit.saturating_sub(*peak))
        ),
        evidence,
    )
}

fn beyond_any_gpu_words(request: &Request, limit: &Option<u64>) -> (String, Vec<String>) {
    (
        match limit {
            Some(l) => format!(
                "One tensor of {} ({}{}) is more than the allocator's whole limit, {}",
                human(request.requested),
                op_text(&request.op),
                shape_text(&request.shape),
                human(*l)
            ),
            None => format!(
                "One tensor of {} ({}{}) is more than any GPU has (the largest hold 288 GB)",
                human(request.requested),
                op_text(&request.op),
                shape_text(&request.shape)
            ),
        },
        vec![
            "a request this size comes from a shape the code did not mean (a size computed wrong, a dimension \
          that overflowed, two large dimensions broadcast together), not from the memory in use"
                .to_string(),
        ],
    )
}

fn partial_full_words(
    request: &Option<Request>,
    in_use: &Option<u64>,
    limit: &Option<u64>,
    free_tail: usize,
) -> (String, Vec<String>) {
    let mut evidence = Vec::new();
    match (in_use, limit) {
        (Some(u), Some(l)) => evidence.push(format!(
            "Stats: {} in use of the {} limit ({:.1}%): {} was left for any request",
            human(*u),
            human(*l),
            pct(*u, *l),
            human(l.saturating_sub(*u))
        )),
        _ if free_tail > 0 => evidence.push(format!(
            "the allocator's occupancy bar is in use but for its last {free_tail} of 100 cells: the pool's one free \
             piece, at its end, was smaller than the request"
        )),
        _ => evidence
            .push("the allocator's occupancy bar is all in use (`*`, and `x` for chunks' rounding): no free chunk was left in its pool".to_string()),
    }
    if let Some(r) = request.as_ref().filter(|r| r.requested > 0) {
        evidence.push(format!("{} failed", request_text(r)));
    }
    (
        "A true peak: the live tensors filled the allocator, so whatever was asked next did not fit; the log \
         does not say which tensors they were"
            .to_string(),
        evidence,
    )
}

fn partial_usage_words(
    request: &Option<Request>,
    live: &u64,
    nodes: &u64,
    top: &[(String, u64)],
    layout_copies: &Option<u64>,
    b: &[KindBytes],
) -> (String, Vec<String>) {
    let mut evidence = vec![format!("live by kind: {}", describe_breakdown(b, *live))];
    evidence.extend(node_lines(top));
    if let Some(layout) = layout_copies {
        evidence.push(format!(
            "{} ({:.0}%) is held by *-LayoutOptimizer nodes: copies TF's layout optimizer made to turn NHWC tensors into the NCHW cuDNN wants, and back",
            human(*layout),
            pct(*layout, *live)
        ));
    }
    (
        format!(
            "{}{} was in use in {nodes} nodes{}; the log shows neither the limit nor the free memory, so a true peak cannot be told from fragmentation",
            request.as_ref().map_or(String::new(), |r| format!("{} failed; ", request_text(r))),
            human(*live),
            b.first().map_or(String::new(), |k| format!(", {} the most ({})", k.kind.plural(), human(k.bytes)))
        ),
        evidence,
    )
}

fn pool_took_device_words(
    op: &Option<String>,
    outside: &bool,
    refused: &[u64],
    taken: &u64,
    card: &u64,
) -> (String, Vec<String>) {
    let same = refused.len() >= 2 && refused.iter().all(|&r| r == refused[0]);
    let mut evidence = vec![if !same {
        format!(
            "the device refused the allocator's first region requests, {}; TF backs off by 10% and logs each refusal, so the pool took the next size, {} ({taken} bytes)",
            driver_sizes(refused),
            human_bytes_driver(*taken)
        )
    } else {
        format!(
            "the device refused {} requests of {}, the same size each time: a library retrying beside the pool, not the pool backing off",
            refused.len(),
            human_bytes_driver(refused[0])
        )
    }];
    // The device refused `last` and then gave `taken`: what others held lies between. Only a
    // back-off (each refusal smaller, the grant below the last) bounds it; mixed sizes do not.
    let backoff = !same && refused.windows(2).all(|w| w[1] < w[0]);
    if let (true, Some(&last)) = (*card > 0 && backoff, refused.last().filter(|&&l| l > *taken && l <= *card)) {
        evidence.push(format!(
            "TF's limit was the whole card, {}: so other processes (the desktop) held between {} and {}",
            human(*card),
            human(card.saturating_sub(last)),
            human(card.saturating_sub(*taken))
        ));
    }
    let who = op.as_deref().unwrap_or("the run");
    let headline = if *card == 0 && op.is_none() && same {
        format!(
            "the device refused {} again and again (a library's memory beside TensorFlow's pool, cuBLAS's or \
             cuDNN's): the pool had taken what the device would give, and the log shows neither the card's memory \
             nor what else held it (TF's own pool, other processes)",
            human_bytes_driver(refused.first().copied().unwrap_or(0))
        )
    } else if *card == 0 && op.is_none() {
        format!(
            "TensorFlow's pool got less than it asked for: the device refused its first region and gave {}; \
             the log shows neither the card's memory nor a failure after it, so what held the rest (other \
             processes, the desktop, the driver's share on Windows) cannot be told",
            human_bytes_driver(*taken)
        )
    } else if *outside {
        format!(
            "{who} could not get memory outside TensorFlow's pool (CUDNN_STATUS_ALLOC_FAILED): the pool had taken everything the device would give, and other processes held the rest"
        )
    } else {
        "TensorFlow's pool took everything the device would give, and other processes held the rest".to_string()
    };
    (headline, evidence)
}

fn growth_replayed_fix(peak_pool: &u64, cap: &Option<(f64, u64)>) -> String {
    let mut fix = format!(
        "let the pool grow on demand: TF_FORCE_GPU_ALLOW_GROWTH=true (config.gpu_options.allow_growth = True); \
         replayed with it, the pool peaks at {} and everything else gets the memory it asks for",
        human(*peak_pool)
    );
    if let Some((fraction, bytes)) = cap {
        let _ = write!(
            fix,
            "; or cap the pool: per_process_gpu_memory_fraction={fraction:.2} ({}), which also replays without an OOM",
            human(*bytes)
        );
    }
    fix
}

fn whole_log_fix(split: &Option<SplitFirst>, state_first: &bool) -> String {
    // Where to look in the log: TF <= 1.12 printed the state, then "Ran out of memory";
    // later releases print "ran out of memory", then the state.
    let fix = if *state_first {
        "for the cause, give oomscope the whole log: this version of TF prints the allocator's state (the \
         \"Bin\", \"Chunk\" and \"Stats\" lines) before \"Ran out of memory\" (or run the program under \
         `oomscope run`, which reads it even when TF's logs are silenced)"
    } else {
        "for the cause, give oomscope the whole log: TF prints the allocator's state after \"ran out of \
         memory\" (or run the program under `oomscope run`, which reads it even when TF's logs are silenced)"
    };
    match split {
        Some(SplitFirst { n, rows, part }) if *part > 0 => format!(
            "if the first dimension, {n}, is the batch, split it: in chunks of {rows}, this tensor is {}; {fix}",
            human(*part)
        ),
        _ => fix.to_string(),
    }
}

fn from_usage_fix(dominant: &Option<Kind>, layout_copies: &Option<u64>) -> String {
    let mut fix = match dominant {
        Some(Kind::Activation) | Some(Kind::Backward) | Some(Kind::Input) | None => {
            "reduce the batch: activations and gradients scale with it".to_string()
        }
        Some(Kind::Optimizer) => {
            "optimizer state dominates: momentum keeps one slot per weight where Adam keeps two".into()
        }
        Some(_) => "reduce the model or its precision (float16 halves every tensor)".into(),
    };
    if let Some(layout) = layout_copies {
        let _ = write!(
            fix,
            "; and build the model channels-first (data_format=\"NCHW\" / \"channels_first\") so the GPU needs no transposed copies ({} here)",
            human(*layout)
        );
    }
    fix
}

/// A true peak whose failing request also met free memory in pieces: the replay with the
/// setting that joins pieces still ran out of memory, so the pieces are a note, not the cause.
fn peak_in_pieces_words(
    request: &Request,
    in_use: u64,
    capacity: u64,
    top: &[(String, u64)],
    p: &oomscope_diagnose::Pieces,
    b: &[KindBytes],
) -> (String, Vec<String>) {
    let w = &p.replayed;
    let live: u64 = b.iter().map(|k| k.bytes).sum();
    let mut evidence = vec![
        format!(
            "replayed with {} (free memory in one piece), the same {} requests still run out of the {} that can be \
             had",
            w.set,
            w.requests,
            human(w.capacity.max(capacity))
        ),
        format!(
            "at this request {} was live{}{}: fragmentation, but not all of it",
            human(in_use),
            if p.pool_free > 0 {
                format!(
                    " and {} free in the cache, in pieces (the largest {})",
                    human(p.pool_free),
                    human(p.largest_free)
                )
            } else {
                " and nothing free in the cache".to_string()
            },
            if p.room > 0 {
                format!(
                    ", with {} left on the device, less than the {} segment the request needed",
                    human(p.room),
                    human(p.segment)
                )
            } else {
                String::new()
            }
        ),
        format!("live by kind: {}", describe_breakdown(b, live)),
    ];
    evidence.extend(node_lines(top));
    (
        format!(
            "A true peak: the requests need more than the {} that can be had, even with {} (replayed); the {} \
             request failed first, where no free piece was large enough",
            human(w.capacity.max(capacity)),
            w.set,
            human(request.rounded)
        ),
        evidence,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::VerdictKind;

    /// What other processes held is bounded by a back-off (refused 8 GiB, then 7.2, then given
    /// 6.48 of a 10 GiB card: between 2.8 and 3.52 GiB), never by refusals of mixed sizes.
    #[test]
    fn others_are_bounded_only_by_a_back_off() {
        let gib = |x: f64| (x * (1u64 << 30) as f64) as u64;
        let card = gib(10.0);
        let (_, e) = pool_took_device_words(&None, &false, &[gib(8.0), gib(7.2)], &gib(6.48), &card);
        assert!(e.iter().any(|l| l.contains("held between 2.80GiB and 3.52GiB")), "{e:?}");
        let (_, e) = pool_took_device_words(&None, &false, &[gib(1.0), gib(7.2)], &gib(6.48), &card);
        assert!(!e.iter().any(|l| l.contains("held between")), "{e:?}");
    }

    /// 7 MiB tensors kept alive on a 1 GiB device: two fit in each 20 MiB segment.
    fn seven_mib_tensors(settings: &str, history: usize) -> Dump {
        use oomscope_core::caching::{Caching, CachingOptions, Settings};
        let mut opts = CachingOptions::new(0);
        opts.history = history;
        let device = Box::new(oomscope_core::device::SimDevice::new(1 << 30, 0));
        let mut c = Caching::new(Settings::parse(settings).unwrap(), opts, device);
        c.mark_step(0, 0);
        for _ in 0..130 {
            if c.allocate(7 << 20, 0, oomscope_core::record::Meta::default()).is_err() {
                break;
            }
        }
        c.snapshot(oomscope_format::Source::default())
    }

    #[test]
    fn the_fragmentation_verdict_quotes_the_replay() {
        let d = seven_mib_tensors("", 10_000);
        let v = oomscope_diagnose::analyze(&d, &mut |set| oomscope_replay::what_if::from_history(&d, set));
        assert_eq!(v.kind(), oomscope_format::VerdictKind::Fragmentation, "{v:?}");
        let Some(Fix::ExpandableSegments { what_if: Some(w) }) = v.state().map(|s| &s.fix) else { panic!("{v:?}") };
        assert!(!w.changed.out_of_memory);
        let words = words(&v);
        assert!(
            words.fix.starts_with(
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: replayed with it, the same 103 requests fit in the "
            ),
            "{}",
            words.fix
        );
        assert_eq!(words.what_if.as_ref(), Some(w));
        // Already on: the replay tries capping splits, and says it is not enough.
        let d = seven_mib_tensors("expandable_segments:True", 10_000);
        assert!(d.oom.is_none(), "103 tensors of 7 MiB fit in expandable segments");
    }

    #[test]
    fn wraps_long_lines_under_the_width() {
        let v = Verdict {
            kind: VerdictKind::Peak,
            headline: "word ".repeat(40).trim().to_string(),
            evidence: vec!["short".into()],
            fix: "do it".into(),
            breakdown: vec![],
            what_if: None,
        };
        let text = render(&v);
        assert!(text.starts_with("Verdict: true peak\n  word word"), "{text}");
        assert!(text.lines().all(|l| l.len() <= WIDTH), "{text}");
        assert!(text.contains("\n  - short\nFix: do it\n"));
    }

    #[test]
    fn the_words_carry_the_figures() {
        let d = Diagnosis::State(oomscope_diagnose::StateDiagnosis {
            cause: Cause::Peak {
                request: Request { op: Some("x".into()), requested: 450 << 20, rounded: 450 << 20, shape: None },
                in_use: 7 << 30,
                capacity: 8 << 30,
                top: vec![("a".into(), 1 << 30)],
                pieces: None,
            },
            fix: Fix::ReduceBatch {
                from: 8,
                fraction: 0.7999,
                optimizer_dominates: true,
                known: true,
                fit: Some("oomscope fit -- python train.py --batch {batch}".into()),
            },
            breakdown: vec![KindBytes { kind: Kind::Activation, bytes: 7 << 30 }],
        });
        let v = words(&d);
        assert_eq!(v.kind, VerdictKind::Peak);
        assert!(v.headline.contains("7.44GiB is needed at this point and 8.00GiB can be had"), "{}", v.headline);
        assert_eq!(v.evidence[2], "a holds 1.00GiB");
        assert!(
            v.fix.starts_with(
                "reduce the batch: the batch-sized part must shrink to 79% or less of what it is at 8 to get past this \
                 allocation alone, and later ones (the backward pass, the optimizer's state) may need more; \
                 `oomscope fit -- python train.py --batch {batch}` finds the largest batch that trains"
            ),
            "{}",
            v.fix
        );
        assert!(v.fix.ends_with("Adam keeps two"), "{}", v.fix);
    }
}
