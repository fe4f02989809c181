//! An out-of-memory message's report and its verdict's words. Sizes print as the message's
//! framework prints them: PyTorch's `22.78 GiB`, XLA's `6.00MiB`, a TPU's `17.47G`.

use oomscope_base::size::{human, human_bytes_driver, torch};
use oomscope_diagnose::{Budget, Contradiction, MessageCause, MessageFix, Request};
use oomscope_format::{Dump, Framework, Message, MessageFormat, ProcessMemory, XlaProgram};
use std::fmt::Write;

/// A size in the message's style.
pub fn size(format: MessageFormat, n: u64) -> String {
    match format {
        MessageFormat::XlaHbm | MessageFormat::TpuRuntime => human_bytes_driver(n),
        MessageFormat::XlaRuntime | MessageFormat::XlaAsync | MessageFormat::TfTensor | MessageFormat::OnnxArena => {
            human(n)
        }
        _ => torch(n),
    }
}

/// A framework's name as its users write it.
fn named(framework: Framework) -> &'static str {
    match framework {
        Framework::PyTorch => "PyTorch",
        Framework::TensorFlow => "TensorFlow",
        Framework::Jax => "JAX",
        Framework::Paddle => "PaddlePaddle",
        Framework::LlamaCpp => "llama.cpp",
        Framework::OnnxRuntime => "ONNX Runtime",
        Framework::MxNet => "MXNet",
        Framework::TensorRt => "TensorRT",
        Framework::Unknown => "",
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

/// The tool that holds the framework's allocator settings, by format.
fn framework_name(format: MessageFormat) -> &'static str {
    match format {
        MessageFormat::XlaRuntime | MessageFormat::XlaAsync | MessageFormat::XlaHbm | MessageFormat::TpuRuntime => {
            "XLA"
        }
        MessageFormat::TfTensor => "TensorFlow",
        MessageFormat::Paddle => "PaddlePaddle",
        MessageFormat::Ggml => "llama.cpp",
        MessageFormat::OnnxArena => "ONNX Runtime",
        MessageFormat::DeviceRuntime => "the runtime",
        _ => "PyTorch",
    }
}

/// The headline and the evidence of a message's cause (other causes have theirs in
/// [`super::verdict`]).
pub(super) fn cause(c: &MessageCause) -> (String, Vec<String>) {
    match c {
        MessageCause::TooLarge { budget: b, can_ever: oomscope_diagnose::LARGEST_GPU } => {
            let s = |n| size(b.format, n);
            let mut evidence = vec![
                "a request this size comes from a shape the code did not mean (a size computed wrong, a dimension \
                 that overflowed, two large dimensions broadcast together), not from the memory in use"
                    .to_string(),
            ];
            evidence.extend(site(b));
            (format!("One request of {} is more than any GPU has (the largest hold 288 GB)", s(b.request)), evidence)
        }
        MessageCause::TooLarge { budget: b, can_ever } => {
            let s = |n| size(b.format, n);
            let mut evidence = vec![format!(
                "{} requested > {} this process could ever have ({})",
                s(b.request),
                s(*can_ever),
                ever_terms(b)
            )];
            if b.request > b.total.max(*can_ever).saturating_mul(4) {
                evidence.push(format!(
                    "{:.0} times the device: a shape is probably not what the code meant (a sequence, an image or a \
                     batch far larger than intended, a broadcast of two large dimensions, or a mask of length x length)",
                    b.request as f64 / b.total.max(*can_ever).max(1) as f64
                ));
            }
            evidence.extend(site(b));
            (
                format!(
                    "One request of {} is larger than all the memory {} could ever have: {}",
                    s(b.request),
                    if b.limited() { "the limit set for this process allows" } else { "this process on the device" },
                    s(*can_ever)
                ),
                evidence,
            )
        }
        MessageCause::KvCache { needed, available, max_len } => (
            format!(
                "vLLM's KV cache does not fit: one request at the model's max length{} needs {} of KV cache, and \
                 {} is left after the weights within gpu_memory_utilization",
                max_len.map_or(String::new(), |l| format!(" ({l} tokens)")),
                torch(*needed),
                torch(*available)
            ),
            vec![format!(
                "{} needed > {} available: short by {}",
                torch(*needed),
                torch(*available),
                torch(needed.saturating_sub(*available))
            )],
        ),
        MessageCause::KvCacheTokens { max_len, fits: Some(fits) } => (
            format!(
                "vLLM's KV cache does not fit: one sequence at the model's max length needs {max_len} tokens of KV \
                 cache, and what is left after the weights within gpu_memory_utilization holds {fits}"
            ),
            vec![format!("{max_len} tokens needed > {fits} that fit: short by {}", max_len.saturating_sub(*fits))],
        ),
        MessageCause::KvCacheTokens { max_len, fits: None } => (
            format!(
                "vLLM's KV cache does not fit: one sequence at the model's max length needs {max_len} tokens of KV \
                 cache, more than what is left after the weights within gpu_memory_utilization holds"
            ),
            vec!["the paste ends before the number of tokens the KV cache holds".to_string()],
        ),
        MessageCause::VllmStartup { free, total, wanted } => (
            format!(
                "Other processes hold the GPU: at start-up vLLM found {} free of {}, and gpu_memory_utilization \
                 asks for {}",
                torch(*free),
                torch(*total),
                torch(*wanted)
            ),
            vec![format!(
                "{} wanted > {} free: {} of the GPU is held before vLLM starts (another vLLM, a notebook, a \
                 training run; nvidia-smi lists them)",
                torch(*wanted),
                torch(*free),
                torch(total.saturating_sub(*free))
            )],
        ),
        MessageCause::EngineCheck { needed, available, kv } => {
            let short = torch(needed.saturating_sub(*available));
            let (needed, available) = (torch(*needed), torch(*available));
            let headline = if *kv {
                format!(
                    "The engine's KV cache does not fit: the context and sequences it was started with need \
                     {needed} of KV cache, and {available} is left for it after the weights"
                )
            } else {
                format!(
                    "The engine does not fit: what it must load (the model's weights and its buffers) needs \
                     {needed}, and {available} is available to it"
                )
            };
            (
                headline,
                vec![format!(
                    "{needed} needed > {available} available: short by {short} (the engine's own check, when it starts)"
                )],
            )
        }
        MessageCause::TgiWarmup { tokens } => (
            format!(
                "Text Generation Inference's warm-up does not fit: its largest prefill batch{} and the model need \
                 more than the GPU has",
                tokens.map_or_else(String::new, |t| format!(" ({t} tokens)"))
            ),
            vec![
                "TGI runs a prefill of --max-batch-prefill-tokens at start-up, beside the loaded weights, to size its \
                 KV cache; that step ran out of memory: the peak of its warm-up"
                    .to_string(),
            ],
        ),
        MessageCause::EngineNoRoom => (
            "The engine does not fit: what it must load (the model's weights and its cache) is more than the GPUs \
             have, by the engine's own check"
                .to_string(),
            vec![
                "the engine's check found too little GPU memory for the model and its cache (the message gives no \
                  figures)"
                    .to_string(),
            ],
        ),
        MessageCause::SglangPrefill { tokens, free } => (
            format!(
                "SGLang's KV cache has no room for a prefill{}: running requests and its cache hold the rest of its \
                 pool",
                tokens.map_or_else(String::new, |t| format!(" of {t} tokens"))
            ),
            vec![match (tokens, free) {
                (Some(t), Some(f)) => format!(
                    "{t} tokens asked for > {f} free slots in the KV-cache pool (SGLang's own check, before it \
                     allocates)"
                ),
                _ => "SGLang's scheduler found too few free slots in its KV-cache pool for the prefill".to_string(),
            }],
        ),
        MessageCause::SglangNoKv => (
            "SGLang has no room for its KV cache: the loaded weights take all that --mem-fraction-static allows"
                .to_string(),
            vec!["SGLang's check found no GPU memory left for the KV cache after the weights".to_string()],
        ),
        MessageCause::NoKvBlocks => (
            "vLLM has no room for its KV cache: the weights, the memory outside PyTorch and the activation peak of \
             its start-up profile take all that gpu_memory_utilization allows"
                .to_string(),
            vec!["vLLM's check found no memory left for one KV cache block (the message gives no figures)".to_string()],
        ),
        MessageCause::NoKvRoom { used, budget, total } => (
            format!(
                "vLLM has no room for its KV cache: the weights, the memory outside PyTorch and the activation peak \
                 take {} of the {} gpu_memory_utilization allows{}",
                torch(*used),
                torch(*budget),
                total.map_or(String::new(), |t| format!(" (of the GPU's {})", torch(t)))
            ),
            vec![format!(
                "{} used > {} allowed: the KV cache would get {}",
                torch(*used),
                torch(*budget),
                if used > budget { format!("-{}", torch(used - budget)) } else { "0 bytes".to_string() }
            )],
        ),
        MessageCause::PoolLimit { request, held, limit } => (
            format!(
                "The memory pool's limit is what ran out: it held {} and the {} request would pass its {} limit",
                human(*held),
                human(*request),
                human(*limit)
            ),
            vec![format!(
                "{} held by the pool + {} requested = {} > the {} limit set for it (set_limit)",
                human(*held),
                human(*request),
                human(held + request),
                human(*limit)
            )],
        ),
        MessageCause::Others { budget: b, short } => others_cause(b, short),
        MessageCause::CacheInPieces { budget: b }
            if matches!(b.format, MessageFormat::TorchAsync | MessageFormat::XlaAsync) =>
        {
            let s = |n| size(b.format, n);
            let mut evidence = vec![format!(
                "{} total - {} free - {} allocated leaves {} that {}'s tensors do not hold; a CUDA context takes \
                 up to about {}, and cudaMallocAsync's pool keeps what {} frees: about {} is that pool's, or other \
                 processes' (nvidia-smi tells)",
                s(b.total),
                s(b.free),
                s(b.live),
                s(b.cached + (3 << 29)),
                framework_name(b.format),
                s(3 << 29),
                framework_name(b.format),
                s(b.cached)
            )];
            evidence.extend(site(b));
            (
                format!(
                    "Fragmentation in cudaMallocAsync's pool (or other processes): {} free + about {} the pool keeps \
                     would hold the {} request, but it failed",
                    s(b.free),
                    s(b.cached),
                    s(b.request)
                ),
                evidence,
            )
        }
        MessageCause::CacheInPieces { budget: b } => cache_in_pieces_cause(b),
        MessageCause::Peak { budget: b, needed, can_have } => peak_cause(b, needed, can_have),
        MessageCause::Contradiction { budget: b, what } => {
            let s = |n| size(b.format, n);
            let headline = match what {
                Contradiction::MoreThanTheDevice { held } => format!(
                    "The message's figures contradict each other: this process's cache ({}) and the free memory ({}) \
                     make {}, more than the {} device; no verdict is built on them",
                    s(b.reserved()),
                    s(b.free),
                    s(*held),
                    s(b.total)
                ),
                Contradiction::ProcessBelowCache { process, reserved } => format!(
                    "The message's figures contradict each other: the process holds {} in all, less than the {} its \
                     own cache holds; no verdict is built on them",
                    s(*process),
                    s(*reserved)
                ),
                Contradiction::ReservedBelowAllocated { reserved, allocated } => format!(
                    "The message's figures contradict each other: {} reserved in all is less than the {} allocated \
                     in it; no verdict is built on them",
                    s(*reserved),
                    s(*allocated)
                ),
                Contradiction::Absurd { figure } => format!(
                    "The message's figures cannot be true: {} is more than any device holds; no verdict is built on \
                     them",
                    s(*figure)
                ),
                Contradiction::NotSizes { figures } => format!(
                    "The message's figures cannot be true: {} {} not a size the framework prints; no verdict is \
                     built on them",
                    figures.join(", "),
                    if figures.len() == 1 { "is" } else { "are" }
                ),
            };
            let evidence = vec![
                "a message edited by hand, or pieces of two messages pasted together: the figures of one failure \
                 agree with each other (the framework prints them at once)"
                    .to_string(),
            ];
            (headline, evidence)
        }
        MessageCause::FiguresDisagree { budget: b } => {
            let s = |n| size(b.format, n);
            let headline = if b.free > b.total {
                format!(
                    "The message's figures disagree: {} free on a device of {} (unified memory, or a driver that \
                     reports it so); they cannot tell the cause",
                    s(b.free),
                    s(b.total)
                )
            } else {
                format!(
                    "The message's figures say the {} request should have fit: {} was free when it was printed",
                    s(b.request),
                    s(b.usable_free())
                )
            };
            let mut evidence = vec![
                "memory may have been freed between the failure and the message (by another process, or by the \
                 framework's own retry), or the failure was the driver's (on Windows, WDDM limits what one \
                 allocation can take)"
                    .to_string(),
            ];
            evidence.extend(site(b));
            (headline, evidence)
        }
        MessageCause::DeviceBuffer { format, request, free, largest, total } => {
            device_buffer_cause(format, request, free, largest, total)
        }
        MessageCause::XlaProgram { format, request, program, top, single } => {
            xla_cause(*format, *request, program, top, *single)
        }
        MessageCause::WithoutFigures { format, framework, request, site, free, total } => {
            let (mut headline, mut evidence) = without(*format, *framework, request.as_ref());
            // (A runtime's request beside the device's free memory, and nothing of what this
            // process holds: said with them, not as a message without figures.)
            if let (Some(r), Some(free), MessageFormat::DeviceRuntime | MessageFormat::CudaRuntime) =
                (request.as_ref(), *free, *format)
            {
                let s = |n| size(*format, n);
                let of = total.map_or(String::new(), |t| format!(" of {}", s(t)));
                headline = if r.requested <= free {
                    format!(
                        "The runtime could not allocate {} although {} was free{of}: the figures say it should have \
                         fit (memory in pieces, or freed just after the failure)",
                        s(r.requested),
                        s(free)
                    )
                } else {
                    format!(
                        "The runtime could not allocate {} with {} free{of}: the message does not say what held the \
                         rest (this process's own memory, or other processes')",
                        s(r.requested),
                        s(free)
                    )
                };
            }
            if let Some(s) = site.as_ref().filter(|_| request.is_none()) {
                evidence.push(format!("it came from {s}"));
            }
            (headline, evidence)
        }
    }
}

/// `31.47 GiB total - 307.20 MiB outside PyTorch`.
fn ever_terms(b: &Budget) -> String {
    let s = |n| size(b.format, n);
    // (A limit with no device figures at all is the limit: TensorRT's workspace pool.)
    if b.limited() || b.total == 0 && b.limit.is_some() {
        return format!("{} allowed by the limit set for it", s(b.limit.unwrap_or(0)));
    }
    if b.total > 0 && b.request > b.total && b.total < b.free + b.reserved() && b.free <= b.total {
        return format!(
            "the device's {}; the process held more through shared system memory, which Windows lends at a \
             fraction of the speed",
            s(b.total)
        );
    }
    match b.context.filter(|&c| c > 0) {
        // (A CUDA program with no cache of its own: what it and the desktop hold.)
        Some(c) if b.total.saturating_sub(c) >= b.free + b.reserved() && b.format == MessageFormat::CudaRuntime => {
            format!("{} total - {} in use besides (its context and buffers, the desktop's)", s(b.total), s(c))
        }
        Some(c) if b.total.saturating_sub(c) >= b.free + b.reserved() => {
            format!("{} total - {} it holds outside {}", s(b.total), s(c), framework_name(b.format))
        }
        _ if b.total >= b.free + b.reserved() => format!("the device's {}", s(b.total)),
        _ => format!("{} free + {} in its cache", s(b.free), s(b.reserved())),
    }
}

fn site(b: &Budget) -> Option<String> {
    b.site.as_ref().map(|s| format!("the request came from {s}"))
}

fn xla_cause(
    format: MessageFormat,
    request: Option<u64>,
    p: &XlaProgram,
    top: &[(String, u64)],
    single: bool,
) -> (String, Vec<String>) {
    let s = |n| size(format, n);
    let mut evidence = Vec::new();
    if p.needed > 0 {
        let mut parts = Vec::new();
        if p.parameters > 0 {
            parts.push(format!(
                "{} {}",
                if format == MessageFormat::XlaHbm { "arguments" } else { "parameters" },
                s(p.parameters)
            ));
        }
        if p.outputs > 0 {
            parts.push(format!("outputs {}", s(p.outputs)));
        }
        if p.temporaries > 0 {
            parts.push(format!("temporaries {}", s(p.temporaries)));
        }
        if !parts.is_empty() {
            evidence.push(format!("of the {}: {}", s(p.needed), parts.join(", ")));
        }
    }
    for (op, bytes) in top.iter().take(3) {
        evidence.push(format!("{} {}", s(*bytes), op));
    }
    let largest = top.first().cloned().unwrap_or_default();
    let headline = if single && p.capacity > 0 && largest.1 > p.capacity {
        format!("One buffer of {} ({}) is larger than the device's {}", s(largest.1), largest.0, s(p.capacity))
    } else if single && p.capacity > 0 && p.parameters > p.capacity {
        format!(
            "The arguments alone ({}) are more than the device's {}: a smaller batch cannot make them fit",
            s(p.parameters),
            s(p.capacity)
        )
    } else if single {
        format!(
            "The program needs {}, more than any device has{}: a shape the code did not mean",
            s(p.needed),
            if p.capacity > 0 { format!(" (this one {})", s(p.capacity)) } else { String::new() }
        )
    } else if p.capacity > 0 {
        format!(
            "The program needs {} and the device has {}: over by {}",
            s(p.needed),
            s(p.capacity),
            s(p.needed.saturating_sub(p.capacity))
        )
    } else if p.needed > 0 {
        format!(
            "The XLA program needs {} at once{}",
            s(p.needed),
            request.map_or(String::new(), |r| format!(", and allocating {} of it failed", s(r)))
        )
    } else {
        let sum: u64 = top.iter().fold(0u64, |s, t| s.saturating_add(t.1));
        format!(
            "The message keeps only XLA's largest buffers ({} in the {} shown), not the program's totals",
            s(sum),
            top.len()
        )
    };
    (headline, evidence)
}

fn without(format: MessageFormat, framework: Framework, request: Option<&Request>) -> (String, Vec<String>) {
    let what = request.map(|r| {
        let op = r.op.as_ref().map_or(String::new(), |op| format!(" for {op}"));
        format!("{}{op}", size(format, r.requested))
    });
    let headline = match format {
        MessageFormat::Cublas => {
            "cuBLAS could not allocate device memory for its handle or workspace: the GPU was full \
                                  when cuBLAS started, and the message has no figures to say what held it"
                .to_string()
        }
        MessageFormat::Cudnn => {
            "cuDNN could not start or allocate its workspace: usually the GPU had no memory left for \
                                 it (less often a cuDNN, CUDA and driver mismatch); the message has no figures"
                .to_string()
        }
        MessageFormat::CudaRuntime => format!(
            "The CUDA runtime ran out of device memory{}: the message has no figures to say what held it",
            what.map_or(String::new(), |w| format!(" ({w})"))
        ),
        MessageFormat::TfTensor => format!(
            "TensorFlow could not allocate memory{}: the message has none of its allocator's figures",
            request.and_then(|r| r.op.as_ref()).map_or(String::new(), |op| format!(" for {op}"))
        ),
        MessageFormat::XlaRuntime => format!(
            "XLA could not allocate {}: the message has no account of the program's memory",
            what.unwrap_or_else(|| "memory".into())
        ),
        MessageFormat::Paddle | MessageFormat::Ggml | MessageFormat::OnnxArena => format!(
            "{} could not allocate {}: the message does not say what else held the device",
            framework_name(format),
            what.unwrap_or_else(|| "memory".into())
        ),
        _ => format!(
            "An out-of-memory message without its figures{}: it cannot tell the causes apart",
            what.map_or(String::new(), |w| format!(" ({w})"))
        ),
    };
    let mut evidence = Vec::new();
    if framework != Framework::Unknown {
        evidence.push(format!("from {}", named(framework)));
    }
    (headline, evidence)
}

/// The words of a message's fix (other fixes have theirs in [`super::verdict`]).
pub(super) fn fix(f: &MessageFix) -> String {
    match f {
        MessageFix::ShrinkRequest { request, can_ever, share, absurd, format } => {
            let s = |n| size(*format, n);
            if *absurd && *can_ever == 0 {
                format!(
                    "find the shape that makes this request: print the shapes going into the failing call (an \
                     uninitialized size, a negative dimension read as a huge one, or an overflow makes requests \
                     like {})",
                    s(*request)
                )
            } else if *absurd {
                format!(
                    "find the shape that makes this {} request: print the shapes going into the failing call; when \
                     it is the intended size, only splitting the work fits: process it in pieces of at most {} \
                     ({:.1}% of it)",
                    s(*request),
                    s(*can_ever),
                    share * 100.0
                )
            } else {
                format!(
                    "make this request at most {} ({:.0}% of its {}): a smaller batch, a shorter sequence or a lower \
                     resolution, or the work in pieces (chunked attention, a loop over the batch); the live tensors \
                     around it need room too, so the cut must be larger",
                    s(*can_ever),
                    (share * 100.0).floor(),
                    s(*request)
                )
            }
        }
        MessageFix::ShrinkLive { need, share, format } => format!(
            "cut at least {} from the peak: a batch (or sequence length, or resolution) at least {:.0}% smaller if \
             all of it scales with the batch, more where weights and optimizer state take part of it; gradient \
             accumulation keeps the effective batch, and activation checkpointing or mixed precision shrink what \
             each sample holds",
            size(*format, *need),
            ((1.0 - share) * 100.0).ceil().max(1.0)
        ),
        MessageFix::FreeOthers { others, listed, format } => {
            let pids: Vec<String> = listed.iter().filter(|p| !p.this).map(|p| p.pid.to_string()).collect();
            format!(
                "free the {} other processes hold{}: stop them (nvidia-smi lists them{}), or run on a GPU of your \
                 own (CUDA_VISIBLE_DEVICES)",
                size(*format, *others),
                if pids.is_empty() { String::new() } else { format!(" (pids {})", pids.join(", ")) },
                if pids.is_empty() { "" } else { " too" }
            )
        }
        MessageFix::ExpandableSegmentsIn { conf_var } => format!(
            "{conf_var}=expandable_segments:True (PyTorch 2.1 and later): segments then grow in place, and freed \
             pieces next to each other merge; if it is already set, reduce the batch"
        ),
        MessageFix::MaxSplitSizeMb { mb, conf_var } => format!(
            "{conf_var}=max_split_size_mb:{mb}: blocks of {mb} MiB and larger are then never split for smaller \
             requests (this PyTorch, 1.10 to 2.0, has no expandable_segments; PyTorch 2.1 and later has)"
        ),
        MessageFix::UpgradeForFragmentation { free, request } => format!(
            "this PyTorch has no allocator setting against fragmentation (max_split_size_mb came in 1.10, \
             expandable_segments in 2.1): upgrade and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or keep \
             tensor sizes steady across steps (pad variable-length batches to a few fixed sizes), or make the \
             request fit in the {} free (a batch about {:.0}% smaller)",
            torch(*free),
            (100.0 - pct(*free, *request)).max(1.0).ceil()
        ),
        MessageFix::PoolLimit { limit, held } => format!(
            "return the freed blocks the pool keeps before this step (cupy.get_default_memory_pool().free_all_blocks(): \
             its {} held counts them), raise its limit above {} (set_limit), or reduce the batch",
            human(*held),
            human(*limit)
        ),
        MessageFix::RaiseLimit { limit, total, format } => match format {
            MessageFormat::TorchMps => format!(
                "raise PYTORCH_MPS_HIGH_WATERMARK_RATIO (the {} allowed is its share of the memory; 0.0 lifts the \
                 limit, at the risk of the system running out), or reduce the batch",
                size(*format, *limit)
            ),
            _ => format!(
                "raise the fraction given to torch.cuda.set_per_process_memory_fraction ({} of the {} device), or \
                 reduce the batch",
                size(*format, *limit),
                size(*format, *total)
            ),
        },
        MessageFix::XlaShrink { format, donate, dominant, needed, capacity, arguments, temporaries } => xla_shrink_fix(format, donate, dominant, needed, capacity, arguments, temporaries),
        MessageFix::XlaBfcAllocator => "go back to XLA's own allocator (unset TF_GPU_ALLOCATOR=cuda_malloc_async, \
             or XLA_PYTHON_CLIENT_ALLOCATOR for JAX), which keeps one pool of its own; or reduce the batch. If \
             nvidia-smi shows other processes on the GPU, free them first"
            .to_string(),
        MessageFix::NativeAllocator => "go back to PyTorch's own allocator (remove backend:cudaMallocAsync from \
             PYTORCH_CUDA_ALLOC_CONF) with expandable_segments:True, whose segments grow in place; or reduce the batch. \
             If nvidia-smi shows other processes on the GPU, free them first"
            .to_string(),
        MessageFix::BufferInPieces { request, largest } => format!(
            "free the buffers that split the device's memory before this one (those no longer needed), or make \
             this buffer no larger than the largest free piece, {} of the {} asked (a smaller batch or sequence)",
            torch(*largest),
            torch(*request)
        ),
        MessageFix::TpuBuffer { short, fragmented } => {
            if *fragmented {
                "delete arrays that are no longer needed before this step (del x, or let them go out of scope), \
                 donate inputs that are replaced (jax.jit(f, donate_argnums=...)), or reduce the batch so the \
                 buffer fits in a piece"
                    .to_string()
            } else {
                format!(
                    "free at least {} on the device: delete arrays no longer needed, donate inputs that are replaced \
                     (donate_argnums), or reduce the batch",
                    human_bytes_driver(*short)
                )
            }
        }
        MessageFix::VllmKvCache { fits, short } => format!(
            "lower max_model_len{} (the KV cache grows with it), or raise gpu_memory_utilization so the KV cache gets \
             at least {} more, or make the cache smaller (kv_cache_dtype=fp8) or share it over more GPUs \
             (tensor_parallel_size)",
            fits.map_or(String::new(), |f| format!(" to {f} or less (vLLM's estimate of what fits)")),
            torch(*short)
        ),
        MessageFix::VllmStartupFree { fits } => format!(
            "free the GPU of the other processes (nvidia-smi lists them), or start vLLM with \
             gpu_memory_utilization={:.2} or less, what is free now",
            *fits as f64 / 100.0
        ),
        MessageFix::EngineKvCache { short } => format!(
            "start it with a shorter context (its max model length) or fewer sequences at once (the KV cache grows \
             with both) so that it needs {} less, or give the cache more of the GPU (the engine's memory fraction), or \
             make the cache smaller (an fp8 KV cache) or share the model over more GPUs",
            torch(*short)
        ),
        MessageFix::EngineLoad { short } => format!(
            "give the engine more of the GPU (its memory-utilization setting), or load {} less: a smaller or more \
             quantized model, the model split over more GPUs (tensor parallelism), or smaller temporary buffers (a \
             shorter prefill chunk or context)",
            torch(*short)
        ),
        MessageFix::TgiPrefillTokens { tokens } => format!(
            "lower --max-batch-prefill-tokens{} (and --max-input-tokens and --max-total-tokens with it: a prefill \
             batch holds at least one input), or serve a quantized model (--quantize), or shard it over more GPUs \
             (--num-shard)",
            tokens.map_or_else(String::new, |t| format!(" below {t}"))
        ),
        MessageFix::SglangPrefill { tokens } => format!(
            "smaller prefill batches: lower --chunked-prefill-size{} or --max-running-requests; or a larger pool: \
             raise --mem-fraction-static, or share the model over more GPUs (--tp)",
            tokens.map_or_else(String::new, |t| format!(" below {t}"))
        ),
        MessageFix::EngineNoRoom => "a smaller cache (a shorter maximum context, fewer sequences at once), a \
             smaller or quantized model, or the model split over more GPUs"
            .to_string(),
        MessageFix::SglangMemFraction => "raise --mem-fraction-static (the share of the GPU SGLang takes for the \
             weights and the KV cache; its log's `avail mem` after loading says what is left), or serve a smaller or \
             quantized model, or share it over more GPUs (--tp)"
            .to_string(),
        MessageFix::VllmNoKvBlocks => "raise gpu_memory_utilization (its log's profile line says what the weights \
             and the activation peak take), or serve a smaller or quantized model, or share it over more GPUs \
             (tensor_parallel_size); a shorter max_model_len or fewer max_num_seqs lower the activation peak"
            .to_string(),
        MessageFix::VllmNoKvRoom { short } => format!(
            "raise gpu_memory_utilization so that it allows at least {} more and then some for the KV cache, or serve \
             a smaller or quantized model, or share it over more GPUs (tensor_parallel_size); a shorter max_model_len or \
             fewer max_num_seqs lower the activation peak",
            torch(*short)
        ),
        MessageFix::VllmKvCacheTokens { fits } => format!(
            "lower max_model_len{} (the KV cache holds no more), or raise gpu_memory_utilization so the KV cache \
             gets more, or make the cache smaller (kv_cache_dtype=fp8) or share it over more GPUs \
             (tensor_parallel_size)",
            fits.map_or(String::new(), |f| format!(" to {f} or less"))
        ),
        MessageFix::FindOut { format, framework } => find_out(*format, *framework),
    }
}

/// What to run to find out what held the memory.
fn find_out(format: MessageFormat, framework: Framework) -> String {
    let framework = match (framework, format) {
        (Framework::Unknown, MessageFormat::XlaRuntime | MessageFormat::XlaHbm) => Framework::Jax,
        (f, _) => f,
    };
    match framework {
        Framework::Paddle => "nvidia-smi shows whether other processes share the GPU (PaddlePaddle's message asks \
             the same); if none do, reduce the batch. PaddlePaddle takes FLAGS_fraction_of_gpu_memory_to_use of the \
             device up front (0.92 by default): FLAGS_allocator_strategy=auto_growth makes it grow on demand instead"
            .to_string(),
        Framework::LlamaCpp => "offload fewer layers to the GPU (--n-gpu-layers / -ngl), shorten the context \
             (-c / --ctx-size), lower the batch (-b, -ub), or quantize the KV cache (--cache-type-k q8_0); nvidia-smi \
             shows what else holds the GPU"
            .to_string(),
        Framework::OnnxRuntime => "give the CUDA execution provider's arena a limit and let it grow only by what is \
             asked (gpu_mem_limit, arena_extend_strategy: kSameAsRequested), run fewer sessions on one GPU, or a \
             smaller batch; nvidia-smi shows what else holds the GPU"
            .to_string(),
        Framework::MxNet => "reduce the batch, or run with MXNET_GPU_MEM_POOL_TYPE=Round so the pool wastes less; \
             nvidia-smi shows whether other processes share the GPU"
            .to_string(),
        Framework::TensorRt => "give the builder less workspace (IBuilderConfig::setMemoryPoolLimit) or build with \
             nothing else on the GPU; for the engine, a smaller batch or optimization profile"
            .to_string(),
        Framework::TensorFlow => "run it under `oomscope run -- python train.py`: it reads TensorFlow's allocator \
             report at the OOM, even when the logs are silenced. TensorFlow takes the whole GPU up front unless memory \
             growth is on (TF_FORCE_GPU_ALLOW_GROWTH=true, or tf.config.experimental.set_memory_growth), which leaves \
             room for cuDNN and cuBLAS"
            .to_string(),
        Framework::Jax => {
            "run it under `oomscope run -- python train.py` with XLA_PYTHON_CLIENT_PREALLOCATE=false: XLA \
             then prints its allocator's report at the OOM. JAX takes 75% of the GPU up front and leaves the rest to \
             cuDNN and others: XLA_PYTHON_CLIENT_MEM_FRACTION sets the share"
                .to_string()
        }
        _ => "run it under `oomscope run -- python train.py`: at the OOM it names what holds the memory; or record \
             a snapshot (torch.cuda.memory._record_memory_history() at the start, \
             torch.cuda.memory._dump_snapshot(\"oom.pickle\") when it fails) and `oomscope import oom.pickle`. \
             nvidia-smi shows whether other processes share the GPU"
            .to_string(),
    }
}

/// The report of a message: what failed, the verdict, the figures, and where it was read.
pub fn summary(d: &Dump, m: &Message) -> String {
    let mut o = String::new();
    let s = |n| size(m.format, n);
    let what = match m.format {
        f if f.is_torch_cache() || f == MessageFormat::TorchAsync => {
            if m.rocm {
                "HIP out of memory"
            } else {
                "CUDA out of memory"
            }
        }
        MessageFormat::TorchMps => "MPS out of memory",
        MessageFormat::XlaRuntime => "XLA out of memory",
        MessageFormat::XlaHbm => "TPU out of memory (hbm)",
        MessageFormat::TpuRuntime => "TPU out of memory",
        MessageFormat::TfTensor => "TensorFlow out of memory",
        MessageFormat::Cublas => "cuBLAS could not allocate (an out-of-memory error in disguise)",
        MessageFormat::Cudnn => "cuDNN could not start or allocate (usually an out-of-memory error in disguise)",
        MessageFormat::CudaRuntime => "CUDA runtime out of memory",
        MessageFormat::XlaAsync => "XLA out of memory (cudaMallocAsync)",
        MessageFormat::Paddle => "PaddlePaddle out of memory",
        MessageFormat::Ggml => "llama.cpp out of memory",
        MessageFormat::OnnxArena => "ONNX Runtime out of memory",
        MessageFormat::DeviceRuntime => "Accelerator runtime out of memory",
        MessageFormat::VllmKvCache => "vLLM KV cache out of memory",
        MessageFormat::SglangKvCache => "SGLang KV cache out of memory",
        MessageFormat::TgiWarmup => "Text Generation Inference out of memory at warm-up",
        MessageFormat::KvCacheCheck => "KV cache out of memory",
        MessageFormat::EngineCheck => "Inference engine out of memory at start-up",
        _ => "out of memory",
    };
    let _ = write!(o, "{what}");
    if let Some(dev) = m.device.as_ref().filter(|d| m.format != MessageFormat::XlaHbm && d.as_str() != "TPU") {
        let _ = write!(o, " on {dev}");
    }
    if let Some(oom) = &d.oom {
        let _ = write!(o, ": {} requested", s(oom.requested));
        if let Some(op) = &oom.op {
            let _ = write!(o, " by {op}");
        }
    }
    o.push('\n');
    if let Some(v) = &d.verdict {
        o.push('\n');
        o.push_str(&super::verdict::render(v));
        o.push('\n');
    }
    if !m.others.is_empty() {
        let n = m.others.len();
        let _ = writeln!(
            o,
            "The paste holds {n} more out-of-memory error{}, on another device; the verdict above is the first's, \
             each other's from its own figures:",
            if n == 1 { "" } else { "s" }
        );
        for x in &m.others {
            let verdict = oomscope_diagnose::analyze_other(x).map(|v| super::verdict::words(&v));
            let _ = writeln!(
                o,
                "  line {}: {}{}{}",
                x.line,
                x.device.as_deref().unwrap_or("the device"),
                x.requested.map_or(String::new(), |r| format!(", {} requested", s(r))),
                verdict.map_or(String::new(), |v| format!(": {}: {}", v.kind.name(), v.headline))
            );
        }
        o.push('\n');
    }
    if let Some(t) = m.total {
        let _ = writeln!(
            o,
            "  {:<16} {} total{}{}",
            m.device.as_deref().unwrap_or("device"),
            s(t),
            m.free.map_or(String::new(), |f| format!(", {} free", s(f))),
            m.allowed.map_or(String::new(), |l| format!(", {} allowed", s(l)))
        );
    }
    if let Some(a) = m.allocated {
        let reserved = m.unallocated().map_or(String::new(), |u| format!(" + {} reserved but unallocated", s(u)));
        let process = m.process.map_or(String::new(), |p| format!("{} in all; ", s(p)));
        let _ = writeln!(o, "  {:<16} {process}{} allocated{reserved}", "this process", s(a));
    }
    if m.process_unanswered {
        let _ = writeln!(
            o,
            "  {:<16} 'this process has {}' is 2^64 bytes, NVML's answer when it has none\n  {:<16} (WSL, \
             some containers): left out, the verdict built on the other figures",
            "",
            s(u64::MAX),
            ""
        );
    }
    let others: Vec<String> =
        m.processes.iter().filter(|p| !p.this).map(|p| format!("process {} {}", p.pid, s(p.bytes))).collect();
    if !others.is_empty() {
        let _ = writeln!(o, "  {:<16} {}", "other processes", others.join(", "));
    }
    if let Some(x) = &m.xla
        && x.needed > 0
    {
        let _ = writeln!(
            o,
            "  {:<16} {} needed{}",
            "program",
            s(x.needed),
            if x.capacity > 0 { format!(" of {}", s(x.capacity)) } else { String::new() }
        );
    }
    if !d.usage_by_node.is_empty() {
        let _ = writeln!(o, "\nLargest buffers:");
        for n in d.usage_by_node.iter().take(10) {
            let _ = writeln!(o, "  {:>10}  {}", s(n.bytes), n.op);
        }
        if d.usage_by_node.len() > 10 {
            let rest: u64 = d.usage_by_node[10..].iter().fold(0u64, |s, n| s.saturating_add(n.bytes));
            let _ = writeln!(o, "  ... {} more with {}", d.usage_by_node.len() - 10, s(rest));
        }
    }
    let _ = writeln!(
        o,
        "\nRead from {}, line {}: a message of {}.",
        d.source.path.as_deref().unwrap_or("the input"),
        m.line,
        m.format.describe()
    );
    o
}

fn device_buffer_cause(
    format: &MessageFormat,
    request: &u64,
    free: &u64,
    largest: &Option<u64>,
    total: &Option<u64>,
) -> (String, Vec<String>) {
    let s = |n| size(*format, n);
    if total.is_some_and(|t| *request > t) {
        (format!("One buffer of {} is larger than the device's {}", s(*request), s(total.unwrap_or(0))), Vec::new())
    } else if request <= free {
        (
            format!(
                "Fragmentation: {} is free, but {}: the {} buffer needs one piece",
                s(*free),
                largest.map_or("not in one piece".to_string(), |l| format!("the largest piece is {}", s(l))),
                s(*request)
            ),
            Vec::new(),
        )
    } else {
        (
            format!("The {} buffer is more than the {} free: short by {}", s(*request), s(*free), s(request - free)),
            total.map(|t| vec![format!("the device has {} in all", s(t))]).unwrap_or_default(),
        )
    }
}

fn peak_cause(b: &Budget, needed: &u64, can_have: &u64) -> (String, Vec<String>) {
    let s = |n| size(b.format, n);
    // MPS whose other allocations alone pass the watermark: nothing is left for any request.
    if let (MessageFormat::TorchMps, Some(other), Some(limit)) = (b.format, b.context, b.limit)
        && other >= limit
    {
        return (
            format!(
                "MPS's limit is what ran out: its other allocations ({}) alone pass the {} allowed, before PyTorch's \
                 own {}",
                s(other),
                s(limit),
                s(b.live)
            ),
            vec![format!(
                "{} other allocations + {} allocated by PyTorch = {} > {} allowed: no request fits, however small ({})",
                s(other),
                s(b.live),
                s(other + b.live),
                s(limit),
                s(b.request)
            )],
        );
    }
    // Needed within what can be had, by less than the figures' rounding: a full device, said
    // as such (never `15.25 GiB > 15.26 GiB`). Within a limit by more (the limit's own
    // branch: the cache already at it), the new segment is what does not fit.
    let slack = (b.request / 50).max(16 << 20);
    let close = needed <= can_have && can_have - needed < slack;
    if needed <= can_have && !close {
        let mut evidence = vec![format!(
            "{} live + {} requested = {}, but {}'s cache holds {} of the {} allowed: the new segment this request \
             needs passes the limit",
            s(b.live),
            s(b.request),
            s(*needed),
            framework_name(b.format),
            s(b.reserved()),
            s(b.limit.unwrap_or(*can_have))
        )];
        evidence.extend(site(b));
        return (
            format!(
                "The limit set for this process is what ran out: {} of its cache against the {} allowed",
                s(b.reserved()),
                s(b.limit.unwrap_or(*can_have))
            ),
            evidence,
        );
    }
    let mut evidence = vec![format!(
        "{} live + {} requested = {} {} {} free{} + {} in {}'s cache = {}{}",
        s(b.live),
        s(b.request),
        s(*needed),
        if close { "<=" } else { ">" },
        s(b.usable_free()),
        if b.free_at_most { " at most (the message gives no free figure: the total less the cache)" } else { "" },
        s(b.reserved()),
        framework_name(b.format),
        s(*can_have),
        if close { ", closer than the figures' rounding: the device was full to a few MiB" } else { "" }
    )];
    if close && b.cached > 0 && b.format.is_torch_cache() && b.request <= b.usable_free() + b.cached {
        evidence.push(format!(
            "{} requested, {} free + {} cached = {}: {} to spare, less than the figures' rounding and the \
             device's allocation granularity, so no setting frees room for it",
            s(b.request),
            s(b.usable_free()),
            s(b.cached),
            s(b.usable_free() + b.cached),
            s(b.usable_free() + b.cached - b.request)
        ));
    } else if b.cached > 0 && b.format.is_torch_cache() {
        evidence.push(format!(
            "{} requested > {} free{} + {} cached = {}: neither freeing the cache nor expandable_segments can \
             make room",
            s(b.request),
            s(b.usable_free()),
            if b.free_at_most { " at most" } else { "" },
            s(b.cached),
            s(b.usable_free() + b.cached)
        ));
    }
    if let Some(p) = b.private_pools.filter(|&p| p > 0) {
        evidence.push(format!("of the live memory, {} is in CUDA graphs' private pools", s(p)));
    }
    if let Some(o) = b.others.filter(|&o| o > 0) {
        if b.request <= b.usable_free() + b.cached + o && b.listed.iter().all(|p| p.this) {
            // Not blamed (under what a display or a small process takes, and none listed),
            // though it is what the request lacked.
            evidence.push(format!(
                "{} of the device is held outside this process, none of it listed: without it the request would \
                 just fit, but that much is what a display or another small process takes (nvidia-smi tells)",
                s(o)
            ));
        } else {
            evidence.push(format!("other processes hold {}; even without them it would not fit", s(o)));
        }
    }
    if let Some(c) = b.context.filter(|&c| c > 0) {
        evidence.push(format!(
            "this process holds {} outside {} (CUDA context, libraries)",
            s(c),
            framework_name(b.format)
        ));
    }
    if let Some(u) = b.unattributed {
        evidence.push(format!(
            "{} is outside {}'s cache: a CUDA context, cuDNN and cuBLAS take up to about 1.5 GiB, so other \
             processes may hold some of it (nvidia-smi tells)",
            s(u),
            framework_name(b.format)
        ));
    }
    if b.total == 0 {
        evidence.push("the message has no device total: other processes may hold some of it (nvidia-smi tells)".into());
    }
    evidence.extend(site(b));
    let headline = if b.limited() {
        format!(
            "The limit set for this process is what ran out: {} live + {} requested = {}, and {} is allowed \
             of the device's {}",
            s(b.live),
            s(b.request),
            s(*needed),
            s(b.limit.unwrap_or(0)),
            s(b.total)
        )
    } else {
        format!(
            "A true peak: live tensors ({}) and the request ({}) need {}, and this process can have {}{}",
            s(b.live),
            s(b.request),
            s(*needed),
            s(*can_have),
            if close { " (as near as the figures tell: the device was full)" } else { "" }
        )
    };
    (headline, evidence)
}

fn cache_in_pieces_cause(b: &Budget) -> (String, Vec<String>) {
    let s = |n| size(b.format, n);
    let mut evidence = vec![format!(
        "{} free{} + {} free in the cache = {} >= {} requested",
        s(b.usable_free()),
        match b.limit.filter(|_| b.limited()) {
            Some(l) => format!(" within the {} allowed", s(l)),
            None => String::new(),
        },
        s(b.cached),
        s(b.usable_free() + b.cached),
        s(b.request)
    )];
    if let Some(o) = b.others.filter(|&o| o > 0) {
        evidence.push(format!("other processes hold {} of {} besides", s(o), b.device));
    }
    if b.format != MessageFormat::TorchAsync {
        evidence.push(
            "PyTorch returns its unused whole blocks to the device and retries before it fails: what its \
             cache still holds free is in blocks that live tensors split"
                .to_string(),
        );
    }
    evidence.extend(site(b));
    let room = match b.limit.filter(|_| b.limited()) {
        Some(l) => format!("{} left under the {} allowed", s(b.usable_free()), s(l)),
        None => format!("{} free on {}", s(b.usable_free()), b.device),
    };
    (
        format!(
            "Fragmentation: {} is free in {}'s cache, but in pieces; with {room} the {} request finds no \
             piece large enough",
            s(b.cached),
            framework_name(b.format),
            s(b.request)
        ),
        evidence,
    )
}

fn others_cause(b: &Budget, short: &u64) -> (String, Vec<String>) {
    let s = |n| size(b.format, n);
    let others = b.others.unwrap_or(0);
    let mut evidence = vec![format!(
        "{} requested > {} free + {} free in {}'s cache = {}: short by {}",
        s(b.request),
        s(b.usable_free()),
        s(b.cached),
        framework_name(b.format),
        s(b.usable_free() + b.cached),
        s(*short)
    )];
    let listed: Vec<&ProcessMemory> = b.listed.iter().filter(|p| !p.this).collect();
    if !listed.is_empty() {
        let names: Vec<String> = listed.iter().map(|p| format!("process {} {}", p.pid, s(p.bytes))).collect();
        evidence.push(format!("other processes on {}: {}", b.device, names.join(", ")));
    } else if b.others_inferred {
        evidence.push(format!(
            "the message lists no processes; {} total - {} free - {} in {}'s cache leaves {} outside the cache, \
             more than a CUDA context takes (about {}): about {} is other processes'",
            s(b.total),
            s(b.free),
            s(b.reserved()),
            framework_name(b.format),
            s(others + (3 << 29)),
            s(3 << 29),
            s(others)
        ));
    }
    evidence.extend(site(b));
    (
        format!(
            "Other processes hold {} of {}: without them the {} request would fit",
            s(others),
            b.device,
            s(b.request)
        ),
        evidence,
    )
}

fn xla_shrink_fix(
    format: &MessageFormat,
    donate: &bool,
    dominant: &Option<(String, u64)>,
    needed: &u64,
    capacity: &u64,
    arguments: &u64,
    temporaries: &u64,
) -> String {
    let s = |n| size(*format, n);
    let mut steps = Vec::new();
    if *donate {
        steps.push(
            "the outputs are as large as the parameters: donate the inputs (jax.jit(f, donate_argnums=...)) so \
             XLA writes the outputs into their buffers"
                .to_string(),
        );
    }
    if let Some((op, bytes)) = dominant {
        steps.push(format!(
            "the largest buffer ({}, {:.0}% of the program) dominates: shrink the dimension that makes it \
             (batch, sequence, resolution) or compute it in pieces (jax.lax.map, a scan, jax.checkpoint around \
             the layer): {op}",
            s(*bytes),
            pct(*bytes, *needed)
        ));
    }
    if *format == MessageFormat::XlaHbm && *capacity > 0 {
        let over = needed.saturating_sub(*capacity);
        if arguments.saturating_mul(2) >= *capacity {
            steps.push(format!(
                "the arguments (parameters, optimizer state) take {} of the {}: shard them over more chips \
                 (FSDP-style sharding) or keep them in bfloat16",
                s(*arguments),
                s(*capacity)
            ));
        } else if *temporaries > 0 {
            steps.push(format!(
                "cut at least {} of the program's {} of temporaries ({:.0}%): a smaller batch per chip, or \
                 rematerialization (jax.checkpoint)",
                s(over),
                s(*temporaries),
                pct(over, *temporaries).ceil()
            ));
        }
    } else {
        steps.push(
            "reduce the batch, or rematerialize activations (jax.checkpoint); JAX takes 75% of the GPU up \
             front: XLA_PYTHON_CLIENT_MEM_FRACTION=.9 gives it more when nothing else shares the GPU"
                .to_string(),
        );
    }
    steps.join("; ")
}
