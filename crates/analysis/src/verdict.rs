//! Why the memory ran out, and what to change: a verdict read from a [`Dump`] alone, so it
//! works the same for replayed, simulated, imported and live dumps.
//!
//! The classes, checked in this order (the first that holds is the cause):
//! 1. **others** — the request was for memory outside the pool (cuDNN) and the pool, or
//!    other processes, had taken the device; or the allocator's limit allowed the request
//!    but the device did not have it;
//! 2. **single tensor** — the request is larger than everything the process could ever have
//!    free (its capacity minus weights, optimizer state and inputs);
//! 3. **growth** — live bytes at step boundaries keep rising and tensors from earlier steps
//!    are still live;
//! 4. **fragmentation** — enough bytes are free, but not in one block;
//! 5. **peak** — the working set is simply larger than the device.
//!
//! Headlines are sentences, capitalized here unless they begin with an op name or a size.
//! A fix is never one that is already on (garbage collection when it is enabled, growth
//! when the pool already grows). Fixes here are estimates from the dump; with a workload at
//! hand, [`crate::workload::fit::refine`] replaces them with replayed answers.

use oomscope_base::size::human;
use oomscope_core::record::Kind;
use oomscope_dump::{Dump, ImportedFrom, KindBytes, Mode, OomRecord, Section, Verdict, VerdictKind};
use std::collections::BTreeMap;

/// Bytes the process could have in one piece at the failure beyond what the pool holds:
/// a new region within both the limit and what the device had free.
fn growable(o: &OomRecord) -> u64 {
    o.limit_headroom.min(o.device_free) / 256 * 256
}

/// All the memory the process could have had: its pool plus what it could still obtain.
fn capacity(o: &OomRecord) -> u64 {
    o.pool_bytes + growable(o)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

fn shape_text(shape: &Option<Vec<i64>>) -> String {
    match shape {
        Some(s) => format!(", shape [{}]", s.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
        None => String::new(),
    }
}

/// Live bytes by kind (recorded, or inferred from op names), largest first. From the chunks
/// when they carry op names, else from the usage listing (an imported log's chunks do not).
pub fn breakdown(d: &Dump) -> Vec<KindBytes> {
    let mut by: BTreeMap<Kind, u64> = BTreeMap::new();
    if d.live_chunks().any(|c| c.op.is_some()) || d.usage_by_node.is_empty() {
        for c in d.live_chunks() {
            *by.entry(c.kind()).or_default() += c.size;
        }
    } else {
        for n in &d.usage_by_node {
            *by.entry(Kind::infer(&n.op)).or_default() += n.bytes;
        }
        if let Some([_, rest]) = d.imported.as_ref().and_then(|i| i.usage_remaining) {
            *by.entry(Kind::Unknown).or_default() += rest;
        }
    }
    let mut v: Vec<KindBytes> = by.into_iter().map(|(kind, bytes)| KindBytes { kind, bytes }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    v
}

fn bytes_of(b: &[KindBytes], kinds: &[Kind]) -> u64 {
    b.iter().filter(|k| kinds.contains(&k.kind)).map(|k| k.bytes).sum()
}

/// Sets `dump.verdict` when it has none.
pub fn attach(d: &mut Dump) {
    if d.verdict.is_none() {
        d.verdict = Some(analyze(d));
    }
}

/// The verdict for a dump.
pub fn analyze(d: &Dump) -> Verdict {
    let b = breakdown(d);
    if d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TfLog) && !complete_log(d) {
        return partial_log(d, b);
    }
    // Up to the failure: after it (with --keep-going) the failed allocations flatten the curve.
    let growth = growth(d, d.oom.as_ref().map_or(i64::MAX, |o| o.step));
    let Some(o) = &d.oom else {
        return fits(d, b, growth);
    };
    if let Some(v) = others(d, o, &b) {
        return v;
    }
    if let Some(v) = single_tensor(d, o, &b) {
        return v;
    }
    if let Some(g) = growth {
        return growth_verdict(d, o, b, g);
    }
    if let Some(v) = fragmentation(d, o, &b) {
        return v;
    }
    peak(d, o, b)
}

fn others(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<Verdict> {
    let dev = &d.device;
    let a = &d.allocator;
    let pool_free = o.pool_bytes.saturating_sub(o.bytes_in_use);
    let refused: Vec<String> =
        d.refusals.iter().filter(|r| !r.outside).map(|r| oomscope_base::size::human_bytes_driver(r.bytes)).collect();
    let mut evidence = Vec::new();
    if dev.others > 0 {
        evidence.push(format!(
            "other processes hold {} of the {} device ({:.0}%)",
            human(dev.others),
            human(dev.total),
            pct(dev.others, dev.total)
        ));
    }
    if !refused.is_empty() {
        evidence.push(format!(
            "the device refused the allocator's region requests of {} before giving {}",
            refused.join(" and "),
            human(d.stats.peak_pool_bytes)
        ));
    }
    let fix_growth_or_fraction = |need: u64| -> String {
        let usable = dev.total.saturating_sub(dev.others).saturating_sub(need);
        let fraction = (usable as f64 / dev.total.max(1) as f64 * 20.0).floor() / 20.0;
        let mut fix = String::new();
        if !a.allow_growth {
            fix.push_str(&format!(
                "let the pool grow on demand instead of taking the device up front: TF_FORCE_GPU_ALLOW_GROWTH=true \
                 (config.gpu_options.allow_growth = True); this run had {} in use at its peak",
                human(d.stats.peak_bytes_in_use)
            ));
            fix.push_str(&format!(
                ", or cap the pool: per_process_gpu_memory_fraction={fraction:.2} ({})",
                human((fraction * dev.total as f64) as u64)
            ));
        } else {
            fix.push_str(&format!(
                "free device memory: other processes hold {} (nvidia-smi lists them), or cap this process below what is free: \
                 per_process_gpu_memory_fraction={fraction:.2}",
                human(dev.others)
            ));
        }
        fix
    };
    if o.outside {
        evidence.insert(
            0,
            format!(
                "the allocator's pool holds {} ({} of it free){}",
                human(o.pool_bytes),
                human(pool_free),
                if a.allow_growth { "" } else { ", taken up front because allow_growth is off" }
            ),
        );
        return Some(Verdict {
            kind: VerdictKind::Others,
            headline: format!(
                "{} asked the device for {} outside the allocator's pool, and the device had only {} free: \
                 the pool and other processes had taken the rest",
                o.op,
                human(o.requested),
                human(o.device_free)
            ),
            evidence,
            fix: fix_growth_or_fraction(o.requested),
            breakdown: b.to_vec(),
        });
    }
    // The limit allowed the request; the device did not have it.
    let grow = growable(o);
    if grow < o.rounded && o.limit_headroom >= o.rounded && o.largest_free_block < o.rounded {
        evidence.push(format!(
            "the limit ({}) allowed {} more, but the device had {} free",
            human(a.limit),
            human(o.limit_headroom),
            human(o.device_free)
        ));
        return Some(Verdict {
            kind: VerdictKind::Others,
            headline: format!(
                "{} for {} was refused by the device, not by the allocator's limit: memory is held outside this allocator",
                human(o.requested),
                o.op
            ),
            evidence,
            fix: fix_growth_or_fraction(0),
            breakdown: b.to_vec(),
        });
    }
    None
}

/// A TF log with what the full analysis needs: the request, and the limit and usage.
fn complete_log(d: &Dump) -> bool {
    d.has(Section::Request)
        && d.allocator.limit > 0
        && (d.has(Section::Totals) || d.has(Section::Stats))
        && d.oom.as_ref().is_some_and(|o| !o.outside && o.requested > 0)
}

/// What a partial TF log allows: the preallocation story when the device refused regions,
/// else what the usage listing or the request show, said to be partial.
fn partial_log(d: &Dump, b: Vec<KindBytes>) -> Verdict {
    let o = d.oom.as_ref();
    let refused: Vec<u64> = d.refusals.iter().filter(|r| !r.outside).map(|r| r.bytes).collect();
    let card = d.allocator.limit;
    if let Some(&last) = refused.last() {
        // TF backs off by 10% (in f32) after each refusal and logs every refusal, so the size
        // after the last logged one is the one the device gave.
        let taken = oomscope_core::bfc::rounded_bytes((last as f32 * 0.9f32) as u64);
        let mut evidence = vec![format!(
            "the device refused the allocator's first region requests, {}; TF backs off by 10% and logs each refusal, so the pool took the next size, {} ({taken} bytes)",
            refused.iter().map(|r| oomscope_base::size::human_bytes_driver(*r)).collect::<Vec<_>>().join(" and "),
            oomscope_base::size::human_bytes_driver(taken)
        )];
        if card > 0 {
            evidence.push(format!(
                "TF's limit was the whole card, {}: so other processes (the desktop) held between {} and {}",
                human(card),
                human(card.saturating_sub(last)),
                human(card.saturating_sub(taken))
            ));
        }
        let fraction = if card > 0 { (taken as f64 * 0.9 / card as f64 * 20.0).floor() / 20.0 } else { 0.7 };
        let who = o.map_or("the run".to_string(), |o| o.op.clone());
        return Verdict {
            kind: VerdictKind::Others,
            headline: if o.is_some_and(|o| o.outside) {
                format!(
                    "{who} could not get memory outside TensorFlow's pool (CUDNN_STATUS_ALLOC_FAILED): the pool had taken everything the device would give, and other processes held the rest"
                )
            } else {
                "TensorFlow's pool took everything the device would give, and other processes held the rest".to_string()
            },
            evidence,
            fix: format!(
                "let the pool grow on demand: config.gpu_options.allow_growth = True (or TF_FORCE_GPU_ALLOW_GROWTH=true); or cap it so cuDNN and the desktop keep room: per_process_gpu_memory_fraction={fraction:.2}{}",
                if card > 0 { format!(" ({})", human((fraction * card as f64) as u64)) } else { String::new() }
            ),
            breakdown: b,
        };
    }
    let request =
        o.filter(|o| o.requested > 0).map(|o| format!("{} for {}{}", human(o.requested), o.op, shape_text(&o.shape)));
    let live = d.usage_total();
    if !d.usage_by_node.is_empty() {
        let listed =
            d.usage_by_node.len() as u64 + d.imported.as_ref().and_then(|i| i.usage_remaining).map_or(0, |r| r[0]);
        let mut evidence = vec![format!("live by kind: {}", describe_breakdown(&b, live))];
        for n in d.usage_by_node.iter().take(3) {
            evidence.push(format!("{} holds {}", n.op, human(n.bytes)));
        }
        let layout: u64 = d.usage_by_node.iter().filter(|n| n.op.contains("LayoutOptimizer")).map(|n| n.bytes).sum();
        let mut fix = match b.first().map(|k| k.kind) {
            Some(Kind::Activation) | Some(Kind::Gradient) | None => {
                "reduce the batch: activations and gradients scale with it".to_string()
            }
            Some(Kind::Optimizer) => {
                "optimizer state dominates: momentum keeps one slot per weight where Adam keeps two".into()
            }
            Some(_) => "reduce the model or its precision (float16 halves every tensor)".into(),
        };
        if layout * 10 > live {
            evidence.push(format!(
                "{} ({:.0}%) is held by *-LayoutOptimizer nodes: copies TF's layout optimizer made to turn NHWC tensors into the NCHW cuDNN wants, and back",
                human(layout),
                pct(layout, live)
            ));
            fix.push_str(&format!(
                "; and build the model channels-first (data_format=\"NCHW\" / \"channels_first\") so the GPU needs no transposed copies ({} here)",
                human(layout)
            ));
        }
        return Verdict {
            kind: VerdictKind::Undetermined,
            headline: format!(
                "{}{} was in use in {listed} nodes{}; the log shows neither the limit nor the free memory, so a true peak cannot be told from fragmentation",
                request.map_or(String::new(), |r| format!("{r} failed; ")),
                human(live),
                b.first().map_or(String::new(), |k| format!(", {} the most ({})", k.kind.plural(), human(k.bytes)))
            ),
            evidence,
            fix,
            breakdown: b,
        };
    }
    let mut fix =
        "for the cause, give oomscope the whole log: TF prints the allocator's state after \"ran out of memory\""
            .to_string();
    if let Some(n) = o.and_then(|o| o.shape.as_ref()).and_then(|s| s.first()).copied().filter(|&n| n >= 10) {
        let rows = n as u64 / 10;
        let part = o.map_or(0, |o| o.requested) / 10;
        fix = format!(
            "if the first dimension, {n}, is the batch, split it: in chunks of {rows}, this tensor is {}; {fix}",
            human(part)
        );
    }
    Verdict {
        kind: VerdictKind::Undetermined,
        headline: format!(
            "{} could not be allocated; the log shows neither the limit nor what else was in use",
            request.unwrap_or_else(|| "an allocation".to_string())
        ),
        evidence: Vec::new(),
        fix,
        breakdown: b,
    }
}

/// The data came from a PyTorch snapshot: fixes are PyTorch's.
fn torch(d: &Dump) -> bool {
    d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TorchSnapshot)
}

/// Live bytes that do not shrink with the batch: weights, optimizer state, inputs.
fn fixed_bytes(b: &[KindBytes]) -> u64 {
    bytes_of(b, &[Kind::Weight, Kind::Optimizer, Kind::Input])
}

fn single_tensor(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<Verdict> {
    let cap = capacity(o);
    let fixed = fixed_bytes(b);
    let room = cap.saturating_sub(fixed);
    if o.rounded <= room {
        return None;
    }
    let eval = d.workload.as_ref().is_some_and(|w| w.mode == Mode::Eval);
    let batch = o.shape.as_ref().and_then(|s| s.first()).copied().filter(|&n| n > 1).map(|n| n as u64);
    let fix = match batch {
        Some(n) => {
            let chunk = (n as u128 * room as u128 / o.rounded as u128) as u64;
            let known = d.workload.as_ref().is_some_and(|w| w.batch == n);
            let along = if known { String::new() } else { format!(" (if its first dimension, {n}, is the batch)") };
            if chunk == 0 {
                format!(
                    "even one row of this tensor ({}) does not fit: make the sample smaller (resolution, sequence length) or use float16",
                    human(o.rounded / n)
                )
            } else if eval {
                format!(
                    "split the evaluation into chunks of at most {chunk}{along}: this tensor alone allows {chunk} of the {n}; \
                     `oomscope fit` finds the largest chunk by replay; average the results"
                )
            } else {
                format!(
                    "reduce the batch from {n} to at most {chunk}{along}: this tensor alone allows {chunk}; `oomscope fit` checks by replay"
                )
            }
        }
        None => format!(
            "make this tensor smaller than {}: fewer samples per call, a smaller resolution, or float16",
            human(room)
        ),
    };
    Some(Verdict {
        kind: VerdictKind::SingleTensor,
        headline: format!(
            "One tensor of {} ({}{}) is larger than all the memory this process can ever have free: {}",
            human(o.requested),
            o.op,
            shape_text(&o.shape),
            human(room)
        ),
        evidence: vec![format!(
            "{} can be had in all (pool and what the device could still give), of which weights, optimizer state and inputs take {}",
            human(cap),
            human(fixed)
        )],
        fix,
        breakdown: b.to_vec(),
    })
}

/// Live bytes rising across step boundaries.
struct Growth {
    first: (i64, u64),
    last: (i64, u64),
    per_step: f64,
}

fn growth(d: &Dump, until: i64) -> Option<Growth> {
    let marks: Vec<_> = d.steps.iter().filter(|s| s.step >= 0 && s.step <= until).collect();
    if marks.len() < 4 {
        return None;
    }
    // Skip the first step: it may still be warming up (lazy weights, caches).
    let tail = &marks[1..];
    let rising = tail.windows(2).all(|w| w[1].bytes_in_use >= w[0].bytes_in_use);
    let increases = tail.windows(2).filter(|w| w[1].bytes_in_use > w[0].bytes_in_use).count();
    let (f, l) = (tail.first()?, tail.last()?);
    if !rising || increases < 2 || l.bytes_in_use <= f.bytes_in_use || l.step <= f.step {
        return None;
    }
    let per_step = (l.bytes_in_use - f.bytes_in_use) as f64 / (l.step - f.step) as f64;
    Some(Growth { first: (f.step, f.bytes_in_use), last: (l.step, l.bytes_in_use), per_step })
}

/// Ops whose tensors survive their step: (op, count, bytes, first step, last step).
fn survivors(d: &Dump, current: i64) -> Vec<(String, u64, u64, i64, i64)> {
    let mut by: BTreeMap<&str, (u64, u64, i64, i64)> = BTreeMap::new();
    for c in d.live_chunks() {
        let step = c.step.unwrap_or(-1);
        if step < 0 || step >= current || matches!(c.kind(), Kind::Weight | Kind::Optimizer) {
            continue;
        }
        let e = by.entry(c.op.as_deref().unwrap_or("unknown")).or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 += c.size;
        e.2 = e.2.min(step);
        e.3 = e.3.max(step);
    }
    let mut v: Vec<_> = by.into_iter().map(|(op, (n, bytes, a, z))| (op.to_string(), n, bytes, a, z)).collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.2));
    v
}

fn growth_verdict(d: &Dump, o: &OomRecord, b: Vec<KindBytes>, g: Growth) -> Verdict {
    let current = o.step.max(d.steps.last().map_or(0, |s| s.step));
    let surv = survivors(d, current);
    let mut evidence = vec![format!(
        "live bytes at step boundaries went from {} at step {} to {} at step {}: {} per step",
        human(g.first.1),
        g.first.0,
        human(g.last.1),
        g.last.0,
        human(g.per_step as u64)
    )];
    for (op, n, bytes, a, z) in surv.iter().take(5) {
        evidence.push(format!("{op}: {n} tensors from steps {a}..{z} are still live ({})", human(*bytes)));
    }
    let culprit = surv.first().map_or("the growing tensors".to_string(), |s| s.0.clone());
    Verdict {
        kind: VerdictKind::Growth,
        headline: format!(
            "Live memory grows by {} every step until the OOM at step {}: tensors made in earlier steps are never freed",
            human(g.per_step as u64),
            o.step
        ),
        evidence,
        fix: format!(
            "free what {culprit} keeps each step: in Python, keep a number (loss.item(), float(x)) instead of the tensor, and do \
             not append tensors to a list across steps; a larger device only delays the OOM"
        ),
        breakdown: b,
    }
}

fn fragmentation(d: &Dump, o: &OomRecord, b: &[KindBytes]) -> Option<Verdict> {
    let pool_free = o.pool_bytes.saturating_sub(o.bytes_in_use);
    let grow = growable(o);
    if pool_free + grow < o.rounded || o.largest_free_block >= o.rounded || grow >= o.rounded {
        return None;
    }
    let a = &d.allocator;
    let free_chunks = d.regions.iter().flat_map(|r| &r.chunks).filter(|c| !c.in_use).count();
    let empty_regions: Vec<u64> =
        d.regions.iter().filter(|r| r.chunks.iter().all(|c| !c.in_use)).map(|r| r.size).collect();
    // Live tensors that sit between two free chunks: they are what splits the free space.
    let mut pinning: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &d.regions {
        for w in r.chunks.windows(3) {
            if !w[0].in_use && w[1].in_use && !w[2].in_use {
                *pinning.entry(w[1].op.as_deref().unwrap_or("unknown")).or_default() += 1;
            }
        }
    }
    let mut pins: Vec<(&str, u64)> = pinning.into_iter().collect();
    pins.sort_by_key(|p| std::cmp::Reverse(p.1));
    let mut evidence = vec![format!(
        "{} free in {} pieces ({:.1}% fragmentation); the request needs {} in one piece",
        human(pool_free),
        free_chunks,
        d.stats.fragmentation * 100.0,
        human(o.rounded)
    )];
    if !pins.is_empty() {
        let names: Vec<String> = pins.iter().take(4).map(|(op, n)| format!("{op} ({n})")).collect();
        evidence.push(format!("live tensors sitting between free blocks: {}", names.join(", ")));
    }
    let fix = if torch(d) {
        if a.name.contains("expandable_segments") {
            "cap splitting of large blocks: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128, or call torch.cuda.empty_cache() \
             between phases that allocate different sizes"
                .to_string()
        } else {
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments then grow in place and free pieces can merge \
             (PyTorch's own OOM message suggests it)"
                .to_string()
        }
    } else if !a.garbage_collection
        && !empty_regions.is_empty()
        && empty_regions.iter().sum::<u64>() + grow >= o.rounded
    {
        format!(
            "turn on garbage collection of empty regions (TF_ENABLE_GPU_GARBAGE_COLLECTION=true): {} region(s) hold nothing and \
             would be returned for one large enough",
            empty_regions.len()
        )
    } else if a.allow_growth && d.regions.len() > 1 {
        format!(
            "preallocate one region (allow_growth off): free blocks in different regions cannot merge, and this pool is {} regions",
            d.regions.len()
        )
    } else {
        let who = pins.first().map_or(String::new(), |(op, _)| format!(" ({op} here)"));
        format!(
            "allocate long-lived tensors before short-lived ones, or free the tensors that split the free space{who} before \
             asking for {}; or let the driver place each tensor: TF_GPU_ALLOCATOR=cuda_malloc_async",
            human(o.rounded)
        )
    };
    Some(Verdict {
        kind: VerdictKind::Fragmentation,
        headline: format!(
            "{} is free in the pool, but the largest free block is {}: the {} request does not fit in any piece",
            human(pool_free),
            human(o.largest_free_block),
            human(o.rounded)
        ),
        evidence,
        fix,
        breakdown: b.to_vec(),
    })
}

fn describe_breakdown(b: &[KindBytes], total: u64) -> String {
    b.iter()
        .filter(|k| k.bytes > 0)
        .map(|k| format!("{} {} ({:.0}%)", k.kind.plural(), human(k.bytes), pct(k.bytes, total)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn peak(d: &Dump, o: &OomRecord, b: Vec<KindBytes>) -> Verdict {
    let cap = capacity(o);
    let need = o.bytes_in_use + o.rounded;
    let live: u64 = b.iter().map(|k| k.bytes).sum();
    let fixed = bytes_of(&b, &[Kind::Weight, Kind::Optimizer]);
    let dominant = b.first().map(|k| k.kind).unwrap_or(Kind::Activation);
    let mut evidence = vec![format!(
        "{} live + {} requested = {} needed; {} can be had",
        human(o.bytes_in_use),
        human(o.rounded),
        human(need),
        human(cap)
    )];
    evidence.push(format!("live by kind: {}", describe_breakdown(&b, live)));
    for n in d.usage_by_node.iter().take(3) {
        evidence.push(format!("{} holds {}", n.op, human(n.bytes)));
    }
    // Activations, gradients, inputs and temporaries scale with the batch; weights and
    // optimizer state do not.
    let fraction = if need > fixed { cap.saturating_sub(fixed) as f64 / (need - fixed) as f64 } else { 1.0 };
    let batch = d.workload.as_ref().map(|w| w.batch);
    let mut fix = match batch {
        Some(n) if (n as f64 * fraction).floor() >= 1.0 => format!(
            "reduce the batch from {n} to {} (estimated: the batch-sized part must shrink to {:.0}%; `oomscope fit` checks by replay)",
            (n as f64 * fraction).floor() as u64,
            // Down, not to nearest: 99.6% must read 99%, or the fix would not fit.
            (fraction * 100.0).floor()
        ),
        Some(_) => "even a batch of 1 would not fit: use float16 activations (half the bytes), gradient checkpointing, or a smaller input".to_string(),
        None => format!(
            "cut the batch-sized memory to {:.0}% (a smaller batch, resolution or sequence length)",
            (fraction.min(1.0) * 100.0).floor()
        ),
    };
    if matches!(dominant, Kind::Optimizer) {
        fix.push_str("; optimizer state dominates: momentum keeps one slot per weight where Adam keeps two");
    }
    Verdict {
        kind: VerdictKind::Peak,
        headline: format!(
            "A true peak: {} is needed at this point and {} can be had; {} take {} of the {} live",
            human(need),
            human(cap),
            dominant.plural(),
            human(b.first().map_or(0, |k| k.bytes)),
            human(live)
        ),
        evidence,
        fix,
        breakdown: b,
    }
}

fn fits(d: &Dump, b: Vec<KindBytes>, growth: Option<Growth>) -> Verdict {
    let s = &d.stats;
    let limit = d.allocator.limit;
    let spare = limit.saturating_sub(s.peak_bytes_in_use);
    let mut evidence = vec![format!("peak pool {} of the {} limit", human(s.peak_pool_bytes), human(limit))];
    let (kind, headline, fix) = match growth {
        Some(g) => {
            let steps_left =
                if g.per_step > 0.0 { (limit.saturating_sub(g.last.1) as f64 / g.per_step) as i64 } else { 0 };
            evidence.push(format!(
                "live bytes at step boundaries went from {} at step {} to {} at step {}",
                human(g.first.1),
                g.first.0,
                human(g.last.1),
                g.last.0
            ));
            let culprit = survivors(d, g.last.0 + 1).first().map_or("the growing tensors".to_string(), |s| s.0.clone());
            (
                VerdictKind::Growth,
                format!(
                    "No allocation failed, but live memory grows by {} per step: at this rate the limit is reached near step {}",
                    human(g.per_step as u64),
                    g.last.0 + steps_left
                ),
                format!("free what {culprit} keeps each step before it reaches the limit"),
            )
        }
        None => {
            let refused: Vec<String> = d
                .refusals
                .iter()
                .filter(|r| !r.outside)
                .map(|r| oomscope_base::size::human_bytes_driver(r.bytes))
                .collect();
            let fix = if refused.is_empty() {
                "nothing to change".to_string()
            } else {
                evidence.push(format!(
                    "the device refused region requests of {}: the pool got {} of its {} limit{}",
                    refused.join(" and "),
                    human(s.peak_pool_bytes),
                    human(limit),
                    if d.device.others > 0 {
                        format!(" (other processes hold {})", human(d.device.others))
                    } else {
                        String::new()
                    }
                ));
                if d.allocator.allow_growth {
                    "nothing failed, but the device is short: keep in mind that other processes share it".to_string()
                } else {
                    "nothing failed, but the pool took everything the device would give: let it grow on demand \
                     (TF_FORCE_GPU_ALLOW_GROWTH=true) to leave memory to other processes and to libraries such as cuDNN"
                        .to_string()
                }
            };
            (
                VerdictKind::Fits,
                format!(
                    "No allocation failed: the peak was {} of the {} limit, {} to spare",
                    human(s.peak_bytes_in_use),
                    human(limit),
                    human(spare)
                ),
                fix,
            )
        }
    };
    Verdict { kind, headline, evidence, fix, breakdown: b }
}
