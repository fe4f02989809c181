//! A pasted out-of-memory message: the figures it gave, as typed data. Most users hold one
//! message, not a log: PyTorch's `CUDA out of memory. Tried to allocate …`, XLA's
//! `RESOURCE_EXHAUSTED: Out of memory while trying to allocate …`, a TPU's `Ran out of memory
//! in memory space hbm`, or an error that is an OOM in disguise (cuBLAS, cuDNN). What the
//! message did not say is `None`, never a guess.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which message it was: the framework, and the era its wording dates it to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// PyTorch ≤ 1.4: `(GPU 0; T total capacity; A already allocated; F free; C cached)`.
    TorchCached,
    /// PyTorch 1.5–1.9: `…; F free; R reserved in total by PyTorch)`.
    TorchReserved,
    /// PyTorch 1.10–2.0: as 1.5, with the `max_split_size_mb` hint.
    TorchMaxSplitHint,
    /// PyTorch 2.1: `GPU 0 has a total capacty of …` (sic), the `max_split_size_mb` hint.
    TorchCapacty,
    /// PyTorch 2.2 and later: `… total capacity of …`, the `expandable_segments` hint.
    #[default]
    TorchCapacity,
    /// PyTorch's cudaMallocAsync backend (`backend:cudaMallocAsync`): no cache figures.
    TorchAsync,
    /// PyTorch on Apple silicon: `MPS backend out of memory (MPS allocated: …)`.
    TorchMps,
    /// PyTorch's CPU allocator refusing (host memory, not the GPU's): never imported.
    TorchCpu,
    /// XLA (JAX, TF's XLA) at run time: `Out of memory while trying to allocate N bytes`,
    /// with or without the `BufferAssignment OOM Debugging` block.
    XlaRuntime,
    /// XLA's cudaMallocAsync allocator (`TF_GPU_ALLOCATOR=cuda_malloc_async`, JAX's
    /// `XLA_PYTHON_CLIENT_ALLOCATOR`): `cuMemAllocAsync failed to allocate N bytes ... Free
    /// memory/Total memory: F/T`, then its `Stats:`.
    XlaAsync,
    /// XLA on a TPU, at compile time: `Ran out of memory in memory space hbm`.
    XlaHbm,
    /// XLA on a TPU, at run time: `Attempting to allocate 15.65G. That was not possible.
    /// There are 11.08G free.`
    TpuRuntime,
    /// TensorFlow: `OOM when allocating tensor with shape[…]` without the allocator's dump.
    TfTensor,
    /// The CUDA driver or runtime: `CUDA error: out of memory`, `CUDA_ERROR_OUT_OF_MEMORY`.
    CudaRuntime,
    /// cuBLAS could not allocate its workspace: `CUBLAS_STATUS_ALLOC_FAILED`.
    Cublas,
    /// cuDNN could not start or allocate: `CUDNN_STATUS_NOT_INITIALIZED`,
    /// `CUDNN_STATUS_ALLOC_FAILED`, TF's `Could not create cudnn handle`.
    Cudnn,
    /// PaddlePaddle: `Out of memory error on GPU 0. Cannot allocate 98.000244MB memory on GPU 0,
    /// 6.000000GB memory has been allocated and available memory is only 0.000000B.`
    Paddle,
    /// llama.cpp and what builds on it (ggml, ollama): `allocating 9866.00 MiB on device 1:
    /// cudaMalloc failed: out of memory`.
    Ggml,
    /// vLLM at start-up: the KV cache for one request at the model's max length does not fit
    /// what `gpu_memory_utilization` leaves after the weights (`… KV cache is needed, which is
    /// larger than the available KV cache memory …`).
    VllmKvCache,
    /// SGLang at start-up: the weights leave nothing for the KV cache under
    /// `--mem-fraction-static` (`Loaded weights leave no GPU memory for the KV cache`).
    SglangKvCache,
    /// Text Generation Inference at start-up: its warm-up, a prefill of the largest batch it
    /// allows, ran out of memory beside the model (`Not enough memory to handle 4096 prefill
    /// tokens. You need to decrease --max-batch-prefill-tokens`).
    TgiWarmup,
    /// Another inference engine at start-up, in its own words: the KV cache it needs is more
    /// than the memory left for it (vllm.rs's `Insufficient GPU memory for KVCache allocation.
    /// Available: 29353.63 MB, Required: 131072.00 MB`).
    KvCacheCheck,
    /// Another inference engine at start-up, in its own words: the parts it must load (weights,
    /// temporary buffers) sum to more than the memory available to it (MLC-LLM's `The available
    /// single GPU memory is X, which is less than the sum of model weight size (W) and temporary
    /// buffer size (B)`).
    EngineCheck,
    /// ONNX Runtime's arena: `BFCArena::AllocateRawInternal ... Failed to allocate memory for
    /// requested buffer of size N`.
    OnnxArena,
    /// An accelerator runtime's own allocator, in its own words: MindSpore's
    /// (`TotalUsedMemStatistics : N ... plus alloc size : A is more than total mem size : T`),
    /// Tenstorrent's (`Not enough space to allocate N B L1 buffer`), Sophon's
    /// (`bm_alloc_gmem failed`).
    DeviceRuntime,
    /// A format a newer oomscope knows.
    #[serde(other)]
    Other,
}

impl MessageFormat {
    /// The framework and the versions whose wording it is.
    pub fn describe(self) -> &'static str {
        match self {
            MessageFormat::TorchCached => "PyTorch 1.4 or earlier",
            MessageFormat::TorchReserved => "PyTorch 1.5 to 1.9",
            MessageFormat::TorchMaxSplitHint => "PyTorch 1.10 to 2.0",
            MessageFormat::TorchCapacty => "PyTorch 2.1",
            MessageFormat::TorchCapacity => "PyTorch 2.2 or later",
            MessageFormat::TorchAsync => "PyTorch with the cudaMallocAsync backend",
            MessageFormat::TorchMps => "PyTorch on Apple silicon (MPS)",
            MessageFormat::TorchCpu => "PyTorch's CPU allocator",
            MessageFormat::XlaRuntime => "XLA (JAX or TensorFlow) at run time",
            MessageFormat::XlaAsync => "XLA's cudaMallocAsync allocator",
            MessageFormat::XlaHbm => "XLA on a TPU, at compile time",
            MessageFormat::TpuRuntime => "XLA on a TPU, at run time",
            MessageFormat::TfTensor => "TensorFlow",
            MessageFormat::CudaRuntime => "the CUDA runtime",
            MessageFormat::Cublas => "cuBLAS",
            MessageFormat::Cudnn => "cuDNN",
            MessageFormat::Paddle => "PaddlePaddle",
            MessageFormat::Ggml => "llama.cpp (ggml)",
            MessageFormat::OnnxArena => "ONNX Runtime",
            MessageFormat::VllmKvCache => "vLLM's KV cache check",
            MessageFormat::SglangKvCache => "SGLang's KV cache check",
            MessageFormat::TgiWarmup => "Text Generation Inference's warm-up",
            MessageFormat::KvCacheCheck => "an inference engine's KV cache check",
            MessageFormat::EngineCheck => "an inference engine's memory check at start-up",
            MessageFormat::DeviceRuntime => "an accelerator runtime's allocator",
            MessageFormat::Other => "a newer oomscope's format",
        }
    }

    /// PyTorch's caching allocator's own message (cache figures are in it).
    pub fn is_torch_cache(self) -> bool {
        matches!(
            self,
            MessageFormat::TorchCached
                | MessageFormat::TorchReserved
                | MessageFormat::TorchMaxSplitHint
                | MessageFormat::TorchCapacty
                | MessageFormat::TorchCapacity
        )
    }
}

/// The framework a message (or the traceback around it) comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    PyTorch,
    TensorFlow,
    Jax,
    Paddle,
    /// llama.cpp, ggml, ollama.
    LlamaCpp,
    OnnxRuntime,
    MxNet,
    TensorRt,
    /// Not told by the text.
    #[default]
    #[serde(other)]
    Unknown,
}

/// A process the message lists with its memory on the device (NVML's view).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    pub pid: u64,
    pub bytes: u64,
    /// The process that failed: named so by the message, or (in a container, where PyTorch
    /// cannot tell its own pid) the listed one whose memory holds all PyTorch reserved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub this: bool,
}

/// Where the failed request was made: the innermost frame of the traceback outside the
/// framework and the standard library, and the framework call it made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSite {
    /// `train.py`, as the traceback gives it (the last path component).
    pub file: String,
    pub line: u32,
    pub function: String,
    /// The framework function the failure happened in (`F.linear`,
    /// `scaled_dot_product_attention`, `conv2d`), when the traceback shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
}

impl fmt::Display for CallSite {
    /// How a report names the failing call: `F.linear in forward (model.py:114)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.call {
            Some(c) => write!(f, "{c} in {} ({}:{})", self.function, self.file, self.line),
            None => write!(f, "{} ({}:{})", self.function, self.file, self.line),
        }
    }
}

/// XLA's account of a program's memory: from the `BufferAssignment` stats (GPU) or the
/// `hbm` usage (TPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XlaProgram {
    /// What the program needs (total allocation, or the `hbm` used).
    pub needed: u64,
    /// The device's memory for it (`of 15.48G hbm`; 0: not said).
    pub capacity: u64,
    /// Parameters (arguments) and outputs kept live, and temporaries.
    pub parameters: u64,
    pub outputs: u64,
    pub temporaries: u64,
    /// Lost to fragmentation within the assignment.
    pub fragmentation: u64,
}

/// The figures of an out-of-memory message. Sizes are bytes, read from the message's
/// rounded figures (binary units) so that they print back the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub format: MessageFormat,
    #[serde(default)]
    pub framework: Framework,
    /// The device as the message names it (`GPU 0`, `hbm`, `MPS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The device's memory (`total capacity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Free on the device when it failed (after PyTorch released its unused cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
    /// Held by live tensors (`allocated by PyTorch`, `already allocated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<u64>,
    /// Reserved by the cache in all: live tensors plus cached free blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    /// The limit `torch.cuda.set_per_process_memory_fraction` set (`allowed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<u64>,
    /// Of `allocated`, what CUDA graphs' private pools hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_pools: Option<u64>,
    /// All this process holds on the device, non-PyTorch memory (CUDA context, libraries)
    /// included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<u64>,
    /// The processes the message lists (this one included when it is told apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessMemory>,
    /// The message suggests `expandable_segments:True` (PyTorch 2.2+) or `max_split_size_mb`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suggests_expandable: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suggests_max_split: bool,
    /// PyTorch on ROCm (`HIP out of memory`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rocm: bool,
    /// The settings variable the message names (`PYTORCH_CUDA_ALLOC_CONF`, and in newer or
    /// ROCm builds `PYTORCH_ALLOC_CONF`, `PYTORCH_HIP_ALLOC_CONF`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf_var: Option<String>,
    /// The largest free piece, when the message gives it (a TPU's runtime OOM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free: Option<u64>,
    /// vLLM's KV cache check: the model's max length, and the length vLLM estimates fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<CallSite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xla: Option<XlaProgram>,
    /// The line the message starts on in the input (1-based).
    #[serde(default)]
    pub line: u64,
    /// The other out-of-memory errors of the same paste (another GPU, another request),
    /// after this one: the verdict is this one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<OtherOom>,
    /// vLLM's check in tokens: how many fit in the KV cache (`max_len` is what one sequence
    /// needs). SGLang's prefill check: the pool's free slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_tokens: Option<u64>,
    /// The tokens of the prefill batch an engine's warm-up could not run (TGI's
    /// `--max-batch-prefill-tokens`), or SGLang's scheduler could not place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens: Option<u64>,
    /// Figures the message prints that are not sizes (`-2.00 GiB`, `nan GiB`, `1e308 GiB`),
    /// as printed: no framework prints them, so the text was edited or garbled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// The process figure PyTorch printed is 2^64 bytes (`this process has 17179869184.00 GiB`):
    /// NVML's answer when it has none (WSL, some containers), not a measure. Left out
    /// (`process` is `None`); the verdict is built on the other figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub process_unanswered: bool,
    /// The free memory and the cache's free memory are printed in MiB or finer (PyTorch
    /// switches units by size): their rounding is a hundredth of a MiB, not of a GiB.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fine_figures: bool,
}

/// Another out-of-memory error in the same paste.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherOom {
    /// The line it starts on (1-based).
    pub line: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<u64>,
    /// Its own figures, read as the first's are (without others of its own): each out-of-
    /// memory error of a paste gets its own verdict from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Box<Message>>,
}

impl Message {
    /// Memory other processes hold: the sum of those listed, else what the figures leave
    /// (`None` when they cannot tell it from this process's own non-PyTorch memory).
    pub fn others(&self) -> Option<u64> {
        if !self.processes.is_empty() {
            // (Saturating: a paste's figures may be any size, `14.59e` read as exabytes.)
            return Some(self.processes.iter().filter(|p| !p.this).fold(0u64, |s, p| s.saturating_add(p.bytes)));
        }
        let (total, free, process) = (self.total?, self.free?, self.process?);
        Some(total.saturating_sub(free).saturating_sub(process))
    }

    /// Reserved by the cache but not allocated: cached free blocks.
    pub fn unallocated(&self) -> Option<u64> {
        Some(self.reserved?.saturating_sub(self.allocated?))
    }
}
