//! The verdict on an out-of-memory message: no allocator state, only the figures the
//! message gave. The arithmetic is the one the figures allow, and each cause keeps the
//! figures that show it.
//!
//! With a request `Q`, the device's total `T` and free `F`, the framework's live tensors `A`
//! and the free memory its cache holds `U` (PyTorch's "reserved but unallocated"; its cache
//! is `R = A + U`), the process's memory outside the framework `C` (the CUDA context,
//! libraries), other processes' `O`, and a limit `L` the user set, the first that holds:
//!
//! 1. **one request too large** — `Q` is more than this process could ever have:
//!    `min(L, max(T - C, F + R))`, or than the device, or (no total) than any GPU;
//! 2. **figures disagree** — what was free, `F' = min(F, L - R)`, held the segment PyTorch
//!    asks the device for (the memory changed between the failure and the message, or the
//!    device reports unified memory);
//! 3. **other processes**, when they hold more than this process's whole cache and
//!    `Q ≤ F' + U + O`;
//! 4. **the limit** — the cache reached the limit the user set, and the live tensors with the
//!    request pass it (`A + Q > L`): packed perfectly they still would not fit;
//! 5. **fragmentation** — `Q ≤ F' + U` beyond the figures' rounding: the cache holds enough
//!    free memory, in pieces (PyTorch releases its unused whole blocks and retries before it
//!    fails, so what it still holds free is split);
//! 6. **other processes** — `Q ≤ F' + U + O`: it would fit if they were gone (when the
//!    message gives neither them nor this process's total, memory outside the cache well
//!    beyond what a context and libraries may take is taken for theirs);
//! 7. **true peak** — live tensors and the request, `A + Q`, are more than this process can
//!    have, `F' + R`.
//!
//! XLA's messages are the program's account of itself (what it needs at once, its largest
//! buffers); messages without figures (cuBLAS, cuDNN, the CUDA runtime) say only that the
//! device was full, and the verdict says what to run to find out why.

use super::Request;
use oomscope_format::{Dump, Framework, KindBytes, Message, MessageFormat, ProcessMemory, VerdictKind, XlaProgram};

/// The most a process's own memory outside the framework's cache takes: the CUDA context,
/// cuBLAS and cuDNN workspaces, NCCL (0.3 to 1.5 GiB).
const CONTEXT_ALLOWANCE: u64 = 3 << 29;

/// What a CUDA context with lazily loaded kernels takes beside cudaMallocAsync's pool, at
/// most, where the pool is inferred from memory neither live nor free.
const ASYNC_CONTEXT: u64 = 1 << 29;

/// Memory outside the cache beyond a context's that is taken for other processes' when the
/// message lists none: less is within what a context, libraries and the display may take.
const INFERRED_OTHERS: u64 = 512 << 20;

/// The most memory any GPU has (288 GB: NVIDIA's B300, AMD's MI355X): a request beyond it is
/// one tensor too large on whatever device it ran.
pub const LARGEST_GPU: u64 = 288_000_000_000;

/// What subtracting figures printed to two decimals can leave over.
const ROUNDING: u64 = 32 << 20;

/// A request this many times the device is not a batch that is a little too large.
const ABSURD: u64 = 4;

/// The cause of an OOM as a pasted message's figures show it.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageCause {
    /// one request larger than all this process could ever have.
    TooLarge { budget: Budget, can_ever: u64 },
    /// other processes hold what the request lacks.
    Others { budget: Budget, short: u64 },
    /// the framework's cache holds enough free memory, but in pieces.
    CacheInPieces { budget: Budget },
    /// A memory pool's own limit (CuPy's `set_limit`): what the pool `held` (freed blocks it
    /// keeps included) and the `request` pass the `limit`.
    PoolLimit { request: u64, held: u64, limit: u64 },
    /// live tensors and the request need more than this process can have.
    Peak { budget: Budget, needed: u64, can_have: u64 },
    /// A message whose figures say the request should have fit (free memory larger
    /// than the request, or free larger than the device).
    FiguresDisagree { budget: Budget },
    /// The message's figures contradict each other: no verdict is built on them.
    Contradiction { budget: Budget, what: Contradiction },
    /// From XLA's account of a program: it needs `needed`, the device has `capacity` (0:
    /// the message does not say); `top`: its largest buffers.
    XlaProgram {
        format: MessageFormat,
        request: Option<u64>,
        program: XlaProgram,
        top: Vec<(String, u64)>,
        single: bool,
    },
    /// A TPU's runtime OOM: the request against what was free (and the largest free piece).
    DeviceBuffer { format: MessageFormat, request: u64, free: u64, largest: Option<u64>, total: Option<u64> },
    /// vLLM at start-up: the KV cache one request at the model's max length needs is more
    /// than the memory `gpu_memory_utilization` leaves after the weights and activations.
    KvCache { needed: u64, available: u64, max_len: Option<u64> },
    /// vLLM's check in tokens: one sequence of `max_len` tokens, `fits` in the KV cache.
    /// `fits` is None where the paste cut the message before its figure.
    KvCacheTokens { max_len: u64, fits: Option<u64> },
    /// vLLM's profile at start-up: the weights, other memory and the activation peak take
    /// `used` of the `budget` gpu_memory_utilization allows (of `total`): no room for any KV
    /// cache.
    NoKvRoom { used: u64, budget: u64, total: Option<u64> },
    /// vLLM's profile at start-up left no memory for KV cache blocks, said without its
    /// figures (`No available memory for the cache blocks`).
    NoKvBlocks,
    /// SGLang's start-up check: the weights leave no memory for the KV cache.
    SglangNoKv,
    /// SGLang's scheduler: a prefill of `tokens` found `free` KV-cache slots (the rest of its
    /// pool held by running requests and its prefix cache).
    SglangPrefill { tokens: Option<u64>, free: Option<u64> },
    /// TGI's warm-up: a prefill of `tokens` (its largest batch) did not fit beside the model.
    TgiWarmup { tokens: Option<u64> },
    /// An engine's own load check said without figures (ExLlamaV2's `Insufficient VRAM for
    /// model and cache`): what it must load does not fit.
    EngineNoRoom,
    /// Another engine's start-up check, in its own words: what it `needed` (its KV cache, where
    /// `kv`; else the weights and buffers it must load) is more than the memory `available`.
    EngineCheck { needed: u64, available: u64, kv: bool },
    /// vLLM at start-up found `free` of the GPU's `total`, less than the `wanted`
    /// gpu_memory_utilization asks for: other processes hold the rest.
    VllmStartup { free: u64, total: u64, wanted: u64 },
    /// A message without the figures to tell the causes apart (cuBLAS, cuDNN, the CUDA
    /// runtime, XLA or TF without their breakdown).
    /// `free` and `total`: the device's, where the message gives them without what this process
    /// holds (DeepSpeed's workspace: `Requested`, `Free`, `Total`).
    WithoutFigures {
        format: MessageFormat,
        framework: Framework,
        request: Option<Request>,
        site: Option<String>,
        free: Option<u64>,
        total: Option<u64>,
    },
}

impl MessageCause {
    /// The class a dump's `verdict.kind` names.
    pub fn kind(&self) -> VerdictKind {
        match self {
            MessageCause::TooLarge { .. } => VerdictKind::SingleTensor,
            MessageCause::Others { .. } => VerdictKind::Others,
            MessageCause::CacheInPieces { .. } => VerdictKind::Fragmentation,
            MessageCause::Peak { .. }
            | MessageCause::PoolLimit { .. }
            | MessageCause::KvCache { .. }
            | MessageCause::KvCacheTokens { .. }
            | MessageCause::NoKvRoom { .. }
            | MessageCause::NoKvBlocks
            | MessageCause::SglangNoKv
            | MessageCause::SglangPrefill { .. }
            | MessageCause::TgiWarmup { .. }
            | MessageCause::EngineNoRoom
            | MessageCause::EngineCheck { .. } => VerdictKind::Peak,
            MessageCause::VllmStartup { .. } => VerdictKind::Others,
            MessageCause::XlaProgram { single: true, .. } => VerdictKind::SingleTensor,
            MessageCause::XlaProgram { program, .. } if program.needed == 0 => VerdictKind::Undetermined,
            MessageCause::XlaProgram { .. } => VerdictKind::Peak,
            MessageCause::FiguresDisagree { .. }
            | MessageCause::Contradiction { .. }
            | MessageCause::WithoutFigures { .. } => VerdictKind::Undetermined,
            MessageCause::DeviceBuffer { request, total: Some(t), .. } if request > t => VerdictKind::SingleTensor,
            MessageCause::DeviceBuffer { request, free, .. } if request <= free => VerdictKind::Fragmentation,
            MessageCause::DeviceBuffer { .. } => VerdictKind::Peak,
        }
    }
}

/// What to change, from a message's figures.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageFix {
    /// From a message, one request too large: it (the batch, the sequence, the resolution
    /// behind it) must shrink to `share` of its size; `absurd`: many times the device, which
    /// usually means a shape that is not what the code meant.
    ShrinkRequest { request: u64, can_ever: u64, share: f64, absurd: bool, format: MessageFormat },
    /// From a message, a true peak: live tensors and the request must shrink by `need`
    /// bytes, to `share` of them if all of it scales with the batch.
    ShrinkLive { need: u64, share: f64, format: MessageFormat },
    /// Other processes hold the memory: free it (`listed` when the message names them), or
    /// use another device.
    FreeOthers { others: u64, listed: Vec<ProcessMemory>, format: MessageFormat },
    /// PyTorch fragmentation, 2.1 and later: expandable segments, under the settings
    /// variable the message names.
    ExpandableSegmentsIn { conf_var: String },
    /// PyTorch fragmentation, 1.10 to 2.0: `max_split_size_mb`.
    MaxSplitSizeMb { mb: u64, conf_var: String },
    /// cudaMallocAsync's pool holds the memory in pieces: PyTorch's own allocator with
    /// expandable segments instead.
    NativeAllocator,
    /// XLA's cudaMallocAsync pool holds the memory: its BFC allocator instead.
    XlaBfcAllocator,
    /// PyTorch fragmentation before 1.10: no allocator setting for it; upgrade, or make the
    /// request fit in what is free.
    UpgradeForFragmentation { free: u64, request: u64 },
    /// The limit the user set is what ran out (`set_per_process_memory_fraction`, MPS's
    /// high watermark): raise it, or shrink.
    RaiseLimit { limit: u64, total: u64, format: MessageFormat },
    /// A memory pool's own limit (CuPy's `set_limit`), counting the freed blocks it keeps.
    PoolLimit { limit: u64, held: u64 },
    /// From XLA's account: what to shrink or share (`donate`: outputs as large as the
    /// parameters, so the input buffers can be reused; `dominant`: one buffer is most of it).
    XlaShrink {
        format: MessageFormat,
        donate: bool,
        dominant: Option<(String, u64)>,
        needed: u64,
        capacity: u64,
        arguments: u64,
        temporaries: u64,
    },
    /// A TPU buffer that did not fit: free buffers, donate, or a smaller batch (`short`:
    /// what was missing; `fragmented`: enough was free, in pieces).
    TpuBuffer { short: u64, fragmented: bool },
    /// A runtime's buffer that fit the free memory but not its largest free piece: free what
    /// splits it, or a buffer no larger than `largest`.
    BufferInPieces { request: u64, largest: u64 },
    /// vLLM: a shorter max length (`fits`: what vLLM estimates fits), more of the GPU, or the
    /// KV cache shared or made smaller.
    VllmKvCache { fits: Option<u64>, short: u64 },
    /// vLLM's check in tokens: `fits` tokens fit in the KV cache.
    VllmKvCacheTokens { fits: Option<u64> },
    /// vLLM with no room for a KV cache: a larger share of the GPU (`short` more at least), a
    /// smaller model, or the model shared over GPUs.
    VllmNoKvRoom { short: u64 },
    /// vLLM with no room for KV cache blocks, by how much not said.
    VllmNoKvBlocks,
    /// SGLang with no room for a KV cache: a larger `--mem-fraction-static`, a smaller model.
    SglangMemFraction,
    /// TGI's warm-up past the device: a smaller `--max-batch-prefill-tokens` than `tokens`, a
    /// quantized model, more shards.
    TgiPrefillTokens { tokens: Option<u64> },
    /// SGLang's prefill batches smaller (`--chunked-prefill-size`, `--max-running-requests`), or
    /// more of the GPU for its pool.
    SglangPrefill { tokens: Option<u64> },
    /// An engine's load past the device, by how much not said: a smaller cache or context, a
    /// quantized model, more GPUs.
    EngineNoRoom,
    /// Another engine's KV cache `short` of what it needs: a shorter context, fewer sequences,
    /// a smaller cache, or more of the GPU for it.
    EngineKvCache { short: u64 },
    /// Another engine's weights and buffers `short` of what they need: more of the GPU for it,
    /// a smaller model, the model split over GPUs, smaller temporary buffers.
    EngineLoad { short: u64 },
    /// vLLM at start-up: the other processes' memory freed, or a gpu_memory_utilization of at
    /// most `fits` (hundredths) of the GPU.
    VllmStartupFree { fits: u64 },
    /// What to run to find out.
    FindOut { format: MessageFormat, framework: Framework },
}

/// A message's cause, its fix, and the live bytes by kind the message shows.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageDiagnosis {
    pub cause: MessageCause,
    pub fix: MessageFix,
    pub breakdown: Vec<KindBytes>,
}

/// The figures of a message, in bytes. The renderer prints them in the message's style.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    pub format: MessageFormat,
    /// `GPU 0`, `MPS`.
    pub device: String,
    pub request: u64,
    /// The call the request came from (`F.linear in forward (model.py:42)`).
    pub site: Option<String>,
    pub total: u64,
    pub free: u64,
    /// Live tensors: what the framework has allocated.
    pub live: u64,
    /// Free memory in the framework's cache (reserved but unallocated).
    pub cached: u64,
    /// A limit the user set (`set_per_process_memory_fraction`, MPS's watermark).
    pub limit: Option<u64>,
    /// This process's memory outside the framework (the CUDA context, libraries).
    pub context: Option<u64>,
    /// Other processes' memory on the device: listed, or inferred (`others_inferred`).
    pub others: Option<u64>,
    pub others_inferred: bool,
    /// `cached` is inferred: cudaMallocAsync's pool, or other processes (the message cannot
    /// tell them apart).
    pub pool_inferred: bool,
    /// Memory outside the cache the message does not attribute (no process figure, no
    /// processes listed), too little to be sure it is other processes': this process's
    /// context and libraries, or others'.
    pub unattributed: Option<u64>,
    pub listed: Vec<ProcessMemory>,
    /// Of `live`, what CUDA graphs' private pools hold.
    pub private_pools: Option<u64>,
    /// The message gives no free figure (XPU's, some forks' old form): `free` is the most
    /// there could have been, the device's total less the framework's cache.
    pub free_at_most: bool,
}

/// Figures of one message that cannot all be true.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contradiction {
    /// The process's cache and the free memory are more than the device: `held` of `total`.
    MoreThanTheDevice { held: u64 },
    /// The process in all (`process`) holds less than its own cache (`reserved`).
    ProcessBelowCache { process: u64, reserved: u64 },
    /// The cache (`reserved`) is less than its live tensors (`allocated`).
    ReservedBelowAllocated { reserved: u64, allocated: u64 },
    /// A figure no device has (16 TiB or more: beyond any GPU with all of a host's memory
    /// that Windows lends it).
    Absurd { figure: u64 },
    /// Figures that are not sizes, as printed (`-2.00 GiB`, `nan GiB`, `1e308 GiB`).
    NotSizes { figures: Vec<String> },
}

/// Bytes no device has: 16 TiB (PaddlePaddle once printed 127.99 TB allocated on an 11 GB
/// card).
const NO_DEVICE: u64 = 1 << 44;

/// The contradiction among a message's figures, if any. Figures printed to two decimals
/// may disagree by their rounding; more than that is a contradiction. (Windows reports
/// live memory beyond the device, from shared system memory: a cache larger than the device
/// is that, not a contradiction.)
fn contradiction(m: &Message) -> Option<Contradiction> {
    if !m.unreadable.is_empty() {
        return Some(Contradiction::NotSizes { figures: m.unreadable.clone() });
    }
    let round = |n: u64| (n / 100).max(ROUNDING);
    // (A process the message lists is one of the device's figures too.)
    let listed = m.processes.iter().map(|p| Some(p.bytes));
    for f in [m.total, m.free, m.allocated, m.reserved, m.process].into_iter().chain(listed).flatten() {
        if f >= NO_DEVICE {
            return Some(Contradiction::Absurd { figure: f });
        }
    }
    if let (Some(r), Some(a)) = (m.reserved, m.allocated)
        && r + round(a) < a
    {
        return Some(Contradiction::ReservedBelowAllocated { reserved: r, allocated: a });
    }
    let reserved = m.reserved.or(m.allocated)?;
    if let Some(p) = m.process.filter(|&p| p > 0 && p + round(reserved) < reserved) {
        return Some(Contradiction::ProcessBelowCache { process: p, reserved });
    }
    if let (Some(t), Some(f)) = (m.total, m.free) {
        let held = reserved + f;
        if m.allocated.is_some_and(|a| a <= t) && f <= t && held > t + round(t) {
            return Some(Contradiction::MoreThanTheDevice { held });
        }
    }
    None
}

impl Budget {
    /// What the process's cache holds in all.
    pub fn reserved(&self) -> u64 {
        self.live.saturating_add(self.cached)
    }

    /// Free memory the request could have had: the device's, within the user's limit.
    pub fn usable_free(&self) -> u64 {
        match self.limit {
            Some(l) => self.free.min(l.saturating_sub(self.reserved())),
            None => self.free,
        }
    }

    /// The most this process could have with nothing of its own live. (Windows can report
    /// more allocated than the device has, from shared system memory: what the message shows
    /// was had then counts too. On MPS the watermark counts the process's other allocations.)
    pub fn can_ever(&self) -> u64 {
        let context = self.context.unwrap_or(0);
        if self.format == MessageFormat::TorchMps {
            return self.limit.unwrap_or(self.total).saturating_sub(context);
        }
        let device = self.total.saturating_sub(context).max(self.free.saturating_add(self.reserved()));
        self.limit.map_or(device, |l| l.min(device))
    }

    /// What the request and the live tensors could have had at the failure: the free memory
    /// and the whole cache.
    pub fn can_have(&self) -> u64 {
        self.usable_free().saturating_add(self.reserved()).min(self.can_ever())
    }

    /// True when the user's limit, not the device, is what ran out.
    pub fn limited(&self) -> bool {
        self.limit.is_some_and(|l| l < self.total.saturating_sub(self.context.unwrap_or(0)))
    }
}

pub(super) fn analyze(d: &Dump, m: &Message, mut b: Vec<KindBytes>) -> MessageDiagnosis {
    let request = d.oom.as_ref().map(Request::of);
    let site = m.site.as_ref().map(ToString::to_string);
    let without = |b: Vec<KindBytes>| MessageDiagnosis {
        cause: MessageCause::WithoutFigures {
            format: m.format,
            framework: m.framework,
            request: request.clone(),
            site: site.clone(),
            free: m.free,
            total: m.total,
        },
        fix: MessageFix::FindOut { format: m.format, framework: m.framework },
        breakdown: b,
    };
    if let (Some(r), Some(free), MessageFormat::TpuRuntime) = (&request, m.free, m.format) {
        let fragmented = r.requested <= free;
        return MessageDiagnosis {
            cause: MessageCause::DeviceBuffer {
                format: m.format,
                request: r.requested,
                free,
                largest: m.largest_free,
                total: m.total,
            },
            fix: MessageFix::TpuBuffer { short: r.requested.saturating_sub(free), fragmented },
            breakdown: b,
        };
    }
    // A runtime that prints its largest free piece beside the free memory (Tenstorrent's bank
    // manager): a request within the free memory but past the largest piece is memory in
    // pieces, said by the runtime itself.
    if let (Some(r), Some(free), Some(largest)) = (&request, m.free, m.largest_free)
        && m.format != MessageFormat::TpuRuntime
        && r.requested <= free
        && r.requested > largest
    {
        return MessageDiagnosis {
            cause: MessageCause::DeviceBuffer {
                format: m.format,
                request: r.requested,
                free,
                largest: Some(largest),
                total: m.total,
            },
            fix: MessageFix::BufferInPieces { request: r.requested, largest },
            breakdown: b,
        };
    }
    // (The tokens form cut before its figure still says which check failed: the KV cache holds
    // less than one sequence at the model's max length.)
    if let (MessageFormat::VllmKvCache, Some(max_len), fits) = (m.format, m.max_len, m.kv_tokens)
        && (fits.is_some() || request.is_none() && m.free.is_none())
    {
        return MessageDiagnosis {
            cause: MessageCause::KvCacheTokens { max_len, fits },
            fix: MessageFix::VllmKvCacheTokens { fits },
            breakdown: b,
        };
    }
    if let (MessageFormat::VllmKvCache, None, Some(used), Some(budget)) = (m.format, &request, m.allocated, m.allowed)
        && used >= budget
    {
        return MessageDiagnosis {
            cause: MessageCause::NoKvRoom { used, budget, total: m.total },
            fix: MessageFix::VllmNoKvRoom { short: used - budget },
            breakdown: b,
        };
    }
    if let (MessageFormat::VllmKvCache, None, Some(free), Some(total), Some(wanted)) =
        (m.format, &request, m.free, m.total, m.allowed)
        && free < wanted
        && total > 0
    {
        return MessageDiagnosis {
            cause: MessageCause::VllmStartup { free, total, wanted },
            fix: MessageFix::VllmStartupFree { fits: (free * 100 / total).saturating_sub(1) },
            breakdown: b,
        };
    }
    // (Whatever its size: the cache the engine sizes from its context and sequences, not a
    // tensor the program asked for.)
    if let (MessageFormat::KvCacheCheck | MessageFormat::EngineCheck, Some(r), Some(available)) =
        (m.format, &request, m.free)
        && r.requested > available
    {
        let (kv, short) = (m.format == MessageFormat::KvCacheCheck, r.requested - available);
        return MessageDiagnosis {
            cause: MessageCause::EngineCheck { needed: r.requested, available, kv },
            fix: if kv { MessageFix::EngineKvCache { short } } else { MessageFix::EngineLoad { short } },
            breakdown: b,
        };
    }
    if m.format == MessageFormat::EngineCheck && (request.is_none() || m.free.is_none()) {
        return MessageDiagnosis { cause: MessageCause::EngineNoRoom, fix: MessageFix::EngineNoRoom, breakdown: b };
    }
    if m.format == MessageFormat::TgiWarmup {
        let tokens = m.prefill_tokens;
        return MessageDiagnosis {
            cause: MessageCause::TgiWarmup { tokens },
            fix: MessageFix::TgiPrefillTokens { tokens },
            breakdown: b,
        };
    }
    if m.format == MessageFormat::SglangKvCache && m.prefill_tokens.is_some() {
        let tokens = m.prefill_tokens;
        return MessageDiagnosis {
            cause: MessageCause::SglangPrefill { tokens, free: m.kv_tokens },
            fix: MessageFix::SglangPrefill { tokens },
            breakdown: b,
        };
    }
    if m.format == MessageFormat::SglangKvCache {
        return MessageDiagnosis { cause: MessageCause::SglangNoKv, fix: MessageFix::SglangMemFraction, breakdown: b };
    }
    // (Not the tokens form cut before its figure: its `max seq len (N)` says which check it was.)
    if m.format == MessageFormat::VllmKvCache
        && request.is_none()
        && m.free.is_none()
        && m.kv_tokens.is_none()
        && m.max_len.is_none()
    {
        return MessageDiagnosis { cause: MessageCause::NoKvBlocks, fix: MessageFix::VllmNoKvBlocks, breakdown: b };
    }
    if let (MessageFormat::VllmKvCache, Some(r), Some(available)) = (m.format, &request, m.free) {
        return MessageDiagnosis {
            cause: MessageCause::KvCache { needed: r.requested, available, max_len: m.max_len },
            fix: MessageFix::VllmKvCache { fits: m.estimated_len, short: r.requested.saturating_sub(available) },
            breakdown: b,
        };
    }
    if matches!(m.format, MessageFormat::XlaRuntime | MessageFormat::XlaHbm) {
        match xla(d, m, b) {
            Ok(v) => return v,
            // Without the program's account, a request beyond any GPU is still one tensor
            // too large (below): four times any GPU, as XLA on unified memory may be given
            // that much of the host's (AlphaFold's XLA_PYTHON_CLIENT_MEM_FRACTION=4.0).
            Err(b) if request.as_ref().is_none_or(|r| r.requested <= 4 * LARGEST_GPU) => return without(b),
            Err(back) => b = back,
        }
    }
    // Figures that are not sizes, or no device's: no verdict is built on them, not even "one
    // tensor too large". (Figures that disagree among themselves are checked after it: a
    // request beyond the device's total is too large whatever the others say.)
    let contradicts = contradiction(m);
    if let Some(what) =
        contradicts.clone().filter(|w| matches!(w, Contradiction::NotSizes { .. } | Contradiction::Absurd { .. }))
    {
        let budget = match &request {
            Some(r) => budget_of(m, r, m.free.unwrap_or(0), m.allocated.unwrap_or(0)),
            None => Budget {
                format: m.format,
                device: m.device.clone().unwrap_or_else(|| "the device".into()),
                total: m.total.unwrap_or(0),
                free: m.free.unwrap_or(0),
                live: m.allocated.unwrap_or(0),
                ..Budget::default()
            },
        };
        return MessageDiagnosis {
            cause: MessageCause::Contradiction { budget, what },
            fix: MessageFix::FindOut { format: m.format, framework: m.framework },
            breakdown: b,
        };
    }
    // A request more than any GPU has (or than this device has, whatever else the message
    // says: Windows can report more in use than the device holds, from shared system memory)
    // is one tensor too large, with or without the other figures.
    let figured = m.total.is_some() && m.free.is_some() && m.allocated.is_some();
    // (A limit alone, with no device figures: TensorRT's workspace pool, `requires N bytes of
    // scratch space, but only L is available`; one request past it never fits.)
    let past_limit = |r: &Request| {
        m.total.is_none() && m.free.is_none() && m.allocated.is_none() && m.allowed.is_some_and(|l| r.requested > l)
    };
    if let Some(r) = request.as_ref().filter(|r| {
        !figured
            && (r.requested > LARGEST_GPU
                || m.total.is_some_and(|t| r.requested > t && m.free.is_none_or(|f| f <= t))
                || past_limit(r))
    }) {
        let total = m.total.unwrap_or(0);
        let can_ever = if total > 0 && r.requested > total {
            total.min(m.allowed.unwrap_or(total))
        } else if past_limit(r) {
            m.allowed.unwrap_or(0)
        } else {
            0
        };
        let budget = Budget {
            format: m.format,
            device: m.device.clone().unwrap_or_else(|| "the device".into()),
            request: r.requested,
            site: r.op.clone(),
            total,
            free: m.free.unwrap_or(0),
            limit: m.allowed,
            ..Budget::default()
        };
        let absurd =
            r.requested >= 1 << 60 || r.requested > ABSURD.saturating_mul(if total > 0 { total } else { LARGEST_GPU });
        return MessageDiagnosis {
            fix: MessageFix::ShrinkRequest {
                request: r.requested,
                can_ever,
                share: if can_ever > 0 { can_ever as f64 / r.requested as f64 } else { 0.0 },
                absurd: absurd || can_ever == 0,
                format: m.format,
            },
            cause: MessageCause::TooLarge { budget, can_ever: if can_ever > 0 { can_ever } else { LARGEST_GPU } },
            breakdown: b,
        };
    }
    // No free figure (XPU's message, some forks' old form), but the process's own live
    // tensors and the request pass the device's total: a peak, whatever else was free.
    if let (Some(r), None, Some(live), Some(total)) = (&request, m.free, m.allocated, m.total)
        && r.requested <= total
        && live.saturating_add(r.requested) > total
        && m.reserved.is_none_or(|reserved| reserved >= live && reserved <= total)
    {
        let free = total.saturating_sub(m.reserved.unwrap_or(live));
        let budget = Budget { free_at_most: true, ..budget_of(m, r, free, live) };
        return peak(budget, m, b);
    }
    // A pool's own limit and no device figures (CuPy's `set_limit`: `allocated so far: A
    // bytes, limit set to: L bytes`): what the pool holds and the request past the limit.
    if let (Some(r), None, None, Some(held), Some(limit)) = (&request, m.free, m.total, m.allocated, m.allowed)
        && r.requested <= limit
        && held.saturating_add(r.requested) > limit
    {
        return MessageDiagnosis {
            cause: MessageCause::PoolLimit { request: r.requested, held, limit },
            fix: MessageFix::PoolLimit { limit, held },
            breakdown: b,
        };
    }
    // A CUDA program's own account of the device (PhoenixMiner's `CUDA memory: 4.00 GB total,
    // 3.30 GB free`) with no allocator of its own that caches: nothing held in a cache, all it
    // holds outside one, where the total less the free shows it.
    let no_cache = (m.format == MessageFormat::CudaRuntime && m.total.is_some()).then_some(0);
    let (Some(r), Some(free), Some(live)) = (&request, m.free, m.allocated.or(no_cache)) else {
        return without(b);
    };
    // PyTorch's cache figure cut away (`Of the allocated memory 6.93 GiB is alloca`): what the
    // cache held free is not known, and with it neither fragmentation nor a peak, unless the
    // live tensors and the request pass the whole device.
    if m.format.is_torch_cache()
        && m.reserved.is_none()
        && m.total.is_some_and(|t| live.saturating_add(r.requested) <= t)
        && r.requested > free
    {
        return without(b);
    }
    let budget = budget_of(m, r, free, live);
    // A request beyond the device's total is too large whatever the other figures say; they
    // are checked against each other before any other verdict.
    let beyond_device = budget.total > 0 && budget.request > budget.total && free <= budget.total;
    if let Some(what) = contradicts.filter(|_| !beyond_device) {
        return MessageDiagnosis {
            cause: MessageCause::Contradiction { budget, what },
            fix: MessageFix::FindOut { format: m.format, framework: m.framework },
            breakdown: b,
        };
    }
    let (total, cached) = (budget.total, budget.cached);
    let q = budget.request;
    // More than the device holds is too large even where Windows lends shared system memory.
    // (Not when the figures disagree: free more than the device is unified or shared memory.)
    let can_ever =
        if total > 0 && q > total && free <= total { budget.can_ever().min(total) } else { budget.can_ever() };
    // MPS: the process's other allocations alone at the watermark leave nothing for any
    // request, however small: the limit is what ran out, not one tensor too large.
    if m.format == MessageFormat::TorchMps && can_ever == 0 && budget.limit.is_some() {
        return peak(budget, m, b);
    }
    if q > can_ever {
        let share = can_ever as f64 / q as f64;
        return MessageDiagnosis {
            fix: MessageFix::ShrinkRequest {
                request: q,
                can_ever,
                share,
                absurd: q > ABSURD.saturating_mul(total.max(can_ever)),
                format: m.format,
            },
            cause: MessageCause::TooLarge { budget, can_ever },
            breakdown: b,
        };
    }
    let free_now = budget.usable_free();
    if (total > 0 && free > total) || free_now >= segment(m.format, q) {
        return MessageDiagnosis {
            cause: MessageCause::FiguresDisagree { budget },
            fix: MessageFix::FindOut { format: m.format, framework: m.framework },
            breakdown: b,
        };
    }
    // Figures are printed to two decimals: a request that fits the free memory only within
    // that rounding is a full device, not fragmentation. In GiB that is several MiB a
    // figure; in MiB, a hundredth of one.
    let slack = (q / 50).max(if m.fine_figures { 1 << 20 } else { 16 << 20 });
    // The limit the user set is reached. When the live tensors and the request would fit
    // under it packed, the cache's free pieces are what failed: the new segment the request
    // needed passes the limit. Not for a small-pool request ("Tried to allocate" a 2 MiB
    // segment): the free pieces the message counts are mostly the large pool's, which never
    // serve it.
    if budget.limited()
        && budget.limit.is_some_and(|l| {
            let seg = segment(m.format, q);
            l.saturating_sub(budget.reserved()) < seg
                && (live.saturating_add(q + slack) > l || (m.format.is_torch_cache() && q <= 2 << 20))
        })
    {
        return peak(budget, m, b);
    }
    // Memory outside this process that no listed process shows is blamed only beyond what a
    // context, libraries and a display may take: less could be the desktop's own.
    let listed = budget.listed.iter().any(|p| !p.this);
    let other = budget.others.filter(|&o| listed || budget.others_inferred || o >= CONTEXT_ALLOWANCE).unwrap_or(0);
    // Others inferred (none listed, no process figure) are blamed only where they alone would
    // make room: the cache's free pieces did not serve the request, and whether they would
    // have without others is not known.
    let room = if budget.others_inferred {
        free_now.saturating_add(other)
    } else {
        free_now.saturating_add(cached).saturating_add(other)
    };
    let others_hold = !budget.limited() && other > 0 && q <= room;
    // Other processes holding more than this process's whole cache are the cause even when
    // the cache's free pieces would have done for this one request.
    if others_hold && other >= budget.reserved() {
        return others_verdict(budget, m, free_now, b);
    }
    if q.saturating_add(slack) <= free_now.saturating_add(cached) {
        let fix = fragmentation_fix(m, q, free_now);
        return MessageDiagnosis { cause: MessageCause::CacheInPieces { budget }, fix, breakdown: b };
    }
    if others_hold {
        return others_verdict(budget, m, free_now, b);
    }
    peak(budget, m, b)
}

/// A message's figures as a budget: what this process holds live and cached, what was free,
/// the context, and what other processes hold (given, or inferred beyond a context's worth).
fn budget_of(m: &Message, r: &Request, free: u64, live: u64) -> Budget {
    // Without the device's total (PaddlePaddle's message), only what this process holds and
    // what was free are known: a peak when they do not hold the request, others unknown.
    let total = m.total.unwrap_or(0);
    let mut cached = m.unallocated().unwrap_or(0);
    // NVML reporting every process at 0 bytes (MIG, some containers), or this process at less
    // than its own cache, says nothing.
    let nvml_blind =
        (!m.processes.is_empty() && m.processes.iter().all(|p| p.bytes == 0) && m.process.unwrap_or(0) == 0)
            || m.process.is_some_and(|p| p < live + cached);
    let process = m.process.filter(|_| !nvml_blind);
    let mut others = if nvml_blind { None } else { m.others() };
    let mut others_inferred = false;
    let mut unattributed = None;
    let mut context = process.map(|p| p.saturating_sub(live + cached));
    // Three figures rounded to two decimals leave a few MiB that are nobody's.
    others = others.filter(|&o| !m.processes.is_empty() || o >= ROUNDING);
    let mut pool_inferred = false;
    if others.is_none() && process.is_none() && total > 0 && m.format != MessageFormat::TorchMps {
        // Outside the cache, and this process's own total not given: up to a context's worth
        // may be this process's own, what is well beyond it others' (or, with cudaMallocAsync,
        // the driver's pool keeping what was freed: it keeps all).
        let outside = total.saturating_sub(free).saturating_sub(live + cached);
        let async_pool = matches!(m.format, MessageFormat::TorchAsync | MessageFormat::XlaAsync);
        // cudaMallocAsync's pool keeps what was freed: beyond half a GiB for a context (lazy
        // loading keeps it small), what holds the request is the pool's, however much it is.
        if async_pool && outside >= ASYNC_CONTEXT + r.requested {
            cached = outside - ASYNC_CONTEXT;
            pool_inferred = true;
        } else if outside >= CONTEXT_ALLOWANCE + INFERRED_OTHERS {
            if async_pool {
                cached = outside - CONTEXT_ALLOWANCE;
                pool_inferred = true;
            } else {
                others = Some(outside - CONTEXT_ALLOWANCE);
                others_inferred = true;
            }
        } else if !async_pool {
            if outside >= 1 << 30 {
                unattributed = Some(outside);
            }
            // Up to a context's worth outside the cache is this process's own (its CUDA context,
            // cuDNN's and cuBLAS's workspaces): no request can have it.
            context = Some(outside.min(CONTEXT_ALLOWANCE));
        }
    }
    Budget {
        format: m.format,
        device: m.device.clone().unwrap_or_else(|| "the device".into()),
        request: r.requested,
        site: r.op.clone(),
        total,
        free,
        live,
        cached,
        limit: m.allowed,
        context,
        others,
        others_inferred,
        pool_inferred,
        unattributed,
        listed: if nvml_blind { Vec::new() } else { m.processes.clone() },
        private_pools: m.private_pools,
        free_at_most: false,
    }
}

/// What PyTorch's caching allocator asks the device for to serve a request of `q`: a 2 MiB
/// segment for a small one, 20 MiB for one under 10 MiB, else `q` in 2 MiB steps. (MPS
/// allocates heaps of up to 32 MiB for small requests.)
fn segment(format: MessageFormat, q: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    if format == MessageFormat::TorchMps {
        q + 32 * MIB
    } else if !format.is_torch_cache() {
        q
    } else if q <= MIB {
        2 * MIB
    } else if q < 10 * MIB {
        20 * MIB
    } else {
        q.div_ceil(2 * MIB).saturating_mul(2 * MIB)
    }
}

fn others_verdict(budget: Budget, m: &Message, free_now: u64, b: Vec<KindBytes>) -> MessageDiagnosis {
    let short = budget.request.saturating_sub(free_now + budget.cached);
    MessageDiagnosis {
        fix: MessageFix::FreeOthers {
            others: budget.others.unwrap_or(0),
            listed: budget.listed.clone(),
            format: m.format,
        },
        cause: MessageCause::Others { budget, short },
        breakdown: b,
    }
}

fn peak(budget: Budget, m: &Message, b: Vec<KindBytes>) -> MessageDiagnosis {
    let (q, live, total) = (budget.request, budget.live, budget.total);
    let free_now = budget.usable_free();
    let can_have = budget.can_have();
    let needed = live + q;
    // When the sum would just fit, packed perfectly, what this request lacked is the measure.
    let need = if needed > can_have { needed - can_have } else { q.saturating_sub(free_now) };
    let fix = if budget.limited() || m.format == MessageFormat::TorchMps {
        MessageFix::RaiseLimit { limit: budget.limit.unwrap_or(0), total, format: m.format }
    } else {
        MessageFix::ShrinkLive { need, share: 1.0 - need as f64 / needed.max(1) as f64, format: m.format }
    };
    MessageDiagnosis { cause: MessageCause::Peak { budget, needed, can_have }, fix, breakdown: b }
}

/// The setting against fragmentation that the message's PyTorch has.
fn fragmentation_fix(m: &Message, request: u64, free: u64) -> MessageFix {
    let conf_var = m.conf_var.clone().unwrap_or_else(|| "PYTORCH_CUDA_ALLOC_CONF".into());
    match m.format {
        MessageFormat::TorchCapacity | MessageFormat::TorchCapacty => MessageFix::ExpandableSegmentsIn { conf_var },
        MessageFormat::TorchAsync => MessageFix::NativeAllocator,
        MessageFormat::XlaAsync => MessageFix::XlaBfcAllocator,
        MessageFormat::TorchMaxSplitHint => {
            // Blocks this size and larger are then never split for smaller requests.
            let mb = if request < 1 << 30 { 128 } else { 512 };
            MessageFix::MaxSplitSizeMb { mb, conf_var }
        }
        _ => MessageFix::UpgradeForFragmentation { free, request },
    }
}

/// XLA's account: the program's needs against the device's memory (a TPU's message gives
/// both; a GPU's only the program's).
fn xla(d: &Dump, m: &Message, b: Vec<KindBytes>) -> Result<MessageDiagnosis, Vec<KindBytes>> {
    let top: Vec<(String, u64)> = d.usage_by_node.iter().take(5).map(|n| (n.op.clone(), n.bytes)).collect();
    let Some(program) = m.xla.filter(|x| x.needed > 0).or_else(|| {
        // A paste of the buffers alone: their sum is what is known of the program.
        (!top.is_empty()).then(oomscope_format::XlaProgram::default)
    }) else {
        return Err(b);
    };
    let request = d.oom.as_ref().map(|o| o.requested);
    let largest = d.usage_by_node.first().map_or(0, |n| n.bytes);
    let single = program.capacity > 0 && largest > program.capacity;
    // The largest buffer an op makes (inputs cannot be computed in pieces).
    let dominant = d
        .usage_by_node
        .iter()
        .find(|n| !n.op.starts_with("parameter "))
        // (Figures a paste garbled may be near u64's end: compared without overflow.)
        .filter(|n| program.needed > 0 && n.bytes.saturating_mul(10) >= program.needed.saturating_mul(4));
    // One buffer (or request) larger than any device, a program several times the largest
    // device (a shape the code did not mean), or the arguments alone larger than this one: a
    // smaller batch cannot help. (A program a little beyond any one device is a peak: a smaller
    // batch, or sharding it, brings it down.)
    let single = single
        || largest.max(request.unwrap_or(0)) > LARGEST_GPU
        || program.needed > ABSURD * LARGEST_GPU
        || (program.capacity > 0 && program.parameters > program.capacity);
    let donate = program.parameters > 0
        && program.outputs.saturating_mul(10) >= program.parameters.saturating_mul(9)
        && program.parameters.saturating_mul(4) >= program.needed;
    Ok(MessageDiagnosis {
        fix: MessageFix::XlaShrink {
            format: m.format,
            donate,
            dominant: dominant.map(|n| (n.op.clone(), n.bytes)),
            needed: program.needed,
            capacity: program.capacity,
            arguments: program.parameters,
            temporaries: program.temporaries,
        },
        cause: MessageCause::XlaProgram { format: m.format, request, program, top, single },
        breakdown: b,
    })
}
