//! Out-of-memory messages, as users paste them: PyTorch's caching allocator in every era,
//! its cudaMallocAsync backend and MPS, XLA at run time and on TPUs, TensorFlow without its
//! allocator's dump, and errors that are OOMs in disguise (cuBLAS, cuDNN, the CUDA runtime).
//! The figures become a [`Message`] in a dump, and the verdict reads them from there.
//!
//! Pasted text is untidy: prefixes before the message (`[rank0]: `, a logger's, a CI's
//! timestamp), the message wrapped over several lines, cut at either end, repeated. Each
//! figure is looked for by its words wherever it is in the message, so order, wrapping and
//! missing parts do not matter; what is not there stays `None`.
//!
//! A text that is not an OOM of the device but looks like one (an illegal memory access, a
//! device-side assert, host memory) is refused with what it is: [`not_an_oom`].

use super::figures::{self, Role};
use oomscope_base::size::parse_figure;
use oomscope_format::InputError;
use oomscope_format::{
    AllocatorInfo, CallSite, DeviceInfo, DeviceKind, Dump, Framework, Imported, ImportedFrom, Message, MessageFormat,
    NodeUsage, OomRecord, ProcessMemory, Section, Source, SourceKind, Stats, XlaProgram,
};
use std::path::Path;

/// What figures printed to two decimals can differ by.
const ROUNDING: u64 = 16 << 20;

/// Lines after a message's first that may still be part of it (wrapped by the user or a
/// terminal, or the lines of a multi-line message).
pub(super) const MESSAGE_LINES: usize = 12;

/// Where in the text a recognised message starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Found {
    format: MessageFormat,
    /// 0-based line.
    line: usize,
    /// Byte offset of the marker in that line.
    at: usize,
}

/// The markers, most specific first; the first that matches a line names its format (the
/// PyTorch era is then refined from the message's wording).
const MARKERS: &[(&str, MessageFormat)] = &[
    ("out of memory. Tried to allocate", MessageFormat::TorchCapacity),
    ("memory allocation failed with OOM on device", MessageFormat::TorchCapacity),
    ("would exceed allowed memory. (out of memory)", MessageFormat::TorchAsync),
    ("MPS backend out of memory", MessageFormat::TorchMps),
    ("Ran out of memory in memory space", MessageFormat::XlaHbm),
    ("Out of memory while trying to allocate", MessageFormat::XlaRuntime),
    // (The same cut before its figure: `RESOURCE_EXHAUSTED: Out of memory whil`; not XLA's CPU
    // backend's `Out of memory allocating N bytes`, host memory.)
    ("RESOURCE_EXHAUSTED: Out of memory wh", MessageFormat::XlaRuntime),
    ("Failed to allocate request for", MessageFormat::XlaRuntime),
    ("That was not possible. There are", MessageFormat::XlaRuntime),
    // The same without its free figures (`Attempting to reserve 6.14G at the bottom of memory.
    // That was not possible.`).
    ("at the bottom of memory. That was not possible", MessageFormat::XlaRuntime),
    ("G. That was not possible", MessageFormat::XlaRuntime),
    ("cuMemAllocAsync failed to allocate", MessageFormat::XlaRuntime),
    ("bytes allocatable,", MessageFormat::XlaRuntime),
    ("is reserved by PyTorch but unallocated", MessageFormat::TorchCapacity),
    ("reserved in total by PyTorch", MessageFormat::TorchReserved),
    ("CUBLAS_STATUS_ALLOC_FAILED", MessageFormat::Cublas),
    ("CUBLAS_STATUS_NOT_INITIALIZED", MessageFormat::Cublas),
    ("CUDNN_STATUS_ALLOC_FAILED", MessageFormat::Cudnn),
    ("CUDNN_STATUS_NOT_INITIALIZED", MessageFormat::Cudnn),
    // The other CUDA libraries' allocation failures: cuSOLVER, cuFFT, cuSPARSE, nvJPEG.
    ("CUSOLVER_STATUS_ALLOC_FAILED", MessageFormat::CudaRuntime),
    ("CUFFT_ALLOC_FAILED", MessageFormat::CudaRuntime),
    // (Its words, as CUDA.jl's CUFFTError prints them.)
    ("cuFFT failed to allocate GPU or CPU memory", MessageFormat::CudaRuntime),
    ("CUSPARSE_STATUS_ALLOC_FAILED", MessageFormat::CudaRuntime),
    ("NVJPEG_STATUS_ALLOCATOR_FAILURE", MessageFormat::CudaRuntime),
    ("CURAND_STATUS_ALLOCATION_FAILED", MessageFormat::CudaRuntime),
    // TensorRT 8+: `Error Code 2: OutOfMemory (no further information)`.
    ("Error Code 2: OutOfMemory", MessageFormat::CudaRuntime),
    // OpenCL's failed buffer allocation; OpenVINO's GPU plugin.
    ("CL_MEM_OBJECT_ALLOCATION_FAILURE", MessageFormat::DeviceRuntime),
    ("out of GPU resources", MessageFormat::DeviceRuntime),
    // (Its advice after the OpenCL status: `reduce memory consumption ... to avoid
    // CL_OUT_OF_RESOURCES exception`.)
    ("CL_OUT_OF_RESOURCES exception", MessageFormat::DeviceRuntime),
    ("Could not create cudnn handle", MessageFormat::Cudnn),
    // PyTorch when no convolution algorithm's workspace fits (its usual cause), and TF's
    // cuBLAS that could get no memory beside TF's pool: OOMs in disguise.
    ("Unable to find a valid cuDNN algorithm to run convolution", MessageFormat::Cudnn),
    ("Blas GEMM launch failed", MessageFormat::Cublas),
    // (Its batched and matrix-vector kinds.)
    ("Blas xGEMMBatched launch failed", MessageFormat::Cublas),
    ("Blas GEMV launch failed", MessageFormat::Cublas),
    // PyTorch 2.0's allocator asking NVML, on its way to the out-of-memory report, and failing
    // (`NVML_SUCCESS == r INTERNAL ASSERT FAILED at ".../CUDACachingAllocator.cpp":830`): an
    // out-of-memory error whose report never printed.
    ("NVML_SUCCESS == r INTERNAL ASSERT FAILED", MessageFormat::CudaRuntime),
    // TF: a copy to the GPU whose destination could not be allocated.
    ("Dst tensor is not initialized", MessageFormat::CudaRuntime),
    // accelerate's find_executable_batch_size halved down to nothing.
    ("No executable batch size found, reached zero", MessageFormat::CudaRuntime),
    // NVIDIA's NPP (managedCuda's `NPPException: Device allocation error`); a miner's own
    // `CUDA: failed to alloc memory`.
    ("Device allocation error", MessageFormat::DeviceRuntime),
    ("CUDA: failed to alloc memory", MessageFormat::DeviceRuntime),
    // Intel's SYCL runtime (IPEX, PyTorch XPU): `PI_ERROR_OUT_OF_RESOURCES`, its usual OOM.
    ("PI_ERROR_OUT_OF_RESOURCES", MessageFormat::DeviceRuntime),
    ("could not create cuDNN handle", MessageFormat::Cudnn),
    // TF 2.x's error after cuDNN could not start (its handle needs memory TF's pool left no
    // room for); ONNX Runtime's failed handle, `expr=cudnnCreate(&cudnn_handle_)`.
    ("because cuDNN failed to initialize", MessageFormat::Cudnn),
    ("expr=cudnnCreate(", MessageFormat::Cudnn),
    // TensorFlow's autotuning finding no convolution algorithm that ran (`No algorithm
    // worked!`): most often none whose workspace fit.
    ("No algorithm worked", MessageFormat::Cudnn),
    // OpenGL's error (TF Lite's GL delegate: `[GL_OUT_OF_MEMORY]: There is not enough memory
    // left to execute the command.`).
    ("GL_OUT_OF_MEMORY", MessageFormat::DeviceRuntime),
    // ExLlamaV2's own load check, without figures.
    ("Insufficient VRAM for model and cache", MessageFormat::EngineCheck),
    // MXNet's cuBLAS handle that would not start (`Check failed: err == CUBLAS_STATUS_SUCCESS
    // (1 vs. 0) Create cublas handle failed`): an OOM in disguise, as TF's
    // `failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED` is.
    ("Create cublas handle failed", MessageFormat::Cublas),
    // MLC-LLM's: `Cannot estimate KV cache capacity. The model weight size W may be larger
    // than GPU memory size G`.
    ("Cannot estimate KV cache capacity", MessageFormat::EngineCheck),
    // A Jetson's nvmap, the allocator of the memory its GPU shares with the CPU, refusing with
    // ENOMEM (`NvMapMemAllocInternalTagged: 1075072515 error 12`): the device's memory on a
    // board where it is the system's.
    ("NvMapMemAllocInternalTagged", MessageFormat::DeviceRuntime),
    // SGLang's start-up check in other words (`Not enough memory. Please try to increase
    // --mem-fraction-static.`).
    ("Please try to increase --mem-fraction-static", MessageFormat::SglangKvCache),
    // SGLang's scheduler finding too few free KV-cache slots for a prefill (`Prefill out of
    // memory. Try to lower your batch size.` then `Try to allocate 8192 tokens.`).
    ("Prefill out of memory. Try to lower your batch size", MessageFormat::SglangKvCache),
    // CUDA.jl's frame of the same (`cudnnCreate at .../lib/cudnn/base.jl:9`), under its
    // `CUDNNError: CUDNN_STATUS_INTERNAL_ERROR (code 4)`.
    ("cudnnCreate at ", MessageFormat::Cudnn),
    // TensorFlow's cuFFT plan that could not get its work area from TF's allocator (`failed to
    // allocate work area.`, then this fatal line): an OOM in disguise, as cuDNN's handle is.
    ("failed to initialize batched cufft plan with customized allocator", MessageFormat::CudaRuntime),
    ("Failed to determine best cudnn convolution algorithm", MessageFormat::Cudnn),
    ("CUDA error: out of memory", MessageFormat::CudaRuntime),
    ("cudaErrorMemoryAllocation", MessageFormat::CudaRuntime),
    ("CUDA_ERROR_OUT_OF_MEMORY", MessageFormat::CudaRuntime),
    ("Cuda failure 'out of memory'", MessageFormat::CudaRuntime),
    // Lua Torch's and PyTorch 0.x's THC: `THCudaCheck FAIL file=... line=58 error=2 : out of memory`.
    ("error=2 : out of memory", MessageFormat::CudaRuntime),
    // NCCL 2.10+ prints the CUDA error's code too: `Cuda failure 2 'out of memory'`.
    ("Cuda failure 2 'out of memory'", MessageFormat::CudaRuntime),
    ("cuda runtime error (2) : out of memory", MessageFormat::CudaRuntime),
    ("BufferAssignment OOM Debugging", MessageFormat::XlaRuntime),
    // XLA's rematerialization could not bring the program under the memory it may have:
    // `Can't reduce memory use below 67.69GiB (72678595712 bytes) by rematerialization; only
    // reduced to 95.40GiB (102432320060 bytes)`: what the program needs, and that memory.
    ("by rematerialization; only reduced to", MessageFormat::XlaRuntime),
    ("BufferAssignment stats:", MessageFormat::XlaRuntime),
    ("Peak buffers:", MessageFormat::XlaRuntime),
    ("Entry Parameter Subshape:", MessageFormat::XlaRuntime),
    ("Total hbm usage >=", MessageFormat::XlaHbm),
    ("Largest program allocations in hbm", MessageFormat::XlaHbm),
    ("Aborting compilation early because it's unlikely to have enough memory", MessageFormat::XlaHbm),
    ("Out of memory error on GPU", MessageFormat::Paddle),
    ("Failed to allocate memory for requested buffer of size", MessageFormat::OnnxArena),
    // The same, its sentence cut: `bfc_arena.cc:376 void* onnxruntime::BFCArena::
    // AllocateRawInternal(...) Failed to alloc`.
    ("BFCArena::AllocateRawInternal", MessageFormat::OnnxArena),
    // thrust's device allocator (`thrust::system::detail::bad_alloc`, its `what()` saying
    // `std::bad_alloc: out of memory`): the GPU's, where a bare std::bad_alloc is the host's.
    ("thrust::system::detail::bad_alloc", MessageFormat::CudaRuntime),
    // MLC LLM (TVM): `Insufficient GPU memory error: The available single GPU memory is N MB,
    // which is less than the sum of model weight size (W MB) and temporary buffer size (T MB).`
    ("Insufficient GPU memory error", MessageFormat::DeviceRuntime),
    // mshadow's `CUDA: out of memory` machine-translated into Chinese.
    ("CUDA:没有记忆", MessageFormat::CudaRuntime),
    // PaddlePaddle's old preallocating allocator: `Cannot malloc 2048.000000 MB GPU memory.
    // Please shrink FLAGS_fraction_of_gpu_memory_to_use ...`.
    ("GPU memory. Please shrink FLAGS_fraction_of_gpu_memory_to_use", MessageFormat::DeviceRuntime),
    // llama.cpp's SYCL backend: `can't allocate N Bytes of memory on device`. (Its KV cache's
    // `failed to allocate buffer for kv cache` is no marker: the buffer that failed before it
    // says whose memory it was, the device's or the host's.)
    ("Bytes of memory on device", MessageFormat::DeviceRuntime),
    // SGLang's prefill; DeepSpeed's inference kernels' workspace; bitsandbytes' kernels.
    ("Prefill out of memory", MessageFormat::DeviceRuntime),
    // Ollama when its runner died loading a model: `llama runner exited, you may not have
    // enough available memory to run this model`.
    ("you may not have enough available memory to run this model", MessageFormat::DeviceRuntime),
    // llama.cpp loading a model whose buffers the backend could not allocate.
    ("unable to allocate backend buffer", MessageFormat::DeviceRuntime),
    // RAPIDS RMM's device pool (its exception is a `std::bad_alloc`, but of the device's pool).
    ("Maximum pool size exceeded", MessageFormat::DeviceRuntime),
    // RMM's device memory resource: `MemoryError: std::bad_alloc: CUDA error at: .../rmm/mr/...`
    // (its pinned host resource's path is a look-alike's).
    ("std::bad_alloc: CUDA error at", MessageFormat::CudaRuntime),
    // RMM 22+: its own out-of-memory exception (`MemoryError: std::bad_alloc: out_of_memory:
    // CUDA error at: .../rmm/mr/device/cuda_memory_resource.hpp`).
    ("out_of_memory: CUDA error at", MessageFormat::CudaRuntime),
    // Stable Diffusion web UI's own check before its split attention: `Not enough memory, use
    // lower resolution (max approx. 640x640). Need: 1.5GB free, Have:0.1GB free`.
    ("Not enough memory, use lower resolution", MessageFormat::DeviceRuntime),
    // TensorRT 7's builder: `GPU memory allocation error during getBestTactic` (a failure only
    // where no implementation was then found).
    ("memory allocation error during getBestTactic", MessageFormat::CudaRuntime),
    // Text Generation Inference's warm-up; exllamav2's cache; cuTENSOR; CatBoost's GPU pool;
    // Intel Gaudi's device memory; a TPU's allocation beyond its memory.
    ("Not enough memory to handle", MessageFormat::DeviceRuntime),
    ("Insufficient space in device allocation", MessageFormat::DeviceRuntime),
    ("CUTENSOR_STATUS_ALLOC_FAILED", MessageFormat::CudaRuntime),
    ("have enough memory for defragmentation", MessageFormat::DeviceRuntime),
    ("PT_DEVMEM Allocation failed", MessageFormat::DeviceRuntime),
    ("would exceed memory (size=", MessageFormat::DeviceRuntime),
    ("exceeding available bytes", MessageFormat::DeviceRuntime),
    // TensorRT's builder: a plugin's workspace past the workspace pool's limit (`plugin node
    // ... requires 56405524864 bytes of scratch space, but only 47590277120 is available`).
    ("bytes of scratch space, but only", MessageFormat::DeviceRuntime),
    // PaddlePaddle's allocator failing, its message cut away: the exception's type, or the
    // allocator's frames in its C++ traceback.
    ("paddle::memory::allocation::BadAlloc", MessageFormat::DeviceRuntime),
    ("paddle::memory::allocation::CUDAAllocator::AllocateImpl", MessageFormat::DeviceRuntime),
    ("paddle::memory::allocation::StatAllocator::AllocateImpl", MessageFormat::DeviceRuntime),
    // IPython's traceback header, TensorFlow's error glued to it, the message cut away.
    ("ResourceExhaustedErrorTraceback", MessageFormat::DeviceRuntime),
    // Huawei Ascend (CANN): `Memory_Allocation_Failure(EL0004): Failed to allocate memory
    // requested by GE module.`, `Call rtMalloc fail, purpose: ..., size:N, device_id:0`.
    ("Memory_Allocation_Failure(EL0004)", MessageFormat::DeviceRuntime),
    ("Call rtMalloc fail", MessageFormat::DeviceRuntime),
    ("aclrtMalloc failed", MessageFormat::DeviceRuntime),
    // AMD's MIOpen and rocBLAS; NCCL's own buffers.
    ("miopenStatusAllocFailed", MessageFormat::Cudnn),
    ("rocblas_status_memory_error", MessageFormat::Cublas),
    ("Failed to CUDA malloc", MessageFormat::CudaRuntime),
    // OpenCL's failed buffer allocation as PyOpenCL and Boost.Compute (LightGBM) word it.
    ("mem object allocation failure", MessageFormat::DeviceRuntime),
    ("Memory Object Allocation Failure", MessageFormat::DeviceRuntime),
    // MindSpore: `Malloc for kernel output failed, Memory isn't enough, node: ...`.
    ("Malloc for kernel ", MessageFormat::DeviceRuntime),
    // SGLang at start-up: `Not enough memory. Please try to increase --mem-fraction-static.`
    ("Please try to increase --mem-fraction-static", MessageFormat::DeviceRuntime),
    // ggml's CUDA pool, the line after its `CUDA error: out of memory` (a paste may start there).
    ("in function ggml_cuda_pool_malloc", MessageFormat::CudaRuntime),
    ("Workspace can't be allocated, no enough memory", MessageFormat::DeviceRuntime),
    ("Error out of memory at line", MessageFormat::CudaRuntime),
    // OpenVINO's GPU plugin: `[GPU] Exceeded max size of memory allocation: Required N bytes,
    // already occupied : M bytes, but available memory size is A bytes`.
    ("Exceeded max size of memory allocation", MessageFormat::DeviceRuntime),
    // DirectML under ONNX Runtime: HRESULT E_OUTOFMEMORY.
    ("8007000E Not enough memory resources", MessageFormat::DeviceRuntime),
    // MLX on Apple silicon: `[malloc_or_wait] Unable to allocate N bytes.`
    ("[malloc_or_wait] Unable to allocate", MessageFormat::DeviceRuntime),
    ("cudaMalloc failed: out of memory", MessageFormat::CudaRuntime),
    ("Allocation on device", MessageFormat::TorchAsync),
    // Its figures without that line (a paste that kept only the block): read from its
    // `Requested` line, above.
    ("Free (according to CUDA)", MessageFormat::TorchAsync),
    // A glog check on a CUDA or HIP call's status, 2 its out-of-memory status (TensorFlow's
    // launch config: `Check failed: err == cudaSuccess (2 vs. 0)`).
    ("cudaSuccess (2 vs. 0)", MessageFormat::CudaRuntime),
    ("hipSuccess (2 vs. 0)", MessageFormat::CudaRuntime),
    // CuPy (its error is `cupy...OutOfMemoryError` too: read before PyTorch's word)
    // CuPy's memory pool: `Out of memory allocating 25,600,000 bytes (allocated so far:
    // 3,635,267,072 bytes).`
    ("bytes (allocated so far:", MessageFormat::CudaRuntime),
    // CuPy 5 and before: `out of memory to allocate 163840000 bytes (total 1673061376 bytes)`.
    ("out of memory to allocate ", MessageFormat::CudaRuntime),
    ("OutOfMemoryError", MessageFormat::TorchCapacity),
    // Theano's libgpuarray.
    ("device memory (out of memory)", MessageFormat::DeviceRuntime),
    ("failed to allocate memory", MessageFormat::TfTensor),
    ("ran out of memory when allocating", MessageFormat::TfTensor),
    ("larger than the available KV cache memory", MessageFormat::VllmKvCache),
    // vLLM 0.4 to 0.6: the same check in tokens.
    ("larger than the maximum number of tokens that can be stored in KV cache", MessageFormat::VllmKvCache),
    // vLLM 0.6 to 0.8's profile at start-up, when nothing is left for the KV cache.
    ("the rest of the memory reserved for KV Cache is -", MessageFormat::VllmKvCache),
    // vLLM's check that its profile left some memory for KV cache blocks (from 0.2 on; also
    // seen in the `raise` line of a traceback cut before the error's own line).
    ("No available memory for the cache blocks", MessageFormat::VllmKvCache),
    // SGLang's own check: `Loaded weights leave no GPU memory for the KV cache under
    // --mem-fraction-static=0.88`.
    ("leave no GPU memory for the KV cache", MessageFormat::SglangKvCache),
    // vLLM 0.8+: nothing left for one token; and its check at start-up that the GPU has the
    // memory gpu_memory_utilization asks for.
    ("not enough GPU memory available to serve even a single token", MessageFormat::VllmKvCache),
    ("on startup is less than desired GPU memory utilization", MessageFormat::VllmKvCache),
    ("Ran out of GPU memory when allocating", MessageFormat::TfTensor),
    ("enforce allocating <= available failed", MessageFormat::Paddle),
    // (Its buddy allocator's first chunk: `enforce allocating < available failed, N >= M`.)
    ("enforce allocating < available failed", MessageFormat::Paddle),
    ("Requested amount of GPU memory (", MessageFormat::CudaRuntime),
    // TensorRT 7's words.
    ("Requested amount of memory (", MessageFormat::CudaRuntime),
    // TensorRT and others print the CUDA error's code and name: 2 is cudaErrorMemoryAllocation.
    ("2 (out of memory)", MessageFormat::CudaRuntime),
    ("Cuda Runtime (out of memory)", MessageFormat::CudaRuntime),
    // Accelerator runtimes' own allocators.
    ("is more than total mem size", MessageFormat::DeviceRuntime),
    ("Not enough space to allocate", MessageFormat::DeviceRuntime),
    ("bm_alloc_gmem failed", MessageFormat::DeviceRuntime),
    // MXNet 0.x's GPU pool: `src/storage/./pooled_storage_manager.h:62: Memory allocation failed.`
    ("pooled_storage_manager.h:62: Memory allocation failed", MessageFormat::CudaRuntime),
    // MXNet 1.x's pool: `Memory allocation failed ` and cudaGetErrorString's words.
    ("Memory allocation failed out of memory", MessageFormat::CudaRuntime),
    // XLA's listing of a program's largest buffers, pasted without its header (`Largest
    // program allocations in hbm:`): each buffer's `Allocation type: scoped` / `HLO temp`.
    ("Allocation type: ", MessageFormat::XlaHbm),
    // MatConvNet: `getWorkspace [out of memory error]`.
    ("[out of memory error]", MessageFormat::DeviceRuntime),
    // Vulkan (ggml's backend, vulkan-hpp, vulkano) and DirectML.
    ("Device memory allocation of size", MessageFormat::DeviceRuntime),
    ("ErrorOutOfDeviceMemory", MessageFormat::DeviceRuntime),
    ("VK_ERROR_OUT_OF_DEVICE_MEMORY", MessageFormat::DeviceRuntime),
    ("OomError(OutOfDeviceMemory)", MessageFormat::DeviceRuntime),
    // DirectML: `Could not allocate tensor with 9831040 bytes. There is not enough GPU video
    // memory available!` (the first sentence first: a paste may break the line between them).
    ("Could not allocate tensor with ", MessageFormat::DeviceRuntime),
    ("not enough GPU video memory available", MessageFormat::DeviceRuntime),
    // ncnn's Vulkan: -2 is VK_ERROR_OUT_OF_DEVICE_MEMORY.
    ("vkAllocateMemory failed -2", MessageFormat::DeviceRuntime),
    // Metal (Apple GPUs), Intel's Level Zero and unified runtime, OpenCL.
    ("kIOGPUCommandBufferCallbackErrorOutOfMemory", MessageFormat::DeviceRuntime),
    ("UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", MessageFormat::DeviceRuntime),
    ("ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", MessageFormat::DeviceRuntime),
    ("CL_MEM_OBJECT_ALLOCATION_FAILURE", MessageFormat::DeviceRuntime),
    // HIP's name for CUDA's cudaErrorMemoryAllocation.
    ("hipErrorOutOfMemory", MessageFormat::CudaRuntime),
    // The CUDA driver API's result 2 (CUDA_ERROR_OUT_OF_MEMORY) as a library prints it.
    ("CUresult error  result=2 ", MessageFormat::CudaRuntime),
    ("CUresult error result=2 ", MessageFormat::CudaRuntime),
    // PyTorch's old form with its head cut off (`Tried to allocate 7.93 GiB (GPU 2; 22.38 GiB
    // total capacity; ...)`).
    ("total capacity;", MessageFormat::TorchCapacity),
    // TensorFlow's hint, which it adds to an out-of-memory error only, pasted without the
    // error's own line: an OOM without figures.
    ("add report_tensor_allocations_upon_oom to RunOptions", MessageFormat::TfTensor),
    // The tail of PyTorch's message alone, its head lost (`ERROR : ` then `If reserved memory
    // is >> allocated memory try setting max_split_size_mb ...`): its advice is printed with
    // the out-of-memory error only.
    ("try setting max_split_size_mb to avoid fragmentation", MessageFormat::TorchMaxSplitHint),
];

/// A line that says a CUDA allocation ran out of memory in no words above (an engine's own
/// log: `CUDA q8 cache alloc failed (64.00 MiB): out of memory`), read when nothing else is.
/// `before`: the two lines above it, which may name CUDA for it (a C++ exception's `what():`
/// with its source file, then `error: out of memory`).
fn cuda_out_of_memory(line: &str, before: &str) -> bool {
    let cuda = |s: &str| s.contains("CUDA") || s.contains("cuda");
    let named = |s: &str| s.to_ascii_lowercase().contains("cuda");
    line.contains("out of memory")
        && (cuda(line) || ((named(before) || named(line)) && line.contains("error: out of memory")))
        && (line.contains("failed") || line.contains("rror"))
        && !line.trim_start().starts_with("If ")
        && !PINNED.iter().any(|p| line.contains(p))
}

/// PyTorch 2.9+'s warning, logged when one cudaMalloc fails; PyTorch then frees its cache and
/// tries again, and raises its error only if that fails too.
const TORCH_OOM_WARNING: &str = "memory allocation failed with OOM on device";

/// Words on a line that make a CUDA allocation failure the host's: pinned (page-locked) host
/// memory, not the device's.
/// (PaddlePaddle's `pinned_allocator.cc`; PyCUDA's `aligned_malloc`, an aligned host buffer.)
const PINNED: &[&str] = &[
    " on host",
    "pinned host",
    "pinned memory",
    "cudaHostAlloc",
    "cuMemHostAlloc",
    "host_malloc",
    "cudaHostRegister",
    "pinned_allocator",
    "aligned_malloc",
    // RMM's and OpenCV's pinned host memory; NCCL's `Failed to CUDA host alloc`.
    "pinned_memory_resource",
    "cuda_host_mem",
    "host alloc",
];

/// The words of every marker (messages' and look-alikes'), in their case.
pub(super) fn phrases() -> impl Iterator<Item = &'static str> {
    MARKERS.iter().map(|m| m.0).chain(LOOK_ALIKES.iter().map(|l| l.0))
}

/// True when the text holds a message this module reads.
pub fn recognises(text: &str) -> bool {
    find(text).is_some()
}

/// The message to read: the first PyTorch message with its request (a paste may repeat a
/// message, or start with a cut one), else the first marker of the most telling kind.
fn find(text: &str) -> Option<Found> {
    let mut best: Option<(usize, Found)> = None;
    // Only the markers whose longest word is in the text can match, on a line or wrapped
    // onto the next (a 50 MB paste of short lines took minutes when every marker was sought on
    // every line).
    let candidates: Vec<(usize, &(&str, MessageFormat))> =
        MARKERS.iter().enumerate().filter(|(_, (marker, _))| text.contains(longest_word(marker))).collect();
    if candidates.is_empty() && !text.contains("Buffer ") {
        let lower = text.to_ascii_lowercase();
        let generic_words = |l: &str| any_of(l, RAN_OUT) || ran_out_of_some(l) || allocation_failed(l) || oom_word(l);
        let last_line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        if !generic_words(&lower) && !cut_in_oom_words(text) && !device_then_cut_words(last_line) {
            return None;
        }
    }
    let lines: Vec<&str> = text.lines().collect();
    // PaddlePaddle 1.x's legacy allocator (`Cannot allocate 382.812500MB in GPU 0, available
    // 177.562500MB`, its pool's figures on the lines after) says more than its system
    // allocator's line above it (`Cannot malloc 382.813 MB GPU memory. Please shrink ...`).
    if text.contains(" in GPU ")
        && let Some((line, at)) = lines.iter().enumerate().find_map(|(i, l)| paddle_legacy(l).map(|at| (i, at)))
    {
        return Some(Found { format: MessageFormat::Paddle, line, at });
    }
    // Where each line starts in the text, to put a word found in the text on its line.
    let starts = line_starts(text, &lines);
    let line_of = |offset: usize| line_at(&starts, offset);
    // The markers in their order, most telling first: the first that matches anywhere names
    // the message, at the first line it matches on. Each is tried only on the lines that hold
    // its longest word, and the line above each (where a wrap may have started it).
    'markers: for &(rank, &(marker, format)) in &candidates {
        let mut next = 0;
        for (offset, _) in text.match_indices(longest_word(marker)) {
            let on = line_of(offset);
            for line in on.saturating_sub(1).max(next)..=on {
                if let Some(at) = marker_at(&lines, line, marker, format) {
                    best = Some((rank, Found { format, line, at }));
                    break 'markers;
                }
            }
            next = on + 1;
        }
    }
    // Without a marker: the first line that says a CUDA allocation failed in other words, is
    // cut inside one, or starts a listing of XLA's buffers.
    for (line, l) in lines.iter().enumerate() {
        if best.is_some() {
            break;
        }
        // (Also with the line above run into it: a terminal's break inside a word, `cudaMalloc
        // fail` / `ed: out of memory`, that a prefix on every line kept the repair from joining.)
        let in_other_words = l.contains("out of memory")
            && (cuda_out_of_memory(l, &lines[line.saturating_sub(2)..line].join(" "))
                || line > 0
                    && lines[line - 1].trim_end().ends_with(|c: char| c.is_ascii_alphanumeric())
                    && l.trim_start().starts_with(|c: char| c.is_ascii_lowercase())
                    && cuda_out_of_memory(&format!("{}{}", lines[line - 1].trim_end(), l.trim_start()), ""));
        // The paste's last line cut inside `cudaMalloc failed` (MXNet's pool: `cudaMalloc fai`):
        // a failed cudaMalloc is the device's memory refused.
        let cut =
            || l.contains("cudaMalloc ") && lines[line + 1..].iter().all(|n| n.trim().is_empty()) && cut_cuda_malloc(l);
        if in_other_words || cut() {
            best = Some((MARKERS.len() + 1, Found { format: MessageFormat::CudaRuntime, line, at: 0 }));
        }
        // DirectML's own buffer allocator failing, in words a paste may have garbled (`8007000E
        // Not enough memory resources are available`, as `800 7000E to enough memory resources`);
        // DeepSpeed's inference workspace, its three lines before `Workspace can't be allocated`
        // (which a paste may have cut): `Requested: N`, `Free: N`, `Total: N`.
        else if l.contains("BucketizedBufferAllocator") && contains_ignoring_case(l, "memory")
            || deepspeed_workspace(&lines, line).is_some()
        {
            best = Some((MARKERS.len() + 1, Found { format: MessageFormat::DeviceRuntime, line, at: 0 }));
        }
        // A paste of XLA's buffer list alone (`Buffer 13:` with its `Size:` line).
        else if is_buffer_head(l) && lines.get(line + 1).is_some_and(|n| field(n, "Size:").is_some()) {
            best = Some((MARKERS.len(), Found { format: MessageFormat::XlaRuntime, line, at: 0 }));
        }
    }
    // PyTorch's warning alone is not the failure: it may have recovered.
    let warning_only = best.is_some_and(|(_, f)| lines[f.line].contains(TORCH_OOM_WARNING))
        && !text.contains("out of memory. Tried to allocate")
        && !text.contains("OutOfMemoryError");
    // (A CUDA error in no look-alike's words yields to a line that says memory ran out.)
    // A line in other words yields to a look-alike on it or above it (a warning above it
    // excepted: the failure came after); one below it came after the failure.
    if best.is_none() {
        return generic(&lines)
            .filter(|g| {
                not_an_oom(text).is_none_or(|l| {
                    l.what == CUDA_OTHER_ERROR
                        || l.line > g.line + 1
                        || l.line < g.line + 1 && NOT_A_FAILURE.iter().any(|w| l.what.contains(w))
                })
            })
            .map(|g| {
                if kv_cache_check(&lines, g.line).is_some() {
                    Found { format: MessageFormat::KvCacheCheck, ..g }
                } else if engine_check(&lines, g.line).is_some() {
                    Found { format: MessageFormat::EngineCheck, ..g }
                } else {
                    g
                }
            });
    }
    best.filter(|_| !warning_only).map(|(_, f)| f).map(|f| {
        if f.format == MessageFormat::DeviceRuntime && engine_check(&lines, f.line).is_some() {
            Found { format: MessageFormat::EngineCheck, ..f }
        } else if f.format == MessageFormat::DeviceRuntime && tgi_warmup(lines[f.line]).is_some() {
            Found { format: MessageFormat::TgiWarmup, ..f }
        } else if f.format == MessageFormat::TorchAsync && !lines[f.line].contains("Allocation on device") {
            // (The block's first figure is its request, a line or two above `Free`.)
            let line = (f.line.saturating_sub(3)..f.line)
                .find(|&i| lines[i].trim_start().starts_with("Requested"))
                .unwrap_or(f.line);
            Found { line, at: 0, ..f }
        } else {
            f
        }
    })
}

/// Where `marker` starts on line `line` (or runs from it onto the next, wrapped), unless the
/// line says it is not the device's memory.
fn marker_at(lines: &[&str], line: usize, marker: &str, format: MessageFormat) -> Option<usize> {
    let l = lines[line];
    // A marker the paste wrapped onto the next line still starts on this one.
    let joined = || format!("{} {}", l.trim_end(), lines.get(line + 1).map_or("", |n| n.trim_start()));
    let at = l.find(marker).or_else(|| joined().find(marker).filter(|&i| i < l.trim_end().len()))?;
    // Pinned host memory is the host's, not the device's; so is Intel MKL's allocator's. An
    // allocation the device refused with a status that is not memory's (Kokkos: `... returned
    // the error code "cudaErrorNotSupported"`) is that status.
    if format == MessageFormat::CudaRuntime && PINNED.iter().any(|p| l.contains(p))
        || l.contains("mkl_malloc")
        || other_status(l).is_some()
    {
        return None;
    }
    // Java's heap is the host's; so is OpenCV's allocator (`(-4:Insufficient memory) Failed to
    // allocate N bytes in function 'cv::OutOfMemoryError'`). Ray's OutOfMemoryError is its own
    // killer's, for the node's RAM.
    if marker == "OutOfMemoryError"
        && (l.contains("java.lang.OutOfMemoryError")
            || l.contains("Insufficient memory)")
            || l.contains("ray.exceptions.OutOfMemoryError"))
    {
        return None;
    }
    // Pinned host memory named just above (`ggml_vulkan: Failed to allocate pinned memory.` then
    // the driver's `ErrorOutOfDeviceMemory` for that host-visible buffer, which a wrap may have
    // put a line lower), or just below (NCCL's `Failed to CUDA host alloc`). (Not below a line
    // that names its own call: OpenCV's `out of memory in function 'setDevice'` is the device's,
    // whatever failed after it.)
    let names_its_call = l.contains("in function '");
    if matches!(format, MessageFormat::CudaRuntime | MessageFormat::DeviceRuntime)
        && (lines[line.saturating_sub(2)..line]
            .iter()
            .any(|above| ["pinned memory", "pinned host"].iter().any(|p| above.contains(p)))
            || !names_its_call && lines.get(line + 1).is_some_and(|below| PINNED.iter().any(|p| below.contains(p))))
    {
        return None;
    }
    // nvmap's refusals other than ENOMEM (12) are not memory's.
    if marker == "NvMapMemAllocInternalTagged" && !joined().contains("error 12") {
        return None;
    }
    // A TPU's on-chip scratch memories (vmem, smem) are a kernel's limit, not the device's.
    if marker == "Ran out of memory in memory space" && !joined().contains("memory space hbm") {
        return None;
    }
    // XLA's words only where it says what it attempted; RMM's only with its name.
    if marker.contains("That was not possible") && !l.contains("Attempting to") {
        return None;
    }
    if marker == "Maximum pool size exceeded" && !["rmm", "RMM", "memory_resource"].iter().any(|w| l.contains(w)) {
        return None;
    }
    // llama.cpp's backend buffer after its CPU backend failed is the host's.
    if marker == "unable to allocate backend buffer"
        && lines[line.saturating_sub(3)..line].iter().any(|a| a.contains("cpu_buffer_type") || a.contains("CPU buffer"))
    {
        return None;
    }
    Some(at)
}

/// `... cudaMalloc fai`: a line that ends inside `cudaMalloc failed`, its words cut.
fn cut_cuda_malloc(l: &str) -> bool {
    let t = line_end(l);
    t.rfind("cudaMalloc ").is_some_and(|i| {
        let rest = &t[i + "cudaMalloc ".len()..];
        rest.len() >= 2 && ("failed".starts_with(rest) || rest == "failed:")
    })
}

/// A marker's longest run without whitespace: any match of the marker, within a line or
/// across a line break, holds it whole.
fn longest_word(marker: &str) -> &str {
    marker.split_whitespace().max_by_key(|w| w.len()).unwrap_or(marker)
}

/// `Buffer 13:`, after any log prefix.
fn is_buffer_head(l: &str) -> bool {
    let t = l.trim_end();
    let Some(i) = t.rfind("Buffer ") else { return false };
    let n = &t[i + 7..];
    n.strip_suffix(':').is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        && (i == 0 || t[..i].ends_with([' ', '\t', ']']))
}

/// A text that looks like an out-of-memory error but is another failure: what it is, in
/// words for the user, and the line (1-based) where it says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookAlike {
    pub line: usize,
    pub what: &'static str,
}

/// What a device-side assert is, whichever words show it.
const DEVICE_ASSERT: &str = "a device-side assert: a kernel's check failed, most often an index out of range (a \
     class label >= the number of classes, a token id >= the vocabulary size). Rerun with CUDA_LAUNCH_BLOCKING=1, \
     or on the CPU, to see the failing check";

pub(crate) const NO_KERNEL_IMAGE: &str =
    "a build without kernels for this GPU's architecture: install a build of the framework compiled for this GPU";
const ILLEGAL_ACCESS: &str = "an illegal memory access: a kernel read or wrote memory it does not own (an index \
     out of range or a bug in a kernel), not a lack of memory. Rerun with CUDA_LAUNCH_BLOCKING=1 to see which op it \
     was";

const CUDNN_INTERNAL: &str = "cuDNN reporting an internal error (a cuDNN or driver mismatch, an unsupported input, or \
     an earlier error surfacing here), not an allocation it names. Rerun with CUDA_LAUNCH_BLOCKING=1 to find the op";

const CUDNN_EXECUTION: &str = "a cuDNN kernel that failed while running (a bad input, a driver or hardware fault, or \
     an earlier error surfacing here), not an allocation. Rerun with CUDA_LAUNCH_BLOCKING=1 to find the op";

/// The driver or device not usable, whichever words show it.
const CUDA_SETUP: &str = "the CUDA driver or device not usable by this process (no GPU visible, a driver that failed \
     to start or is in a bad state after a suspend or an update, CUDA_VISIBLE_DEVICES set wrong): a setup problem, not \
     device memory. nvidia-smi shows whether the driver sees the GPU";

/// Vulkan's device lost.
const DEVICE_LOST: &str = "the GPU lost to the program (Vulkan's VK_ERROR_DEVICE_LOST): the driver reset it after a \
     fault or a submission that ran too long for its watchdog, not an allocation. Smaller work per submission, an \
     updated driver";

/// A notebook's kernel that died without an error of its own.
const NOTEBOOK_DIED: &str = "a notebook's kernel that died without an error of its own: a process killed, most often \
     by the system's OOM killer for host memory (RAM); the GPU's memory running out raises an error in the cell \
     instead. Watch the RAM while the cell runs (free -h, the system's log for `Killed process`), and load less \
     into RAM at once";

/// MATLAB running out of the host's memory.
const MATLAB_HOST: &str = "MATLAB running out of host memory (RAM) for an array: the GPU's memory is not involved \
     (MATLAB's GPU says `Out of memory on device`)";

/// A runtime's own error for host memory (Intel's, Vulkan's).
const RUNTIME_HOST_MEMORY: &str =
    "the runtime running out of host memory (RAM), not the device's: the GPU's memory is not involved";

/// TensorRT's builder skipping a tactic: `... due to insufficient memory on requested size
/// of N detected for tactic T` (TensorRT 8 spells it `insuficient`).
const TRT_TACTIC_SKIPPED: &str = "memory on requested size";

/// Failures users take for OOMs, and what they are. Checked only when no OOM is found.
const LOOK_ALIKES: &[(&str, &str)] = &[
    ("illegal memory access", ILLEGAL_ACCESS),
    ("device-side assert triggered", DEVICE_ASSERT),
    (
        "misaligned address",
        "a misaligned address: a kernel accessed memory at an address its data type does not allow (a bug in a \
         kernel or a view), not a lack of memory",
    ),
    (
        "too many resources requested for launch",
        "a kernel launch that asked for more registers or shared memory per block than the GPU has: a kernel \
         configuration problem, not device memory",
    ),
    (
        "LaunchOutOfResources",
        "a kernel launch that asked for more registers or shared memory per block than the GPU has: a kernel \
         configuration problem, not device memory",
    ),
    (
        // (`unspecified launch fail` alone: thrust's `what():` cut or run into other words.)
        "unspecified launch fail",
        "an unspecified launch failure: a kernel crashed (often an out-of-range access, sometimes a hardware or \
         driver fault), not a lack of memory",
    ),
    (
        // (Also as some builds word it: `... for execution this device`.)
        "no kernel image is available",
        NO_KERNEL_IMAGE,
    ),
    (
        "driver version is insufficient",
        "a CUDA driver older than the CUDA runtime the framework was built with: update the driver or install a \
         build for this driver",
    ),
    (
        "driver on your system is too old",
        "a CUDA driver older than the CUDA runtime the framework was built with: update the driver or install a \
         build for this driver",
    ),
    (
        "DefaultCPUAllocator",
        "host memory (RAM) running out, in PyTorch's CPU allocator: the GPU's memory is not involved",
    ),
    (
        "exceeds 10% of",
        "TensorFlow's warning about a large allocation in host memory (RAM): not the GPU's memory, and not an \
         error by itself",
    ),
    ("_ArrayMemoryError", "host memory (RAM) running out, in NumPy: the GPU's memory is not involved"),
    (
        // PyTorch's CPU allocator before 1.2: `enforce fail at CPUAllocator.cpp:56]
        // posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0` (12 is ENOMEM).
        "posix_memalign",
        "host memory (RAM) running out: posix_memalign is the C library's allocator of host memory (PyTorch's \
         CPU allocator calls it; status 12 is ENOMEM): the GPU's memory is not involved",
    ),
    (
        "(-4:Insufficient memory)",
        "OpenCV's allocator running out of host memory (RAM; its CUDA module's errors say `Gpu API call`): the \
         GPU's memory is not involved. Fewer or smaller images held in RAM at once",
    ),
    (
        // Ollama's scheduler: `model requires more system memory (69.0 GiB) than is available (65.6 GiB)`.
        "requires more system memory",
        "the model needing more host memory (RAM) than is free, as Ollama checks before loading it: the GPU's \
         memory is not involved. Free RAM, a smaller model or quantization, or offload more of it to the GPU",
    ),
    (
        // The kernel's report of the process it killed, and its reaper: `Killed process 935
        // (python) total-vm:113656kB, anon-rss:...`, `oom_reaper: reaped process 935`.
        "oom_reaper:",
        "the Linux OOM killer ending a process for host memory (RAM): the GPU's memory is not involved",
    ),
    ("total-vm:", "the Linux OOM killer ending a process for host memory (RAM): the GPU's memory is not involved"),
    (
        "aligned_malloc failed",
        "PyCUDA failing to allocate an aligned buffer in host memory (RAM): the GPU's memory is not involved",
    ),
    (
        "pinned_allocator",
        "PaddlePaddle's pinned host allocator failing (page-locked RAM for transfers): host memory, not the \
         GPU's. Pin less at once (a smaller pinned buffer, fewer DataLoader workers using pinned memory)",
    ),
    (
        // vLLM on the CPU: `Available memory on node 0 (12.50/62.70 GiB) on kv cache allocation
        // is less than requested memory for kv (...). Reduce CPU memory used by other processes.`
        "Reduce CPU memory used by other processes",
        "vLLM's CPU backend finding too little host memory (RAM) for its KV cache: the GPU's memory is not \
         involved. A smaller VLLM_CPU_KVCACHE_SPACE, or free RAM",
    ),
    ("MemoryError", "host memory (RAM) running out, in Python: the GPU's memory is not involved"),
    (
        "Out of memory allocating ",
        "XLA's CPU backend running out of host memory (RAM): the GPU's memory is not involved (is JAX running on \
         the CPU because it found no GPU?)",
    ),
    (
        "pinned host memory",
        "pinned host memory (page-locked RAM for transfers) that could not be allocated: host memory, not the \
         GPU's. Lower the size of what is pinned (data loader pin_memory, prefetch buffers)",
    ),
    (
        // MXNet's CPU storage: `cpu_device_storage.h:75: Failed to allocate CPU Memory`.
        "Failed to allocate CPU Memory",
        "MXNet failing to allocate host memory (RAM) for a CPU array: the GPU's memory is not involved",
    ),
    (
        // TF Lite's GPU delegate given more data than its buffer holds.
        "Source data is larger than buffer",
        "TF Lite's GPU delegate given more data than the buffer it made for an input (a shape or type that \
         does not match the model's), not a lack of memory",
    ),
    (
        // TensorFlow's BFC allocator's own consistency check, aborting.
        "Check failed: c->in_use()",
        "TensorFlow's allocator failing its own consistency check (a chunk freed twice, or memory written out of \
         bounds: a bug in TensorFlow or a custom op), not a lack of memory",
    ),
    (
        // ggml's page-locked host buffer (`unable to allocate CUDA_Host buffer`).
        "CUDA_Host buffer",
        "llama.cpp's pinned host buffer (CUDA_Host: page-locked RAM for the layers kept on the CPU and for \
         transfers) that could not be allocated: host memory, not the GPU's. Free RAM, offload more layers to the \
         GPU, or turn pinned memory off (GGML_CUDA_NO_PINNED=1)",
    ),
    (
        // Kokkos's host memory space: `Kokkos::HostSpace::allocate[ INTEL_MM_ALLOC ]( N ) FAILED`.
        "HostSpace::allocate",
        "Kokkos allocating in its host memory space (RAM), which failed: the GPU's memory is not involved (a \
         size of nearly 2^64 bytes is a negative size wrapped: an array's extent computed wrong)",
    ),
    (
        // A CUDA call this device or its mode does not support (MIG, a driver without the
        // feature), whatever it was asked to do: `cudaMalloc` returning `cudaErrorNotSupported`.
        "cudaErrorNotSupported",
        "a CUDA call this device or setup does not support (cudaErrorNotSupported: MIG slices, a driver or \
         container without the feature, a virtual GPU), not a lack of memory",
    ),
    (
        "bytes on host",
        "pinned host memory (page-locked RAM for transfers) that could not be allocated: host memory, not the \
         GPU's. Lower the size of what is pinned (data loader pin_memory, prefetch buffers)",
    ),
    ("Assertion `", DEVICE_ASSERT),
    (
        // A kernel's failed check as CUDA prints it, `block: [31,0,0], thread: [116,0,0]
        // Assertion ...`, its condition's backticks lost where a paste broke the line.
        "] Assertion",
        DEVICE_ASSERT,
    ),
    ("std::bad_alloc", "host memory (RAM) running out in C++ (std::bad_alloc): the GPU's memory is not involved"),
    (
        "session crashed after using all available RAM",
        "Colab's notice that the session ran out of host memory (RAM) and was restarted: the GPU's memory is not \
         involved. Load less into RAM at once (a smaller dataset in memory, a model loaded in half precision or \
         straight to the GPU), or a runtime with more RAM",
    ),
    (
        "GPU memory usage is close to the limit",
        "Colab's notice that the GPU's memory is nearly all in use (JAX and TensorFlow take most of it up \
         front): a warning, nothing failed",
    ),
    (
        "CUDA error: invalid argument",
        "an invalid argument to a CUDA call (a pinned host buffer larger than the driver takes, a bad device or \
         stream), not a lack of device memory",
    ),
    (
        "not enough space: expected",
        "ONNX Runtime's check that an output buffer the caller gave is as large as the output (a shape that \
         differs from the one the buffer was sized for), not a device allocation",
    ),
    (
        "java.lang.OutOfMemoryError",
        "the Java virtual machine running out of its heap (host memory, RAM; -Xmx sets it): the GPU's memory is \
         not involved",
    ),
    (
        "out of resource: shared memory",
        "a Triton kernel whose tiles need more shared memory per block than the GPU has (a kernel's block sizes \
         or num_stages), found when launching it: a limit of the kernel, not device memory",
    ),
    ("PI_ERROR_OUT_OF_HOST_MEMORY", RUNTIME_HOST_MEMORY),
    ("UR_RESULT_ERROR_OUT_OF_HOST_MEMORY", RUNTIME_HOST_MEMORY),
    ("ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY", RUNTIME_HOST_MEMORY),
    ("VK_ERROR_OUT_OF_HOST_MEMORY", RUNTIME_HOST_MEMORY),
    (
        "workers are out of shared memory",
        "the DataLoader's worker processes running out of shared memory (/dev/shm, host RAM that carries their \
         batches): the GPU's memory is not involved. Raise the limit (docker run --shm-size), or use fewer \
         workers",
    ),
    (
        "maxMemoryUsageInMB limit exceeded",
        "a WebAssembly heap reaching its limit (TensorFlow.js's WASM backend, in host memory): no GPU is involved",
    ),
    (
        "CUDA memory allocation failed; attempting to free up memory",
        "CUDA.jl's warning that an allocation failed: its pool then frees memory and tries again, and raises an \
         error only if that fails too. Not a failure by itself",
    ),
    (
        "ggml_backend_cpu_buffer_type_alloc_buffer",
        "llama.cpp (ggml) failing to allocate a buffer in host memory (RAM, its CPU backend): the GPU's memory is \
         not involved. Offload more layers to the GPU, use a smaller quantization, or free RAM",
    ),
    (
        "unable to allocate CPU buffer",
        "llama.cpp (ggml) failing to allocate a buffer in host memory (RAM, its CPU backend): the GPU's memory is \
         not involved. Offload more layers to the GPU, use a smaller quantization, or free RAM",
    ),
    (
        "error code is 12",
        "PaddlePaddle's host allocator failing (error code 12 is ENOMEM: host memory, RAM): the GPU's memory is not \
         involved. Smaller inputs or batches on the CPU, or free RAM",
    ),
    (
        "Buy new RAM",
        "host memory (RAM) running out, in PyTorch's old CPU allocator (TH): the GPU's memory is not involved",
    ),
    (
        // (Without its first word: a paste may wrap the sentence after `The`.)
        "caller indicates that this is not a failure",
        "TensorFlow's warning that an allocation allowed to fail did (a cache, or a faster algorithm's \
         workspace): TensorFlow carries on without it, so it is not an error. If the program stopped, its error is \
         elsewhere in the log; if it runs, memory growth (TF_FORCE_GPU_ALLOW_GROWTH=true) or a smaller batch only \
         makes it faster",
    ),
    (
        TORCH_OOM_WARNING,
        "PyTorch's warning that one cudaMalloc failed: PyTorch then frees its cache and tries again, and raises \
         torch.OutOfMemoryError only if that fails too. Without that error after it the program recovered (often \
         at some cost in speed); if the error followed, give its text",
    ),
    (
        TRT_TACTIC_SKIPPED,
        "TensorRT's builder skipping a tactic (a kernel choice) that needed more memory than its workspace allows: \
         it chose another, so it is not an error. A larger workspace (IBuilderConfig::setMemoryPoolLimit) may give \
         a faster engine",
    ),
    (
        "in memory space vmem",
        "a TPU kernel whose tiles do not fit the core's on-chip vector memory (vmem), found when compiling: a \
         limit of the kernel's block sizes, not the device memory (HBM). Smaller blocks in the kernel (a Pallas \
         kernel's block_shape), or the XLA op instead of the custom kernel",
    ),
    (
        "in memory space smem",
        "a TPU kernel that does not fit the core's on-chip scalar memory (smem), found when compiling: a limit of \
         the kernel, not the device memory (HBM)",
    ),
    (
        "pinned memory",
        "pinned host memory (page-locked RAM for transfers) that could not be allocated: host memory, not the \
         GPU's. Lower the size of what is pinned (data loader pin_memory, prefetch buffers), or raise the \
         locked-memory limit (ulimit -l) where a container sets it",
    ),
    (
        "cuMemHostAlloc",
        "pinned host memory (page-locked RAM for transfers) that could not be allocated: host memory, not the \
         GPU's. Lower the size of what is pinned, or raise the locked-memory limit (ulimit -l)",
    ),
    (
        "cudaHostAlloc",
        "pinned host memory (page-locked RAM for transfers) that could not be allocated: host memory, not the \
         GPU's. Lower the size of what is pinned, or raise the locked-memory limit (ulimit -l)",
    ),
    (
        "cudaHostRegister",
        "host memory that could not be pinned (page-locked) for transfers: a limit of the host (locked memory, \
         vm.max_map_count), not the GPU's memory",
    ),
    (
        "pin_memory=True",
        "a pinned (page-locked) host buffer that could not be allocated: host memory for transfers, not the GPU's. \
         Pin less at once (a smaller pinned buffer, or pin_memory=False)",
    ),
    (
        // `Call to cuMemAlloc results in CUDA_ERROR_LAUNCH_FAILED`: the allocation only reports
        // an earlier kernel's failure (the context is lost).
        "CUDA_ERROR_LAUNCH_FAILED",
        "an earlier kernel's launch failure (CUDA_ERROR_LAUNCH_FAILED), reported by the next CUDA call, here an \
         allocation: a crashed kernel (often an out-of-range access), not a lack of memory. Rerun with \
         CUDA_LAUNCH_BLOCKING=1 to find the kernel",
    ),
    ("CUDNN_STATUS_EXECUTION_FAILED", CUDNN_EXECUTION),
    // TensorFlow's words for a cuDNN kernel whose launch returned a failure (`InternalError:
    // cuDNN launch failure : input shape ([64,128,1,1])`), most often a cuDNN that does not
    // match the CUDA the build wants.
    ("cuDNN launch failure", CUDNN_EXECUTION),
    (
        "Error: buffer is not large enough",
        "an MPS kernel given a buffer smaller than its shape needs (an assertion in Metal Performance Shaders, \
         usually a PyTorch MPS bug fixed in a later release): nothing ran out of memory",
    ),
    (
        "No execution plans support the graph",
        "cuDNN's frontend finding no kernel for this operation's configuration (shapes, types, layout), not an \
         allocation",
    ),
    (
        "operation not permitted when stream is capturing",
        "a call that a CUDA graph's capture does not allow (a synchronization or an allocation outside the graph's \
         pool, during torch.cuda.graphs or torch.compile's cudagraphs): not a lack of memory",
    ),
    (
        // (`> 2**32` after it: a paste repair may take its `**` for bold.)
        "total bytes of NDArray >",
        "one tensor larger than Metal's limit for a single buffer (4 GiB on this macOS): a limit of one buffer, not \
         the GPU running out of memory. Split the tensor (a smaller batch or sequence), or a newer macOS",
    ),
    (
        "RuntimeError: Invalid buffer size:",
        "one tensor larger than the largest buffer Metal allows on this Mac (MPS): a limit of one buffer, not the \
         GPU running out of memory. Split the tensor (a smaller batch or sequence)",
    ),
    (
        "CUDNN_STATUS_BAD_PARAM",
        "cuDNN refusing an operation's parameters (shapes, types or layouts it does not take), not an allocation",
    ),
    (
        "CUDNN_STATUS_NOT_SUPPORTED",
        "cuDNN not supporting this operation's configuration on this GPU, not an allocation",
    ),
    (
        "CUDNN_STATUS_MAPPING_ERROR",
        "a cuDNN kernel that could not access its memory (often an earlier kernel's bad access), not an \
         allocation. Rerun with CUDA_LAUNCH_BLOCKING=1 to find the op",
    ),
    ("oom-kill", "the Linux OOM killer ending a process for host memory (RAM): the GPU's memory is not involved"),
    (
        "Out of memory: Killed process",
        "the Linux OOM killer ending a process for host memory (RAM): the GPU's memory is not involved",
    ),
    (
        // A cgroup's limit (a container's, a Slurm job's): `Memory cgroup out of memory: Killed process`.
        "Memory cgroup out of memory",
        "the Linux OOM killer ending a process for host memory (RAM) at a cgroup's limit (a container's or a \
         job's): the GPU's memory is not involved",
    ),
    (
        // `unable to mmap 1073741824 bytes from file </torch_...>: Cannot allocate memory (12)`.
        "Cannot allocate memory (12)",
        "host memory (RAM) refused (ENOMEM), often the shared memory DataLoader workers pass tensors through: \
         the GPU's memory is not involved. Fewer workers, or more shared memory for a container (--shm-size)",
    ),
    (
        // ONNX Runtime on Windows, std::bad_alloc's words there.
        "Status Message: bad allocation",
        "host memory (RAM) running out in C++ (std::bad_alloc, `bad allocation` on Windows): the GPU's memory is \
         not involved",
    ),
    (
        // Older kernels' words.
        "Out of memory: Kill process",
        "the Linux OOM killer ending a process for host memory (RAM): the GPU's memory is not involved",
    ),
    (
        "Signals.SIGKILL",
        "a process killed with SIGKILL, usually by the Linux OOM killer for host memory (RAM): the GPU's memory is \
         not involved. `dmesg | grep -i oom` confirms it; load less into RAM at once (fewer DataLoader workers, \
         memory-mapped datasets, low_cpu_mem_usage when loading a model)",
    ),
    (
        "(SIGKILL)",
        "a process killed with SIGKILL, usually by the Linux OOM killer for host memory (RAM): the GPU's memory is \
         not involved. `dmesg | grep -i oom` confirms it; load less into RAM at once (fewer DataLoader workers, \
         memory-mapped datasets, low_cpu_mem_usage when loading a model)",
    ),
    (
        "earlyoom",
        "earlyoom (a daemon that ends processes before the host runs out of RAM) stopping the program: host memory, \
         not the GPU's. Load less into RAM at once (fewer DataLoader workers, memory-mapped datasets)",
    ),
    (
        "exit code 137",
        "a process killed with SIGKILL (exit code 137 = 128 + 9), usually by the Linux OOM killer for host memory \
         (RAM): the GPU's memory is not involved. `dmesg | grep -i oom` confirms it",
    ),
    (
        "signal 9: SIGKILL",
        "a process killed with SIGKILL, usually by the Linux OOM killer for host memory (RAM): the GPU's memory is \
         not involved. `dmesg | grep -i oom` confirms it",
    ),
    (
        // torchrun's agent: `failed (exitcode: -9) local_rank: 0 (pid: 6914) of binary: ...`,
        // and its summary's `exitcode  : -9`.
        "(exitcode: -9)",
        "a worker torchrun started that ended with exit code -9: killed with SIGKILL, usually by the Linux OOM \
         killer for host memory (RAM): the GPU's memory is not involved. `dmesg | grep -i oom` confirms it; load \
         less into RAM at once (a checkpoint loaded whole by every rank, DataLoader workers)",
    ),
    (
        "exitcode  : -9",
        "a worker torchrun started that ended with exit code -9: killed with SIGKILL, usually by the Linux OOM \
         killer for host memory (RAM): the GPU's memory is not involved. `dmesg | grep -i oom` confirms it",
    ),
    (
        // PyTorch's DataLoader: `Unexpected bus error encountered in worker. This might be
        // caused by insufficient shared memory (shm).`
        "insufficient shared memory (shm)",
        "DataLoader workers running out of shared memory (/dev/shm), host memory the workers pass batches \
         through: not the GPU's. Give the container more (--shm-size, --ipc=host), or fewer workers",
    ),
    (
        "is killed by signal: Segmentation fault",
        "a DataLoader worker that crashed (a segmentation fault in the worker process: a library it loads, or \
         shared memory running out), not an out-of-memory error on the GPU. num_workers=0 shows the error in the \
         main process",
    ),
    (
        "is killed by signal: Bus error",
        "a DataLoader worker that ran out of shared memory (/dev/shm, a bus error), host memory the workers pass \
         batches through: not the GPU's. Give the container more (--shm-size, --ipc=host), or fewer workers",
    ),
    (
        "is killed by signal: Killed",
        "a process killed by the system, usually the Linux OOM killer for host memory (RAM): the GPU's memory is \
         not involved",
    ),
    ("CUDNN_STATUS_INTERNAL_ERROR", CUDNN_INTERNAL),
    (
        "is/are busy or unavailable",
        "a GPU that would not take this process: another process holds it in exclusive-process mode \
         (nvidia-smi -c shows the mode), or the driver or device is in a bad state. Not a lack of memory",
    ),
    (
        "Garbage collection: deallocate free memory regions",
        "TensorFlow's note that it freed its pool's free regions to make a larger one (the device near its \
         limit): it carries on, so it is not an error. Slower steps at most; a smaller batch makes it stop",
    ),
    (
        "Device memory is insufficient to use tactic",
        "TensorRT's builder skipping a tactic (a kernel choice) that needed more memory than is free: it chose \
         another, so it is not an error. A larger workspace or more free memory may give a faster engine",
    ),
    (
        "recommended max working set size",
        "llama.cpp's (ggml's) warning that its Metal buffers exceed the size macOS recommends for the GPU: a \
         warning, nothing failed (it may run slowly or fail later; then give that error)",
    ),
    (
        "Possibly too large swap space",
        "vLLM's warning that its CPU swap space takes much of the host's RAM: a warning about host memory, \
         nothing failed on the GPU. A smaller --swap-space",
    ),
    (
        "Decode out of memory happened",
        "SGLang's scheduler retracting requests when its KV cache filled during decoding: it goes on with \
         fewer requests at once, so it is not an error. A larger --mem-fraction-static, or fewer concurrent \
         requests, makes it rarer",
    ),
    (
        "allocator cache flushes since last step",
        "DeepSpeed's warning that PyTorch's allocator had to flush its cache (memory near its limit): slower \
         steps, nothing failed. A smaller batch, or get_accelerator().empty_cache() on every rank at once",
    ),
    (
        "Exceeded max size of memory object allocation",
        "one buffer larger than the largest allocation OpenVINO's GPU plugin allows for a single memory object: \
         a limit of one buffer, not the GPU running out of memory. Split the tensor (a smaller batch or input)",
    ),
    (
        "greater than the maximum allowed buffer size",
        "one buffer larger than the largest Metal allows on this Mac (MLX): a limit of one buffer, not the GPU \
         running out of memory. Split the tensor (a smaller batch or sequence)",
    ),
    (
        "is greater than the maximum buffer size",
        "one buffer larger than the largest the device's WebGPU limits allow (wgpu): a limit of one buffer, not \
         the GPU running out of memory. Split the tensor, or raise max_buffer_size where the adapter allows it",
    ),
    (
        "GPU device instance has been suspended",
        "Windows removing or resetting the GPU (DXGI's device removed, 887A0005: a driver timeout (TDR) or a \
         driver crash), not an allocation. A longer TdrDelay, an updated driver, or smaller work per call",
    ),
    (
        "failed to fit params to free device memory",
        "llama.cpp giving up fitting its parameters to the free memory (it keeps the settings the user gave): a \
         notice, not the failure. If loading failed after it, give that error",
    ),
    ("no CUDA-capable device is detected", CUDA_SETUP),
    (
        // (Its op's proto follows, with the device's description: `memory_size: 2917584078`.)
        "Error in PredictCost() for the op",
        "TensorFlow's graph optimizer (Grappler) unable to estimate an op's cost, its shapes unknown until it \
         runs: a warning, nothing failed and no memory ran out",
    ),
    ("couldn't communicate with the NVIDIA driver", CUDA_SETUP),
    (
        // (Dr.Jit's: `jit_flush_malloc_cache(): Dr.Jit exhausted the available memory and had to
        // flush its allocation cache to free up additional memory.`)
        "had to flush its allocation cache",
        "Dr.Jit's warning that memory ran short and it freed its allocation cache to go on (slower, once): \
         nothing failed. If the run failed after it, give that error",
    ),
    (
        // (Its out-of-memory error is `Error Code 2: OutOfMemory`.)
        "Error Code 2: Internal Error",
        "TensorRT's internal error (an assertion inside it failed: a version it does not support, a board missing \
         from its tables, a layer it cannot build), not an allocation",
    ),
    ("VK_ERROR_DEVICE_LOST", DEVICE_LOST),
    ("ErrorDeviceLost", DEVICE_LOST),
    // A notebook's kernel that died (Jupyter's and VS Code's words): a process killed, most
    // often by the OOM killer for host memory; a GPU that ran out raises an error instead.
    ("appears to have died. It will restart automatically", NOTEBOOK_DIED),
    ("Kernel crashed while executing code in the current cell", NOTEBOOK_DIED),
    (
        "tried to allocate more memory than is available. It has restarted",
        "Kaggle's notice that the notebook ran out of host memory (RAM) and was restarted: the GPU's memory is not \
         involved. Load less into RAM at once (a smaller dataset in memory, data read in batches)",
    ),
    // MATLAB's host memory: `Out of memory. Type "help memory" for your options.` (older:
    // `Type HELP MEMORY`), and an array past its size preference. (Its GPU's is `Out of memory
    // on device`.)
    ("\"help memory\" for your options", MATLAB_HOST),
    ("HELP MEMORY for your options", MATLAB_HOST),
    ("exceeds maximum array size preference", MATLAB_HOST),
    ("CUDA driver initialization failed", CUDA_SETUP),
    ("CUDA unknown error", CUDA_SETUP),
    ("CUDA error: unknown error", CUDA_SETUP),
    (") : unknown error", CUDA_SETUP),
    (
        "invalid device ordinal",
        "a GPU index beyond the GPUs this process sees (CUDA_VISIBLE_DEVICES, or a device id or rank larger than the \
         count): a setup problem, not device memory",
    ),
    (
        "the launch timed out and was terminated",
        "a kernel that ran longer than the driver allows (the Windows display watchdog, TDR, or a GPU that also drives \
         a display): not device memory. Smaller work per kernel, a longer TdrDelay, or a GPU without a display",
    ),
    (
        "an illegal instruction was encountered",
        "a kernel that executed an illegal instruction (a bug in a kernel or a build for another architecture), not a \
         lack of memory",
    ),
    (
        "uncorrectable ECC error",
        "an uncorrectable ECC error: a hardware memory fault on the GPU, not a lack of memory. nvidia-smi -q -d ECC \
         shows it; the GPU may need a reset or a replacement",
    ),
    ("fallen off the bus", "the GPU dropping off the PCIe bus (Xid 79: power, heat or hardware): not a lack of memory"),
    (
        "Memory access fault by GPU",
        "ROCm's report of a kernel reading or writing memory it does not own (an illegal memory access on an AMD GPU), \
         not a lack of memory",
    ),
    (
        "invalid device function",
        "a build without kernels for this GPU's architecture (HIP's or CUDA's invalid device function): install a \
         build of the framework compiled for this GPU (HSA_OVERRIDE_GFX_VERSION on ROCm)",
    ),
    (
        "hipErrorNoBinaryForGpu",
        "a build without kernels for this GPU's architecture: install a build of the framework compiled for this GPU \
         (HSA_OVERRIDE_GFX_VERSION on ROCm)",
    ),
    (
        "device kernel image is invalid",
        "a build without kernels for this GPU's architecture: install a build of the framework compiled for this GPU",
    ),
    (
        "exited unexpectedly",
        "a DataLoader worker (or another child process) that died: most often the Linux OOM killer for host memory \
         (RAM) or shared memory (/dev/shm) running out, not the GPU's. num_workers=0 shows the error in the main \
         process; dmesg shows a kill",
    ),
    (
        "Too many open files",
        "the process reaching its limit of open files (the DataLoader's shared tensors hold one each): not memory. \
         torch.multiprocessing.set_sharing_strategy('file_system') or a higher ulimit -n",
    ),
    (
        "[Errno 12] Cannot allocate memory",
        "host memory (RAM) refused (ENOMEM, often when a process forks DataLoader workers): the GPU's memory is not \
         involved. Fewer workers, or free RAM",
    ),
    (
        "paging file is too small",
        "Windows running out of virtual memory (its paging file, for the DLLs and tensors each process loads): host \
         memory, not the GPU's. A larger paging file, or fewer DataLoader workers",
    ),
    (
        "Segmentation fault",
        "a crash (a segmentation fault: a library or extension read memory it does not own), not an out-of-memory \
         error on the GPU. A traceback (python -X faulthandler) shows where",
    ),
    (
        "Bus error",
        "a crash with SIGBUS, most often shared memory (/dev/shm) running out under a mapping (DataLoader workers, a \
         container's small /dev/shm): host memory, not the GPU's",
    ),
    (
        "Floating point exception",
        "a crash with SIGFPE (an integer division by zero in native code), not a lack of memory",
    ),
    (
        "OOMKilled",
        "a container killed by the Linux OOM killer at its memory limit (host RAM, the pod's or container's limit): \
         the GPU's memory is not involved. A higher memory limit, or less loaded into RAM at once",
    ),
    (
        "with signal SIGSEGV",
        "a process that crashed with SIGSEGV (a segmentation fault: a library or extension read memory it does not \
         own), not an out-of-memory error on the GPU. Its own log, or python -X faulthandler, shows where",
    ),
    (
        "with signal SIGBUS",
        "a process that crashed with SIGBUS, most often shared memory (/dev/shm) running out under a mapping: host \
         memory, not the GPU's. More shared memory for a container (--shm-size), or fewer workers",
    ),
    (
        "with signal SIGABRT",
        "a process that aborted (SIGABRT: a failed check or an uncaught C++ exception); its own log says why, and says \
         out of memory if that was it",
    ),
    (
        "with signal SIGKILL",
        "a process killed with SIGKILL, usually by the Linux OOM killer for host memory (RAM): the GPU's memory is not \
         involved. `dmesg | grep -i oom` confirms it",
    ),
    (
        "0xC0000005",
        "a crash on Windows (0xC0000005, an access violation in native code), not an out-of-memory error on the GPU",
    ),
    ("0xC00000FD", "a crash on Windows (0xC00000FD, a stack overflow), not an out-of-memory error on the GPU"),
    (
        "cuda_host_mem",
        "OpenCV's pinned host memory (cv::cuda::HostMem, page-locked RAM for transfers) that could not be allocated: \
         host memory, not the GPU's",
    ),
    (
        "Skipping tactic",
        "TensorRT's builder skipping a tactic (a kernel choice) it could not use, often for the memory its workspace \
         needed: it chose another, so it is not an error unless the build then fails (`Could not find any \
         implementation`)",
    ),
    (
        "Missing system database file",
        "MIOpen's warning that its tuning database for this GPU is missing: slower kernels at most, nothing failed",
    ),
    (
        "TensileLibrary",
        "rocBLAS without kernels for this GPU's architecture (its Tensile library has none for it): install a build \
         for this GPU, or HSA_OVERRIDE_GFX_VERSION to a supported one",
    ),
    (
        "Could not initialize Tensile host",
        "rocBLAS/hipBLASLt finding no GPU it can use (the device not visible or not supported): a setup problem, not \
         device memory",
    ),
    (
        "out of host memory",
        "the runtime running out of host memory (RAM), not the device's: the GPU's memory is not involved",
    ),
    (
        "Out of Host Memory",
        "the runtime running out of host memory (RAM), not the device's: the GPU's memory is not involved",
    ),
    (
        "invalid buffer size",
        "a buffer size the device does not take (larger than its largest single allocation, or zero): a limit of one \
         buffer, not the GPU running out of memory",
    ),
    (
        "Invalid Buffer Size",
        "a buffer size the device does not take (larger than its largest single allocation, or zero): a limit of one \
         buffer, not the GPU running out of memory",
    ),
    (
        "clEnqueueNDRangeKernel failed: out of resources",
        "an OpenCL kernel launch that asked for more than the device gives one kernel (work-group size, registers, \
         local memory): a kernel configuration problem, not device memory",
    ),
    (
        "(no temp space); retrying",
        "faiss's note that its temporary memory was full, after which it allocates and retries: not a failure",
    ),
    (
        "(-216:No CUDA support)",
        "an OpenCV built without CUDA (its CUDA module has no GPU support in this build): a setup problem, not device \
         memory",
    ),
    (
        "CUDA Setup failed despite GPU being available",
        "bitsandbytes not finding the CUDA libraries it was built for (a CUDA version or library path it cannot load): \
         a setup problem, not device memory",
    ),
    (
        "unhandled system error",
        "an NCCL (multi-GPU communication) error: a system call failed between processes (sockets, shared memory), not \
         the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        "is killed by signal: Terminated",
        "a DataLoader worker ended by SIGTERM (the job cancelled or preempted, or its parent shutting down), not an \
         out-of-memory error on the GPU",
    ),
    (
        "is killed by signal: ",
        "a DataLoader worker that died by a signal (a crash in a library it loads, or host memory or shared memory \
         running out), not an out-of-memory error on the GPU. num_workers=0 shows the error in the main process",
    ),
    (
        "memory allocation error during getBestTactic",
        "TensorRT's builder finding no memory for one tactic's workspace while it chose kernels: it tries others, so \
         it is not an error unless the build then fails (`could not find any implementation`)",
    ),
    (
        "Fail to alloc memory of ",
        "PaddlePaddle's host allocator failing (host memory, RAM; its GPU allocator's words are `Out of memory error \
         on GPU`): the GPU's memory is not involved. Smaller inputs or batches on the CPU, or free RAM",
    ),
    (
        "node running low on memory",
        "Ray's memory monitor killing a task because the node's host memory (RAM) ran low: the GPU's memory is not \
         involved. Fewer tasks at once per node, or more memory per task (memory= in the task's resources)",
    ),
    (
        "hit memory limit at least once",
        "Slurm's note that the job step reached its host memory limit (RAM, the cgroup's): the GPU's memory is not \
         involved; if the step failed, more --mem or less loaded into RAM",
    ),
    (
        "The node was low on resource: memory",
        "Kubernetes evicting a pod because its node ran low on host memory (RAM): the GPU's memory is not involved. A \
         memory request that fits the node, or less loaded into RAM",
    ),
    (
        "NVRM: Xid",
        "the NVIDIA driver's report of a GPU error (an Xid: 13 and 31 are a kernel's bad access or page fault, 79 the \
         GPU off the bus, 109 a context switch timeout, 48 and 94/95 ECC errors): not a lack of memory. The Xid's \
         number says which",
    ),
    (
        "see_memory_usage",
        "DeepSpeed's report of memory in use (MA: allocated, CA: cached by PyTorch): a note, nothing failed",
    ),
    (
        "were offloaded to the cpu and disk",
        "accelerate's note that some of the model was offloaded to the CPU and disk because it did not fit the GPU: it \
         runs (slowly), nothing failed",
    ),
    (
        "Finished batch size finder",
        "PyTorch Lightning's batch size finder reporting the batch it found: its OOMs while searching are expected, \
         nothing failed",
    ),
    (
        "Memory usage when calculating max tokens in paged kv cache",
        "TensorRT-LLM's note of the memory it sizes its KV cache from: a note, nothing failed",
    ),
    (
        "DXGI_ERROR_DEVICE_REMOVED",
        "Windows removing or resetting the GPU (DXGI's device removed or hung: a driver timeout (TDR) or crash), not \
         an allocation. A longer TdrDelay, an updated driver, or smaller work per call",
    ),
    (
        // `887A0006 The GPU will not respond to more commands` (DirectML through ONNX Runtime).
        "The GPU will not respond to more commands",
        "Windows removing or resetting the GPU (DXGI's device hung, 887A0006: a command the GPU timed out on or \
         could not run, a driver timeout (TDR) or crash), not an allocation. A longer TdrDelay, an updated driver, \
         or smaller work per call",
    ),
    (
        // Slurm 21+: `Detected 1 oom_kill event in StepId=4242871.batch. Some of the step tasks
        // have been OOM Killed.`
        "oom_kill event",
        "the Linux OOM killer ending a job's process for host memory (RAM) at the job's limit (Slurm's cgroup): the \
         GPU's memory is not involved. Ask for more memory (--mem, --mem-per-cpu) or load less into RAM at once",
    ),
    (
        // Intel MKL's allocator (CTranslate2 on the CPU, numpy): `mkl_malloc: failed to allocate memory`.
        "mkl_malloc: failed to allocate",
        "host memory (RAM) that Intel MKL could not allocate: the CPU's, not the GPU's. Load less at once, or run \
         the model on the GPU if that was meant",
    ),
    (
        // detectron2's retry_if_cuda_oom: `Attempting to copy inputs of <function ...> to CPU
        // due to CUDA OOM`.
        "to CPU due to CUDA OOM",
        "detectron2 moving one op's inputs to the CPU after an out-of-memory error on the GPU, and carrying on \
         there (its retry_if_cuda_oom): recovered, nothing failed. If the program stopped, its error is elsewhere \
         in the log",
    ),
    (
        "KV cache pool is full. Retract requests",
        "SGLang retracting requests when its KV cache pool is full: it runs them again later, so nothing failed \
         (throughput drops). Fewer requests at once (--max-running-requests) or more of the GPU for the cache \
         (--mem-fraction-static) keep it from retracting",
    ),
    (
        // `Sequence group ... is preempted by PreemptionMode.RECOMPUTE mode because there is not
        // enough KV cache space.`
        "is preempted by PreemptionMode",
        "vLLM preempting a sequence when its KV cache is full: it recomputes or swaps it back later, so nothing \
         failed (throughput drops). Fewer sequences at once (max_num_seqs) or more of the GPU for the cache \
         (gpu_memory_utilization) keep it from preempting",
    ),
    (
        // Ollama's scheduler: `model requires more gpu memory than is currently available,
        // evicting a model to make space`.
        "evicting a model to make",
        "Ollama unloading another model to make room for this one: nothing failed. If loading failed after it, \
         give that error",
    ),
    (
        "insufficient VRAM to load any model layers",
        "Ollama finding no room on the GPU for any of the model's layers and running it on the CPU: nothing \
         failed, it runs slower. A smaller or more quantized model, a shorter context, or the GPU freed of other \
         models gives it layers on the GPU",
    ),
    (
        // cudaErrorCallRequiresNewerDriver (36), LMDeploy's TurboMind raising it from its
        // allocator: `CUDA runtime error: API call is not supported in the installed CUDA driver`.
        "API call is not supported in the installed CUDA driver",
        "a CUDA call the installed driver is too old for (cudaErrorCallRequiresNewerDriver): the driver, not the \
         GPU's memory, even where an allocator made the call. Update the driver to one the CUDA runtime supports",
    ),
    (
        "DXGI_ERROR_DEVICE_HUNG",
        "Windows removing or resetting the GPU (DXGI's device removed or hung: a driver timeout (TDR) or crash), not \
         an allocation. A longer TdrDelay, an updated driver, or smaller work per call",
    ),
    (
        "0xC0000409",
        "a crash on Windows (0xC0000409, a fail-fast or stack buffer overrun in native code), not an out-of-memory error on the GPU",
    ),
    (
        "0xc0000409",
        "a crash on Windows (0xC0000409, a fail-fast or stack buffer overrun in native code), not an out-of-memory error on the GPU",
    ),
    (
        "NCCL error",
        "an NCCL (multi-GPU communication) error: a network, shared-memory or setup problem between processes, \
         not the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        // NCCL's own result's name: `ncclUnhandledCudaError: Call to CUDA function failed.` (its
        // CUDA failure's words below it: `out of memory` is read as the device's, before this).
        "ncclUnhandledCudaError",
        "an NCCL (multi-GPU communication) error: a CUDA call NCCL made failed for a reason other than memory \
         (the CUDA failure's words say which), not the GPU's memory running out. Rerun with NCCL_DEBUG=INFO for \
         the cause",
    ),
    (
        "ray-oom-prevention",
        "Ray's memory monitor killing a worker: the node's host memory (RAM) passed its threshold, not the GPU's \
         memory. Fewer tasks at once (more CPUs per task), or more RAM on the node",
    ),
    (
        "which exceeds the memory usage threshold",
        "Ray's memory monitor killing a worker: the node's host memory (RAM) passed its threshold, not the GPU's \
         memory. Fewer tasks at once (more CPUs per task), or more RAM on the node",
    ),
    (
        "Watchdog caught collective operation timeout",
        "a collective operation (NCCL's all-reduce, broadcast, ...) that timed out: one rank stopped, fell behind or \
         hung (a crash or an OOM on another rank shows in that rank's own log), not this rank's memory. Each \
         rank's log, or TORCH_NCCL_TRACE_BUFFER_SIZE and the flight recorder, show which",
    ),
    (
        "ncclCommInitRank failed",
        "NCCL (multi-GPU communication) failing to set up its communicator between the processes: a network, \
         shared-memory or setup problem, not the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        "ncclInternalError",
        "an NCCL (multi-GPU communication) error: a network, shared-memory or setup problem between processes, \
         not the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        "ncclSystemError",
        "an NCCL (multi-GPU communication) error: a system call failed between processes (sockets, shared \
         memory), not the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        "/dev/shm",
        "NCCL (multi-GPU communication) running out of shared host memory in /dev/shm: a container's small shared \
         memory (docker's 64 MB default), not the GPU's. Give the container more (--shm-size, or --ipc=host), or \
         NCCL_SHM_DISABLE=1",
    ),
    (
        "NCCL WARN",
        "an NCCL (multi-GPU communication) failure: a network, shared-memory or setup problem between processes, \
         not a lack of GPU memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
    (
        "NCCL failure",
        "an NCCL (multi-GPU communication) failure: a CUDA call or a system call inside NCCL failed (a driver, \
         topology or peer-access problem), with nothing that shows a lack of GPU memory. Rerun with \
         NCCL_DEBUG=INFO for the cause",
    ),
    (
        "NCCL Error",
        "an NCCL (multi-GPU communication) error: a network, shared-memory or setup problem between processes, \
         not the GPU's memory. Rerun with NCCL_DEBUG=INFO for the cause",
    ),
];

/// Where each of `lines` (slices of `text`) starts in it: the markers' words are found in the
/// whole text at once, then put on their lines.
fn line_starts(text: &str, lines: &[&str]) -> Vec<usize> {
    lines.iter().map(|l| l.as_ptr() as usize - text.as_ptr() as usize).collect()
}

/// The line (0-based) that holds byte `offset`, given where each line starts.
fn line_at(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).saturating_sub(1)
}

/// `marker` in `line`, not inside a longer name: `MemoryError` is Python's host memory
/// error, `torch.OutOfMemoryError` the GPU's.
fn contains_word(line: &str, marker: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let starts_ident = marker.starts_with(ident);
    line.match_indices(marker).any(|(at, _)| !starts_ident || !line[..at].ends_with(ident))
}

/// What a text that holds no OOM is, when it is a failure users take for one.
pub fn not_an_oom(text: &str) -> Option<LookAlike> {
    let found = first_look_alike(text)?;
    // A kernel's bad access or failed check corrupts the context, and cuDNN then reports an
    // internal or execution error: the access or the assert, wherever it is, is the cause.
    if CUDNN_SYMPTOMS.contains(&found.what) {
        for (marker, what) in ROOT_CAUSES {
            if let Some(i) = text.lines().position(|l| l.contains(marker)) {
                return Some(LookAlike { line: i + 1, what });
            }
        }
    }
    Some(found)
}

/// A kernel's bad access or failed check anywhere in `text`, which leaves the CUDA context
/// unusable: a cuDNN or cuBLAS handle that then fails to initialise (`CUDNN_STATUS_NOT_INITIALIZED`
/// after `error=700 : an illegal memory access`) is its symptom, not memory run out.
pub fn root_cause(text: &str) -> Option<LookAlike> {
    ROOT_CAUSES.iter().find_map(|(marker, what)| {
        text.lines().position(|l| l.contains(marker)).map(|i| LookAlike { line: i + 1, what })
    })
}

/// What cuDNN says when an earlier kernel's failure reaches it.
const CUDNN_SYMPTOMS: &[&str] = &[CUDNN_INTERNAL, CUDNN_EXECUTION];
/// Failures that cuDNN's errors are often the symptom of.
const ROOT_CAUSES: &[(&str, &str)] =
    &[("illegal memory access", ILLEGAL_ACCESS), ("device-side assert triggered", DEVICE_ASSERT)];

fn first_look_alike(text: &str) -> Option<LookAlike> {
    let lines: Vec<&str> = text.lines().collect();
    let starts = line_starts(text, &lines);
    let line_of = |offset: usize| line_at(&starts, offset);
    // The first line any look-alike's words are on (on one line, the first in the list): each
    // is tried only on the lines that hold its longest word.
    let mut found: Option<(usize, usize, &'static str)> = None;
    for (order, &(marker, what)) in LOOK_ALIKES.iter().enumerate() {
        let before = found.map_or(usize::MAX, |f| f.0);
        for (offset, _) in text.match_indices(longest_word(marker)) {
            let line = line_of(offset);
            if line > before {
                break;
            }
            if contains_word(lines[line], marker) {
                if found.is_none_or(|f| (line, order) < (f.0, f.1)) {
                    found = Some((line, order, what));
                }
                break;
            }
        }
    }
    // Then what no marker's words say, on the lines up to it (on its own line, the marker's
    // words come first).
    let end = found.map_or(lines.len(), |f| f.0 + 1);
    for (i, l) in lines[..end].iter().enumerate() {
        // (A line a paste broke after `signal:`, its signal on the next.)
        let with_next = || {
            let next = lines.get(i + 1)?;
            l.trim_end()
                .ends_with("signal:")
                .then(|| process_end(&format!("{} {}", l.trim_end(), next.trim_start())))?
        };
        if let Some(what) = process_end(l).or_else(with_next).or_else(|| rust_alloc(l)) {
            if found.is_none_or(|f| i < f.0) {
                return Some(LookAlike { line: i + 1, what });
            }
            break;
        }
    }
    if let Some((line, _, what)) = found {
        return Some(LookAlike { line: line + 1, what });
    }
    // A marker a paste broke mid-word over two lines (`an illeg` / `al memory access`).
    let unbroken: String = text.lines().map(str::trim).collect();
    let broken: Vec<&(&str, &str)> =
        LOOK_ALIKES.iter().filter(|(marker, _)| unbroken.contains(longest_word(marker))).collect();
    if broken.is_empty() {
        return host_memory(text).or_else(|| cuda_error(text));
    }
    // Where each line starts in `unbroken`: only the pairs of lines around each place a marker's
    // longest word is there are tried.
    let mut starts = Vec::with_capacity(lines.len());
    let mut at = 0;
    for l in &lines {
        starts.push(at);
        at += l.trim().len();
    }
    let line_of = |offset: usize| line_at(&starts, offset);
    // The first pair (a break mid-word before one at a space, then the list's order).
    let mut first: Option<(usize, usize, usize, &'static str)> = None;
    for (order, &&(marker, what)) in broken.iter().enumerate() {
        for (offset, _) in unbroken.match_indices(longest_word(marker)) {
            let on = line_of(offset);
            for i in [on.saturating_sub(1), on] {
                let Some(pair) = lines.get(i..i + 2) else { continue };
                // Broken mid-word, or at a space (a forum's wrap the repair did not undo).
                for (g, gap) in ["", " "].iter().enumerate() {
                    let joined = format!("{}{gap}{}", pair[0].trim_end(), pair[1].trim_start());
                    if !pair[0].contains(marker)
                        && !pair[1].contains(marker)
                        && contains_word(&joined, marker)
                        && first.is_none_or(|f| (i, g, order) < (f.0, f.1, f.2))
                    {
                        first = Some((i, g, order, what));
                    }
                }
            }
        }
    }
    if let Some((i, _, _, what)) = first {
        return Some(LookAlike { line: i + 1, what });
    }
    host_memory(text).or_else(|| cuda_error(text)).or_else(|| retyped_look_alike(text))
}

/// A look-alike's words retyped in another case or spacing (`RuntimeError:Dataloader worker
/// (pid 6479) is killed by signal:killed`): sought with case and whitespace ignored, on a
/// paste's worth of text (long logs are output, not retyped), for markers long enough to
/// say what they are.
fn retyped_look_alike(text: &str) -> Option<LookAlike> {
    if text.len() > 1 << 20 {
        return None;
    }
    let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).flat_map(char::to_lowercase).collect::<String>();
    let squeezed = squeeze(text);
    let markers: Vec<(String, &'static str)> =
        LOOK_ALIKES.iter().map(|&(m, w)| (squeeze(m), w)).filter(|(m, _)| m.len() >= 16).collect();
    if let Some((marker, what)) = markers.iter().find(|(m, _)| squeezed.contains(m.as_str())) {
        let line = text.lines().position(|l| squeeze(l).contains(marker.as_str()))?;
        return Some(LookAlike { line: line + 1, what });
    }
    // Then a letter or two retyped (`is killed by signaled: Killed`), on a paste's worth of
    // text: on a line that holds the marker's first or last six letters, within two edits.
    if text.len() > 64 << 10 {
        return None;
    }
    let lines: Vec<String> = text.lines().map(squeeze).collect();
    for (marker, what) in markers.iter().filter(|(m, _)| m.chars().count() >= 20) {
        let chars: Vec<char> = marker.chars().collect();
        let head: String = chars[..6].iter().collect();
        let tail: String = chars[chars.len() - 6..].iter().collect();
        let found = lines
            .iter()
            .position(|l| (l.contains(head.as_str()) || l.contains(tail.as_str())) && within_edits(&chars, l, 2));
        if let Some(i) = found {
            return Some(LookAlike { line: i + 1, what });
        }
    }
    None
}

/// Levenshtein's distance from `pattern` to `text`; `anywhere`: to the part of `text` closest
/// to it (Sellers' approximate search).
fn edits(pattern: &[char], text: &str, anywhere: bool) -> usize {
    let mut row: Vec<usize> = (0..=pattern.len()).collect();
    let mut closest = row[pattern.len()];
    for (i, c) in text.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = if anywhere { 0 } else { i + 1 };
        for j in 1..=pattern.len() {
            let above = row[j];
            row[j] = (above + 1).min(row[j - 1] + 1).min(diagonal + usize::from(pattern[j - 1] != c));
            diagonal = above;
        }
        closest = closest.min(row[pattern.len()]);
    }
    if anywhere { closest } else { row[pattern.len()] }
}

/// `pattern` is within `n` edits of some part of `text`.
fn within_edits(pattern: &[char], text: &str, n: usize) -> bool {
    edits(pattern, text, true) <= n
}

/// `needle` (ASCII) in `l`, in any case, without allocating.
pub(crate) fn contains_ignoring_case(l: &str, needle: &str) -> bool {
    l.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Words a look-alike's description uses for a warning or a note: nothing failed.
const NOT_A_FAILURE: &[&str] = &["nothing failed", "not an error", "not a failure", "Not a failure", "not the failure"];

/// Words of a CUDA or HIP error, a CUDA library's status, or a driver's result code.
const CUDA_ERROR_WORDS: &[&str] = &[
    "CUDA error: ",
    "HIP error: ",
    "cuda runtime error (",
    "CUDA_ERROR_",
    "cudaError",
    "hipError",
    "CUBLAS_STATUS_",
    "CUDNN_STATUS_",
    "CUSPARSE_STATUS_",
    "CUSOLVER_STATUS_",
    "CURAND_STATUS_",
    "CUDA driver error",
    "THCudaCheck FAIL",
    "CUDA error (code",
    // CNTK's and ONNX Runtime's `CUDA failure 30: unknown error ; GPU=0 ; ... expr=...`, and
    // ONNX Runtime's older `CUDA error executing cudaMemcpy(...)`.
    "CUDA failure ",
    "CUDA error executing ",
    "CUTENSOR_STATUS_",
    "HSA_STATUS_ERROR",
    // OpenCV's CUDA module: `(-217:Gpu API call) unknown error in function 'allocate'`.
    "Gpu API call",
];

/// A CUDA (or HIP) error in no look-alike's words above: the reader found no out-of-memory
/// error (an allocation's status would have been one), so it is another failure. Said as one,
/// with its line, rather than as a text without an error.
fn cuda_error(text: &str) -> Option<LookAlike> {
    if !any_of(text, CUDA_ERROR_WORDS) {
        return None;
    }
    // (Not a line that says memory ran out: a runtime's OOM in words the reader has not met is
    // read as one, by the generic reader.)
    if cut_in_oom_words(text) {
        return None;
    }
    let line = text.lines().position(|l| {
        CUDA_ERROR_WORDS.iter().any(|w| l.contains(w))
            && !any_of(&l.to_ascii_lowercase(), RAN_OUT)
            && !l.contains("ALLOC")
            && !l.contains("MemoryAllocation")
            || other_status(l).is_some()
    })?;
    let l = text.lines().nth(line).unwrap_or("");
    if any_of(&l.to_ascii_lowercase(), RAN_OUT) && other_status(l).is_some() {
        return Some(LookAlike { line: line + 1, what: REFUSED_WITH_OTHER_STATUS });
    }
    Some(LookAlike { line: line + 1, what: CUDA_OTHER_ERROR })
}

/// The status an allocation's line gives as its result when it is not memory's
/// (`failed to alloc 47987818496 bytes unified memory; result: CUDA_ERROR_INVALID_VALUE`):
/// the call failed for that, whatever the line's words. Not a status the line compares
/// against (MXNet's `e == cudaSuccess || e == cudaErrorCudartUnloading CUDA: out of memory`).
fn other_status(l: &str) -> Option<&str> {
    const STATUSES: &[(&str, &[&str])] = &[
        ("CUDA_ERROR_", &["OUT_OF_MEMORY", "OUT_O"]),
        ("cudaError", &["MemoryAllocation"]),
        ("hipError", &["OutOfMemory"]),
    ];
    STATUSES.iter().find_map(|(prefix, memory)| {
        l.match_indices(prefix).find_map(|(at, _)| {
            let rest = &l[at + prefix.len()..];
            let name = &rest[..rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len())];
            let compared = l[..at].trim_end().ends_with("==");
            (!name.is_empty() && !compared && !memory.iter().any(|m| name.starts_with(m)))
                .then(|| &l[at..at + prefix.len() + name.len()])
        })
    })
}

const REFUSED_WITH_OTHER_STATUS: &str = "an allocation the runtime refused with a status that is not out of memory \
     (the line gives it: an invalid value, an unsupported call): the call's arguments or the setup, not a lack of \
     device memory (a size past what that call takes, a kind of memory this device or driver does not offer)";

const CUDA_OTHER_ERROR: &str = "a CUDA (or HIP) error that is not an allocation failure (the line gives the runtime's \
     words for it): not a lack of device memory. Rerun with CUDA_LAUNCH_BLOCKING=1 to find the call that failed";

/// `vkAllocateMemory failed N` (or another Vulkan call's, ncnn's `vkQueueSubmit failed -4`)
/// with a VkResult that is not the device's memory running out (-2, read as an out-of-memory
/// error): -1 is the host's memory, others another failure (-4: the device lost).
fn vulkan_allocation(line: &str) -> Option<&'static str> {
    let at = line.find(" failed -")?;
    let call = line[..at].rsplit(|c: char| !c.is_ascii_alphanumeric()).next()?;
    if !(call.starts_with("vk") && call[2..].starts_with(|c: char| c.is_ascii_uppercase())) {
        return None;
    }
    let rest = &line[at + " failed ".len()..];
    let code: String = rest.chars().take_while(|c| *c == '-' || c.is_ascii_digit()).collect();
    match code.as_str() {
        "" | "-2" => None,
        "-1" => Some(
            "Vulkan failing to allocate host memory (VK_ERROR_OUT_OF_HOST_MEMORY): the host's RAM, not the GPU's \
             memory",
        ),
        _ => Some(
            "Vulkan refusing an allocation for a reason other than memory (its VkResult is not \
             VK_ERROR_OUT_OF_DEVICE_MEMORY, -2: an invalid handle or a driver fault): not a lack of device memory",
        ),
    }
}

/// `...]Killed`, `... - loss: 2.1371Killed`: the shell's word glued where a progress bar left
/// the cursor (a figure's digit or a bar's bracket before it, not a word's letter nor a space).
fn glued_killed(l: &str) -> bool {
    l.trim_end()
        .trim_end_matches(['`', '*'])
        .strip_suffix("Killed")
        .is_some_and(|head| head.chars().next_back().is_some_and(|c| c.is_ascii_digit() || c.is_ascii_punctuation()))
}

/// A line that says how a process ended, in no look-alike's words: the OOM killer's `Killed`,
/// a Vulkan result that is no OOM, a launcher's exit code of SIGKILL or SIGBUS.
fn process_end(l: &str) -> Option<&'static str> {
    // The Linux OOM killer's one word, alone on its line (as the shell prints it, also in
    // Chinese locales, also pasted in markdown bold), or in a shell's report of a job it ran
    // (`/bin/bash: line 27:   318 Killed   sh start.sh`: the pid, then the word; zsh's `[1]
    // 12345 killed     python train.py`, `zsh: killed     python train.py`), or glued to the end
    // of a progress bar (`348/1063 [01:08<02:57, 4.03it/s]Killed`).
    if l.contains("illed") || l.contains("已杀死") {
        let words: Vec<&str> = l.split_whitespace().collect();
        let job = words.windows(2).any(|w| {
            // (Also a Chinese locale's bash: `run.sh: 行 30: 23195 已杀死`.)
            matches!(w[1], "Killed" | "killed" | "已杀死")
                && (w[0].bytes().all(|b| b.is_ascii_digit()) || w[0] == "zsh:")
        }) || glued_killed(l);
        if job || matches!(l.trim().trim_matches(['*', '`', '>', ' ']), "Killed" | "已杀死") {
            return Some(
                "a process killed by the system, usually the Linux OOM killer for host memory (RAM): the GPU's \
                 memory is not involved",
            );
        }
    }
    if let Some(what) = vulkan_allocation(l) {
        return Some(what);
    }
    if let Some(what) = signal_named(l) {
        return Some(what);
    }
    if let Some(what) = status_check(l) {
        return Some(what);
    }
    if kernel_shared_memory(l) {
        return Some(
            "a kernel that needs more shared memory per block than the GPU offers (on-chip memory a launch asks \
             for, fixed by the GPU's architecture): a limit of the kernel's configuration, not device memory",
        );
    }
    // (Only where a code or a status is named: the words are looked for lower-cased.)
    if !(l.contains("ode") || l.contains("ODE") || l.contains("tatus") || l.contains("TATUS")) {
        return None;
    }
    if exit_code(l, &["-9", "137"]) {
        return Some(
            "a process that ended with SIGKILL (exit code -9, or 137 from a shell), usually by the Linux OOM killer \
             for host memory (RAM): the GPU's memory is not involved. `dmesg | grep -i oom` confirms it",
        );
    }
    if exit_code(l, &["-11", "139"]) {
        return Some(
            "a process that crashed with SIGSEGV (exit code -11, or 139 = 128 + 11: a segmentation fault in native \
             code), not an out-of-memory error on the GPU. Its own log, or python -X faulthandler, shows where",
        );
    }
    if exit_code(l, &["-6", "134"]) {
        return Some(
            "a process that ended with SIGABRT (exit code -6, or 134 = 128 + 6): a native library aborted (a failed \
             check, an uncaught C++ exception), not an out-of-memory error on the GPU. The lines before the exit \
             (`terminate called ...`, `Assertion ... failed`) say which",
        );
    }
    if exit_code(l, &["-7", "135"]) {
        return Some(
            "a process that ended with SIGBUS (exit code -7, or 135 = 128 + 7), most often shared memory (/dev/shm) \
             running out under a worker's mapping: host memory, not the GPU's. More shared memory for a container \
             (--shm-size), or fewer workers",
        );
    }
    None
}

/// A glog check on a CUDA or HIP call's status that failed with another status than out of
/// memory (2): `Check failed: err == hipSuccess (98 vs. 0)`, the status's meaning where it is
/// a common one.
fn status_check(l: &str) -> Option<&'static str> {
    let at = l.find("Success (")?;
    if !(l[..at].ends_with("cuda") || l[..at].ends_with("hip")) {
        return None;
    }
    let rest = &l[at + "Success (".len()..];
    let (code, tail) = rest.split_once(' ')?;
    if !tail.starts_with("vs. 0)") {
        return None;
    }
    Some(match code.parse::<u32>().ok()? {
        2 => return None,
        98 => {
            "a CUDA (or HIP) call that failed with status 98, an invalid device function: the build has no kernel \
             for this GPU's architecture (a wheel or build for another GPU), not a lack of device memory"
        }
        209 => {
            "a CUDA call that failed with status 209, no kernel image for this device: the build has no kernel for \
             this GPU's architecture, not a lack of device memory"
        }
        35 => {
            "a CUDA call that failed with status 35: the driver is older than the CUDA runtime the program was \
             built with, not a lack of device memory. Update the driver"
        }
        700 => {
            "a CUDA call that failed with status 700, an illegal memory access (a kernel's bad access, reported \
             by the next call), not a lack of device memory. Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel"
        }
        _ => CUDA_OTHER_ERROR,
    })
}

/// A process's end by a signal, named after the word `signal` as a launcher says it: Go's
/// `signal: killed` (Ollama's `llama runner process has terminated: signal: killed`), `killed
/// by signal 9`, `with signal 9`; and the crashes said so (`signal: segmentation fault`,
/// `signal: aborted (core dumped)`, `signal: bus error`).
fn signal_named(l: &str) -> Option<&'static str> {
    if !l.contains("ignal") {
        return None;
    }
    let l = l.to_ascii_lowercase();
    let after: Vec<&str> =
        l.match_indices("signal").map(|(at, w)| l[at + w.len()..].trim_start_matches([':', ' '])).collect();
    // (A whole word or number: not `killing`, not `9.5`.)
    let ends = |rest: &str| {
        let mut c = rest.chars();
        match c.next() {
            None => true,
            Some('.') => !c.next().is_some_and(|d| d.is_ascii_digit()),
            Some(x) => !x.is_ascii_alphanumeric(),
        }
    };
    let says = |words: &[&str]| after.iter().any(|a| words.iter().any(|w| a.starts_with(w) && ends(&a[w.len()..])));
    if says(&["killed", "9", "sigkill", "kill"]) {
        return Some(
            "a process killed with SIGKILL, usually by the Linux OOM killer for host memory (RAM): the GPU's memory is \
             not involved. `dmesg | grep -i oom` confirms it; on a board whose GPU shares the host's memory (a Jetson), \
             the model and the host together outgrew it",
        );
    }
    if says(&["segmentation fault", "11", "sigsegv"]) {
        return Some(
            "a process that crashed with SIGSEGV (a segmentation fault in native code), not an out-of-memory error on \
             the GPU. Its own log, or python -X faulthandler, shows where",
        );
    }
    if says(&["aborted", "6", "sigabrt"]) {
        return Some(
            "a process that ended with SIGABRT: a native library aborted (a failed check, an uncaught C++ \
             exception), not an out-of-memory error on the GPU. The lines before it say which",
        );
    }
    if says(&["bus error", "7", "sigbus"]) {
        return Some(
            "a process that ended with SIGBUS, most often shared memory (/dev/shm) running out under a worker's \
             mapping: host memory, not the GPU's. More shared memory for a container (--shm-size), or fewer workers",
        );
    }
    None
}

/// `insufficient shared memory available on the GPU` (tiny-cuda-nn's fused MLP), `not enough
/// shared memory`: a kernel's per-block shared memory, not /dev/shm's (a DataLoader's `(shm)`,
/// its workers).
fn kernel_shared_memory(l: &str) -> bool {
    // (Looked at every line of a paste: lower-cased only where the words may be.)
    if !contains_ignoring_case(l, "shared memory") {
        return false;
    }
    let l = l.to_ascii_lowercase();
    ["insufficient shared memory", "not enough shared memory", "exceeds the shared memory", "too much shared memory"]
        .iter()
        .any(|w| l.contains(w))
        && !["shm", "worker", "dataloader", "/dev/"].iter().any(|w| l.contains(w))
}

/// A launcher's or shell's report of a process's exit code, one of `codes` (-9 or 137 for
/// SIGKILL, -7 or 135 for SIGBUS). (`... exits with return code = -9` from DeepSpeed's
/// launcher, torchrun's `exitcode: -9`, `exit status 137`, `exited with status 135`.)
fn exit_code(line: &str, codes: &[&str]) -> bool {
    let l = line.to_ascii_lowercase();
    ["return code", "returncode", "exit code", "exitcode", "exit status", "exited with status"].iter().any(|key| {
        l.match_indices(key).any(|(at, _)| {
            let rest = l[at + key.len()..].trim_start_matches([' ', '=', ':', '\t']);
            codes.iter().any(|code| {
                rest.strip_prefix(code).is_some_and(|after| !after.starts_with(|c: char| c.is_ascii_digit()))
            })
        })
    })
}

/// A line in no look-alike's words above that says the host's memory ran out (memory ran
/// out and failed, with the host named and no device): a runtime oomscope has not met.
fn host_memory(text: &str) -> Option<LookAlike> {
    let has = any_of;
    let ran_out = |l: &str| has(l, RAN_OUT) || ran_out_of_some(l);
    if !ran_out(&text.to_ascii_lowercase()) {
        return None;
    }
    // (`unsufficient RAM`: mmgp's words.)
    let line = text.lines().position(|l| {
        if !maybe_memory_words(l) {
            return false;
        }
        let l = l.to_ascii_lowercase();
        ran_out(&l) && on_the_host(&l) && has(&l, FAILED) && !has(&l, ON_A_DEVICE)
    });
    if let Some(line) = line {
        return Some(LookAlike {
            line: line + 1,
            what: "the host's memory (RAM) running out, as the line says: the GPU's memory is not involved",
        });
    }
    // Memory that could not be had where nothing in the paste names a device at all (MuJoCo's
    // `mujoco.FatalError: Could not allocate memory`): the host's, as far as the paste shows.
    let lower = text.to_ascii_lowercase();
    if on_a_device(&lower) || lower.contains("kv cache") || device_status(text) || any_of(text, CUDA_ERROR_WORDS) {
        return None;
    }
    let line = text.lines().position(|l| {
        if !maybe_memory_words(l) {
            return false;
        }
        let l = l.to_ascii_lowercase();
        // (A status quoted as a call's result is its failure: xmrig's `<DatasetHost::reg>:50
        // "out of memory"`.)
        has(&l, RAN_OUT) && (has(&l, FAILED) || l.contains("\"out of memory\""))
    })?;
    Some(LookAlike {
        line: line + 1,
        what: "memory that could not be allocated where nothing in the paste names a GPU: the host's (RAM), as far \
               as it shows. If this ran on a GPU, paste the lines that name it (the device, the framework's message)",
    })
}

/// Other out-of-memory errors of one paste that are listed beside the first, at the most.
const OTHERS: usize = 16;
/// Bytes after an out-of-memory error in which the next is looked for.
const OTHERS_WINDOW: usize = 1 << 20;

/// Reads the message in `text` (from `path`) into a dump: the first out-of-memory error,
/// with the others the paste holds after it (another GPU, another request) listed beside it.
pub fn parse(path: &Path, text: &str) -> Result<Dump, InputError> {
    let clean = without_ansi(text);
    // TensorRT's builder trying a tactic whose workspace does not fit, then skipping it: its
    // "could not be allocated" is not a failure unless the build then failed.
    let skipped = clean.contains(TRT_TACTIC_SKIPPED)
        || clean.contains("Skipping tactic") && clean.contains("could not be allocated")
        || clean.contains("memory allocation error during getBestTactic");
    // (Unless the message found is another framework's: a PyTorch OOM after the builder's
    // probe is one. TensorRT's own `Error Code 2: OutOfMemory` beside a skipped tactic is the
    // probe's.)
    let tactic = |l: &str| {
        ["could not be allocated", "getBestTactic", TRT_TACTIC_SKIPPED, "Skipping tactic", "Error Code 2: OutOfMemory"]
            .iter()
            .any(|w| l.contains(w))
    };
    if skipped
        && !clean.contains("ould not find any implementation")
        && find(&clean).is_none_or(|f| clean.lines().nth(f.line).is_some_and(tactic))
    {
        return Err(InputError {
            path: path.to_path_buf(),
            line: 0,
            message: "no out-of-memory error found: TensorRT skipped a tactic for memory and went on".into(),
        });
    }
    let mut d = parse_one(path, &clean)?;
    let lines: Vec<&str> = clean.lines().collect();
    let Some(first) = d.imported.as_ref().and_then(|i| i.message.as_ref()) else { return Ok(d) };
    let first_device = first.device.clone();
    let mut from = first.line as usize;
    let mut others: Vec<oomscope_format::OtherOom> = Vec::new();
    while from < lines.len() && others.len() < OTHERS {
        // The text from that line, as it lies (no copy), up to a window's end: ranks that
        // fail together print close to each other, and a paste may be 50 MB of something else.
        let offset = lines[from].as_ptr() as usize - clean.as_ptr() as usize;
        let mut end = (offset + OTHERS_WINDOW).min(clean.len());
        while !clean.is_char_boundary(end) {
            end -= 1;
        }
        let Ok(next) = parse_one(path, &clean[offset..end]) else { break };
        let Some(m) = next.imported.as_ref().and_then(|i| i.message.as_ref()) else { break };
        let line = from as u64 + m.line;
        let other = oomscope_format::OtherOom {
            line,
            device: m.device.clone(),
            requested: next.oom.as_ref().map(|o| o.requested),
            message: Some(Box::new(Message { others: Vec::new(), ..m.clone() })),
        };
        // Another device's failure, with its request: the same failure printed again (a
        // traceback's repeat, a rank's echo), or a later clause of the same message read on
        // its own, is not another.
        let another = other.requested.is_some()
            && other.device.is_some()
            && other.device != first_device
            && !others.iter().any(|o| o.device == other.device);
        if another {
            others.push(other);
        }
        from = line as usize;
    }
    if !others.is_empty() {
        for o in &others {
            d.ooms.push(OomRecord {
                requested: o.requested.unwrap_or(0),
                rounded: o.requested.unwrap_or(0),
                step: -1,
                ..OomRecord::default()
            });
        }
        d.ooms_total = d.ooms.len() as u64;
        if let Some(m) = d.imported.as_mut().and_then(|i| i.message.as_mut()) {
            m.others = others;
        }
    }
    Ok(d)
}

/// The first out-of-memory error of `text` (without colour codes).
fn parse_one(path: &Path, text: &str) -> Result<Dump, InputError> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(found) = find(text) else {
        return Err(InputError { path: path.to_path_buf(), line: 0, message: "no out-of-memory message found".into() });
    };
    let body = body(&lines, found);
    let mut m = Message {
        format: found.format,
        line: found.line as u64 + 1,
        unreadable: unreadable_figures(&body),
        ..Message::default()
    };
    let mut request: Option<u64> = None;
    let mut usage: Vec<NodeUsage> = Vec::new();
    let mut op: Option<String> = None;
    let shape: Option<Vec<i64>> = None;
    match found.format {
        MessageFormat::TorchCapacity | MessageFormat::TorchReserved => {
            request = torch_cache(&body, &mut m);
            // A paste wrapped mid-word (`allocated by PyTorc` / `h, and`): read the lines
            // joined without a space too, and keep the reading with more figures.
            let mut tight = Message { format: found.format, line: m.line, ..Message::default() };
            let tight_request = torch_cache(&joined(&lines, found, ""), &mut tight);
            if known(&tight) + usize::from(tight_request.is_some()) > known(&m) + usize::from(request.is_some()) {
                (m, request) = (tight, tight_request);
            }
            // PyTorch 2.9+ logs the exact figures first: `memory allocation failed with OOM on
            // device 0 while trying to allocate 1000341504 bytes (free: 916848640, total: ...)`.
            if let Some(w) = lines.iter().find_map(|l| after(l, "memory allocation failed with OOM on device ")) {
                request = after(w, "trying to allocate ").and_then(leading_u64).or(request);
                m.free = after(w, "(free: ").and_then(leading_u64).or(m.free);
                m.total = after(w, "total: ").and_then(leading_u64).or(m.total);
                if m.device.is_none() {
                    m.device = leading_u64(w).map(|n| format!("GPU {n}"));
                }
            }
        }
        MessageFormat::TorchAsync => request = torch_async(&body, &mut m),
        MessageFormat::TorchMps => request = torch_mps(&body, &mut m),
        MessageFormat::XlaRuntime if body.contains("That was not possible") => {
            // A TPU at run time: `Attempting to allocate 15.65G. That was not possible. There
            // are 11.08G free.` (and the largest free piece when fragmentation is the cause).
            request = after(&body, "Attempting to allocate ")
                .or_else(|| after(&body, "Attempting to reserve "))
                .and_then(leading_figure);
            m.free = after(&body, "There are ").and_then(leading_figure);
            m.largest_free = after(&body, "largest contiguous region of free memory is ").and_then(leading_figure);
            m.total = lines.iter().find_map(|l| after(l, "HBM capacity ")).and_then(leading_figure);
            m.device = Some("TPU".into());
            m.format = MessageFormat::TpuRuntime;
        }
        MessageFormat::XlaRuntime if body.contains("bytes allocatable") => {
            // A TPU at run time, newer: `Could not allocate 10485760 bytes in memory 0x0x0_HBM0;
            // 4374528 bytes allocatable, 14942208 bytes available`.
            request = after(text, "Could not allocate ").and_then(leading_u64);
            m.largest_free =
                figure_before(&body, " bytes allocatable").or_else(|| exact_before(&body, " bytes allocatable"));
            m.free = exact_before(&body, " bytes available");
            m.device = Some("TPU".into());
            m.format = MessageFormat::TpuRuntime;
        }
        MessageFormat::XlaRuntime if body.contains("cuMemAllocAsync failed to allocate") => {
            // XLA's cudaMallocAsync allocator: `cuMemAllocAsync failed to allocate N bytes: ...
            // Free memory/Total memory: F/T`, then its `Stats:`.
            request = after(&body, "cuMemAllocAsync failed to allocate ").and_then(leading_u64);
            if let Some(ft) = after(text, "Free memory/Total memory: ") {
                m.free = leading_u64(ft);
                m.total = ft.split_once('/').and_then(|(_, t)| leading_u64(t));
            }
            m.allocated = stat_after(text, "InUse:");
            m.allowed = stat_after(text, "Limit:").filter(|&l| l > 0 && m.total.is_none_or(|t| l < t));
            m.format = MessageFormat::XlaAsync;
        }
        MessageFormat::XlaRuntime => {
            request = xla_request(&body).or_else(|| bfc_request(&lines));
            m.xla = xla_stats(&lines).or_else(|| rematerialized(&lines));
            usage = buffers(&lines);
            m.device = device_ordinal(&body);
        }
        MessageFormat::XlaHbm => {
            let block = &lines[found.line..];
            let x = hbm(block);
            m.total = (x.capacity > 0).then_some(x.capacity);
            m.xla = Some(x);
            usage = buffers(block);
            m.device = Some("TPU".into());
        }
        MessageFormat::TgiWarmup => {
            m.prefill_tokens = tgi_warmup(lines[found.line]).flatten();
        }
        // SGLang's prefill: the tokens it tried to allocate, and its pool's free slots
        // (`full_available_size=7936`: free now; evictable ones are its prefix cache's).
        MessageFormat::SglangKvCache if body.contains("Prefill out of memory") => {
            let near = lines[found.line..lines.len().min(found.line + 6)].join("\n");
            m.prefill_tokens = after(&near, "Try to allocate ").and_then(leading_u64).filter(|&t| t > 0);
            m.kv_tokens = after(&near, "full_available_size=").and_then(leading_u64);
        }
        MessageFormat::KvCacheCheck | MessageFormat::EngineCheck => {
            let check = if found.format == MessageFormat::KvCacheCheck { kv_cache_check } else { engine_check };
            if let Some((required, available)) = check(&lines, found.line) {
                request = Some(required);
                m.free = Some(available);
            }
        }
        MessageFormat::TfTensor => {
            op = after(&body, "[Op:").map(|s| s.split(']').next().unwrap_or(s).trim().to_string());
            // A kernel's scratch memory: `Ran out of GPU memory when allocating 1294336000 bytes for`.
            request = after(&body, "Ran out of GPU memory when allocating ").and_then(leading_u64);
        }
        MessageFormat::Paddle
            if body.contains("enforce allocating <= available failed")
                || body.contains("enforce allocating < available failed") =>
        {
            // PaddlePaddle Fluid: `enforce allocating <= available failed, 10513462067 > 1369702144`
            // (`< ... N >= M` for its buddy allocator's first chunk).
            let figures = after(&body, "failed, ");
            request = figures.and_then(leading_u64);
            m.free = figures.and_then(|f| after(f, "> ").or_else(|| after(f, ">= "))).and_then(leading_u64);
        }
        MessageFormat::VllmKvCache => {
            // `(4.26 GiB KV cache is needed, which is larger than the available KV cache memory
            // (4.25 GiB). Based on the available memory, the estimated maximum model length is N.`
            // A terminal may wrap it mid-word: read it joined without breaks too.
            let tight = joined(&lines, Found { line: found.line.saturating_sub(1), ..found }, "");
            let around = if tight.contains("KV cache is needed") { tight } else { body.clone() };
            // (Joined without breaks, a forum's break at a word runs two words into one:
            // `(1048576),22.5 GiB`; read with the spaces then.)
            let spaced = joined(&lines, Found { line: found.line.saturating_sub(1), ..found }, " ");
            request =
                figure_before(&around, " KV cache is needed").or_else(|| figure_before(&spaced, " KV cache is needed"));
            m.free = after(&around, "available KV cache memory (")
                .and_then(leading_figure)
                .or_else(|| after(&spaced, "available KV cache memory (").and_then(leading_figure));
            m.max_len = after(&around, "max seq len (").and_then(leading_u64);
            m.estimated_len = after(&around, "maximum model length is ").and_then(leading_u64);
            // The tokens form: `max seq len (32768) is larger than the maximum number of
            // tokens that can be stored in KV cache (7344)`.
            m.kv_tokens = after(&around, "can be stored in KV cache (").and_then(leading_u64);
            // The profile: `the current vLLM instance can use total_gpu_memory (8.00GiB) x
            // gpu_memory_utilization (0.70) = 5.60GiB` above `model weights take 5.20GiB;
            // non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB;
            // the rest of the memory reserved for KV Cache is -1.05GiB.`: the budget as the
            // limit, what the three take as the live memory.
            // `Free memory on device cuda:0 (10.50/79.19 GiB) on startup is less than desired
            // GPU memory utilization (0.9, 71.27 GiB).`: free and total, and what it wanted.
            if let Some(r) = after(&around, "on startup is less than desired GPU memory utilization (") {
                // (Older releases name no device: `Free memory on device (6.92/8.0 GiB) ...`.)
                // (A title may begin it in lower case: `free memory on device cuda:0 (...)`.)
                let figures = around.split("ree memory on device ").nth(1).and_then(|f| f.split_once('('));
                if let Some((_, f)) = figures {
                    let unit = f.split(')').next().unwrap_or("").rsplit(' ').next().unwrap_or("");
                    let (free, total) = f.split_once('/').unwrap_or(("", ""));
                    let total = total.split(' ').next().unwrap_or("");
                    m.free = leading_figure(&format!("{free} {unit}"));
                    m.total = leading_figure(&format!("{total} {unit}"));
                }
                // (Its figure cut by the paste, `(0.6, `: the share of the total it names.)
                m.allowed = r.split_once(", ").and_then(|(_, w)| leading_figure(w)).or_else(|| {
                    let share: f64 = r.split(',').next()?.trim().parse().ok()?;
                    let total = m.total?;
                    (share > 0.0 && share <= 1.0).then_some((total as f64 * share) as u64)
                });
                m.device = after(&around, "ree memory on device ")
                    .and_then(|d| d.split_whitespace().next())
                    .filter(|d| !d.starts_with('('))
                    .map(str::to_string);
            }
            if lines[found.line].contains("reserved for KV Cache is -") {
                let line = lines[found.line];
                let took = |key: &str| after(line, key).and_then(leading_figure);
                if let (Some(w), Some(n), Some(a)) = (
                    took("model weights take "),
                    took("non_torch_memory takes "),
                    took("activation peak memory takes "),
                ) {
                    m.allocated = Some(w.saturating_add(n).saturating_add(a));
                }
                m.total = after(text, "total_gpu_memory (").and_then(leading_figure);
                m.allowed = after(text, "total_gpu_memory (").and_then(|r| after(r, ") = ")).and_then(leading_figure);
            }
        }
        MessageFormat::Paddle => {
            // `Cannot allocate 98.000244MB memory on GPU 0, 6.000000GB memory has been allocated and
            // available memory is only 0.000000B.`
            request = after(&body, "Cannot allocate ").and_then(leading_figure);
            m.device = after(&body, "Out of memory error on GPU ").and_then(leading_u64).map(|n| format!("GPU {n}"));
            m.allocated = figure_before(&body, " memory has been allocated");
            m.free = after(&body, "available memory is only ").and_then(leading_figure);
            // The legacy allocator's report: `Cannot allocate 195.800781MB in GPU 0, available
            // 5.937500MB`, `total 7981694976` (bytes), `GPU memory used: 324.750000kB` (what its
            // pool holds); a paste may glue them into one line (`5.937500MBtotal 7981694976`).
            if paddle_legacy(&body).is_some() {
                m.device = after(&body, " in GPU ").and_then(leading_u64).map(|n| format!("GPU {n}"));
                m.free = after(&body, ", available ").and_then(glued_figure);
                m.total = after(&body, "total ").and_then(leading_u64);
                m.allocated = after(&body, "GPU memory used: ").and_then(glued_figure);
            }
        }
        MessageFormat::OnnxArena => {
            request = after(&body, "requested buffer of size ").and_then(leading_u64);
        }
        MessageFormat::DeviceRuntime => {
            // The figures come before the marker on its line (MindSpore's `... is more than`).
            let whole = format!("{} {body}", lines.get(found.line).copied().unwrap_or(""));
            request = device_runtime(&whole, &mut m);
        }
        MessageFormat::CudaRuntime => {
            // `failed to allocate 2.96G (3179741184 bytes) from device`, `Failed to CUDA calloc N bytes`.
            request = exact_bytes_before(&body, " bytes) from device")
                .or_else(|| after(&body, "Failed to CUDA calloc ").and_then(leading_u64))
                .or_else(|| after(text, "Requested amount of GPU memory (").and_then(leading_u64))
                .or_else(|| after(text, "Requested amount of memory (").and_then(leading_u64))
                // CuPy: `Out of memory allocating 25,600,000 bytes`.
                .or_else(|| after(text, "Out of memory allocating ").and_then(grouped_u64))
                .or_else(|| after(text, "out of memory to allocate ").and_then(grouped_u64));
            // CuPy's pool: what it holds (`allocated so far: N bytes`, freed blocks it keeps
            // included) and a limit the user set (`limit set to: L bytes`).
            if let Some(a) = after(text, "(allocated so far: ").and_then(grouped_u64) {
                m.allocated = Some(a);
                m.allowed = after(text, "limit set to: ").and_then(grouped_u64);
            }
            // A CUDA program's own account of the device beside its error (PhoenixMiner: `CUDA
            // error in CudaProgram.cu:373 : out of memory (2)`, then `GPU1: CUDA memory: 4.00 GB
            // total, 3.30 GB free`), and what it was allocating (`Allocating DAG (3.33) GB`).
            let near = lines[found.line.saturating_sub(3)..(found.line + 4).min(lines.len())].join("\n");
            if let Some(l) =
                near.lines().find(|l| l.contains("memory: ") && l.contains(" total, ") && l.contains(" free"))
            {
                m.total = after(l, "memory: ").and_then(leading_figure);
                m.free = after(l, " total, ").and_then(leading_figure);
                request = request.or_else(|| {
                    let dag = after(text, "Allocating DAG (")?;
                    let (n, rest) = dag.split_once(')')?;
                    parse_figure(&format!("{n} {}", rest.split_whitespace().next()?))
                });
            }
            // llama.cpp: `allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory`,
            // then the exact size: `failed to allocate CUDA1 buffer of size 10345253120`.
            // (Its head may be on the line above, where a paste wrapped it after `on device 0:`.)
            let above = found.line.checked_sub(1).map(|i| lines[i]).filter(|a| {
                a.contains("allocating ") && a.trim_end().ends_with(':') && !lines[found.line].contains("allocating ")
            });
            let joined = above.map(|a| format!("{} {}", a.trim_end(), lines[found.line].trim_start()));
            let line = joined.as_deref().unwrap_or(lines[found.line]);
            if let Some(a) = after(line, "allocating ").filter(|a| a.contains(" on device ")) {
                request = after(text, "buffer of size ").and_then(leading_u64).or_else(|| leading_figure(a));
                m.device = after(a, " on device ").and_then(leading_u64).map(|n| format!("GPU {n}"));
                m.format = MessageFormat::Ggml;
            }
            // Figures in words of their own, on the failing line and the two below it.
            if request.is_none() {
                let near = lines[found.line..(found.line + 3).min(lines.len())].join(" ");
                request = named_figures(&near, &mut m);
            }
        }
        _ => {}
    }
    m.site = call_site(&lines[..found.line.min(lines.len())]).or_else(|| call_site(&lines));
    m.framework = framework(found.format, text);
    m.rocm = body.contains("HIP out of memory") || body.contains("HIP Graphs");
    m.conf_var = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
        .into_iter()
        .find(|v| body.contains(v))
        .map(str::to_string);
    // A device of 0 bytes is no device: a figure the framework never filled in (an
    // uninitialized size), or an edited one; not divided by, and said.
    if m.total == Some(0) {
        m.unreadable.push("0 bytes (the device's total)".to_string());
    }
    m.total = m.total.filter(|&t| t > 0);
    // (vLLM's check is not a request a call made.)
    if op.is_none()
        && !matches!(m.format, MessageFormat::VllmKvCache | MessageFormat::KvCacheCheck | MessageFormat::EngineCheck)
    {
        op = m.site.as_ref().map(ToString::to_string);
    }
    Ok(build(path, m, request, op, shape, usage, lines.len()))
}

/// The text without terminal colour codes (`ESC[2m`), which logs of Ray and rich keep.
fn without_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The framework: from the format, else from what the text mentions.
fn framework(format: MessageFormat, text: &str) -> Framework {
    match format {
        f if f.is_torch_cache() => Framework::PyTorch,
        MessageFormat::TorchAsync | MessageFormat::TorchMps | MessageFormat::TorchCpu => Framework::PyTorch,
        MessageFormat::TfTensor => Framework::TensorFlow,
        MessageFormat::Paddle => Framework::Paddle,
        MessageFormat::Ggml => Framework::LlamaCpp,
        MessageFormat::OnnxArena => Framework::OnnxRuntime,
        MessageFormat::VllmKvCache | MessageFormat::SglangKvCache | MessageFormat::TgiWarmup => Framework::PyTorch,
        _ => {
            let has = |k: &str| text.contains(k);
            if has("mxnet") || has("MXNet") {
                Framework::MxNet
            } else if has("nvinfer1") || has("[TRT]") || has("TensorRT") {
                Framework::TensorRt
            } else if has("ggml_") || has("llama_") {
                Framework::LlamaCpp
            } else if has("jax") || has("jaxlib") || has("XlaRuntimeError") || has("xla_bridge") {
                Framework::Jax
            } else if has("tensorflow") || has("Tensorflow") || has("keras") {
                Framework::TensorFlow
            } else if has("torch") || has("RuntimeError: CUDA error") || has("cuDNN error") {
                Framework::PyTorch
            } else {
                Framework::Unknown
            }
        }
    }
}

/// How many of a message's figures were read.
fn known(m: &Message) -> usize {
    [m.total, m.free, m.allocated, m.reserved, m.process].iter().filter(|v| v.is_some()).count()
}

/// The message's text from its marker on, joined over the lines that continue it.
fn body(lines: &[&str], f: Found) -> String {
    joined(lines, f, " ")
}

fn joined(lines: &[&str], f: Found, sep: &str) -> String {
    let first = lines.get(f.line).copied().unwrap_or("");
    // Start at the beginning of the sentence the marker is in (`CUDA out of memory`); a
    // message found by a later clause (a paste that kept only its middle) starts with its
    // paragraph.
    let mut s = String::new();
    if !first.contains("Tried to allocate") && f.format.is_torch_cache() {
        let start =
            (0..f.line).rev().take(MESSAGE_LINES).take_while(|&i| !lines[i].trim().is_empty()).last().unwrap_or(f.line);
        for l in &lines[start..f.line] {
            s.push_str(strip_prefix(l).trim());
            s.push_str(sep);
        }
    }
    // `at` is an offset in the marker's own line: a caller that starts a line earlier (a
    // message wrapped before its marker) may give a line shorter than it, read whole then.
    let start = first.get(..f.at).unwrap_or(first).rfind(": ").map_or(0, |i| i + 2);
    s.push_str(first[start..].trim());
    for l in lines.iter().skip(f.line + 1).take(MESSAGE_LINES) {
        // A paste's quote or heading marks (`> `, `# `) are not the message's.
        let t = strip_prefix(l).trim().trim_start_matches(['#', '>', ' ']);
        if t.is_empty() || t.starts_with("Traceback") || t.starts_with("File \"") || t.starts_with("During handling") {
            break;
        }
        // Another rank's message on the next line is its own, not this one's tail (two workers'
        // `torch.OutOfMemoryError: ... Tried to allocate ...` one after the other).
        if s.contains("Tried to allocate") && t.contains("Tried to allocate") {
            break;
        }
        s.push_str(sep);
        s.push_str(t);
    }
    s
}

/// Prefixes launchers put before each line: `[rank0]: `, `[default0]:`.
fn strip_prefix(l: &str) -> &str {
    let t = l.trim_start();
    if t.starts_with('[')
        && let Some(end) = t.find("]:")
    {
        let tag = &t[1..end];
        if tag.starts_with("rank") || tag.starts_with("default") {
            return &t[end + 2..];
        }
    }
    l
}

/// The text after `key`, when there.
fn after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    s.find(key).map(|i| &s[i + key.len()..])
}

/// A figure at the start of `s` (`22.78 GiB`, `6.00MiB`, `0 bytes`, `17.47G`).
fn leading_figure(s: &str) -> Option<u64> {
    let s = s.trim_start().trim_start_matches("**").trim_start();
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    if num_end == 0 {
        return None;
    }
    let rest = &s[num_end..];
    let unit_start = rest.len() - rest.trim_start().len();
    let unit_len = rest[unit_start..].find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len() - unit_start);
    let figure = &s[..num_end + unit_start + unit_len];
    parse_figure(figure).or_else(|| past_u64(figure))
}

/// A figure past what 64 bits count as the most they do, so that the checks of the figures
/// see it beyond any device rather than no figure at all. (PyTorch's process figure of 2^64
/// bytes, `17179869184.00 GiB`, is NVML's answer when it has none: its reader leaves it out.)
fn past_u64(figure: &str) -> Option<u64> {
    let split = figure.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let value: f64 = figure[..split].parse().ok()?;
    // (The figure with a unit's first letter: the checks above refused all else.)
    let power = "bkmgtpe".find(figure[split..].trim_start().chars().next()?.to_ascii_lowercase())?;
    (value.is_finite() && value * 1024f64.powi(power as i32) >= u64::MAX as f64).then_some(u64::MAX)
}

/// A whole number at the start of `s` with its thousands grouped by commas (`25,600,000`).
fn grouped_u64(s: &str) -> Option<u64> {
    let digits: String =
        s.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
    digits.parse().ok()
}

/// Whether the figure `s` starts with is printed in MiB or a finer unit (`127.31 MiB`,
/// `512.00 KiB`, `0 bytes`), not in GiB or beyond.
fn fine_unit(s: &str) -> bool {
    let s = s.trim_start();
    let rest = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.').trim_start();
    rest.len() < s.len() && ["MiB", "KiB", "MB", "KB", "B", "bytes", "byte"].iter().any(|u| rest.starts_with(u))
}

/// An accelerator runtime's allocator, in its words. Returns the request.
fn device_runtime(body: &str, m: &mut Message) -> Option<u64> {
    let number = |key: &str| after(body, key).map(str::trim_start).and_then(leading_u64);
    if body.trim_start().starts_with("Requested:") && body.contains(" Free:") && body.contains(" Total:") {
        // DeepSpeed's inference workspace: what it asked for, the device's free and total.
        m.free = number(" Free:");
        m.total = number(" Total:");
        return number("Requested:");
    }
    if body.contains("is more than total mem size") {
        // MindSpore: `TotalUsedMemStatistics : U plus TotalUsedByEventMemStatistics : E and
        // plus alloc size : A is more than total mem size : T`.
        let used = number("TotalUsedMemStatistics :")?;
        let event = number("TotalUsedByEventMemStatistics :").unwrap_or(0);
        m.allocated = Some(used.saturating_add(event));
        m.total = number("total mem size :");
        m.free = m.total.map(|t| t.saturating_sub(used.saturating_add(event)));
        return number("alloc size :");
    }
    if let Some(rest) = after(body, " bytes of scratch space, but only ") {
        // TensorRT: the workspace pool's limit, which the request passes whatever else is free.
        m.allowed = leading_u64(rest);
        return exact_before(body, " bytes of scratch space");
    }
    if let Some(rest) = after(body, " in region that is ") {
        // TVM's Relax VM: a storage region its compiler planned (`storage allocation failure,
        // attempted to allocate 16785408 at offset 0 in region that is 16777216bytes`): the
        // region is the limit, whatever the device has free.
        m.allowed = leading_u64(rest);
        return number("attempted to allocate ");
    }
    if let Some(rest) = after(body, "Not enough space to allocate ") {
        // Tenstorrent: a buffer over banks, `each bank needs to store N B, but bank size is S B
        // (allocated: A B, free: F B, largest free block: L B)`: one bank's share is what must fit.
        let per_bank = number("each bank needs to store ");
        m.total = number("bank size is ");
        m.allocated = number("(allocated: ");
        m.free = number("free: ");
        m.largest_free = number("largest free block: ");
        return per_bank.or_else(|| leading_u64(rest));
    }
    // ggml's Vulkan backend: `Device memory allocation of size N failed`; DirectML: `Could not
    // allocate tensor with N bytes. There is not enough GPU video memory available!`.
    if let Some(n) = number("Device memory allocation of size ").or_else(|| number("Could not allocate tensor with ")) {
        return Some(n);
    }
    // Sophon: `bm_alloc_gmem failed, dev_id = 0, size = 0x639c00`.
    let hex = after(body, "bm_alloc_gmem failed")
        .and_then(|r| after(r, "size = 0x"))
        .map(|h| h.split(|c: char| !c.is_ascii_hexdigit()).next().unwrap_or(""));
    if let Some(hex) = hex {
        return u64::from_str_radix(hex, 16).ok();
    }
    // Any other runtime: its figures named by the words beside them (`requested 512 MB, free
    // 100 MB, total 8 GB`), else a count of bytes on the failing line (`allocate 1048576
    // bytes`, `of 4004bytes`).
    if let Some(q) = named_figures(body, m) {
        return Some(q);
    }
    let line = body.lines().next().unwrap_or("");
    let at = line
        .find(" bytes")
        .or_else(|| line.find("bytes").filter(|&i| i > 0 && line.as_bytes()[i - 1].is_ascii_digit()))?;
    let digits: String = line[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    grouped_u64(&digits)
}

/// A runtime's figures in words of no known format, read by the words beside them: the
/// free memory and the total into `m` where it has none, and the request returned.
fn named_figures(text: &str, m: &mut Message) -> Option<u64> {
    let f = figures::labelled(text);
    let request = figures::first(&f, Role::Request).or_else(|| figures::first(&f, Role::Need))?;
    m.free = m.free.or(figures::first(&f, Role::Free));
    m.total = m.total.or(figures::first(&f, Role::Total));
    Some(request)
}

/// Whether `line` holds any of `words`.
fn any_of(line: &str, words: &[&str]) -> bool {
    words.iter().any(|w| line.contains(w))
}

/// Words that say memory ran out, in any runtime's spelling.
const RAN_OUT: &[&str] = &[
    "out of memory",
    // CUDA.jl: `ERROR: Out of GPU memory`, `OutOfGPUMemoryError`.
    "out of gpu memory",
    "outofgpumemory",
    // MindSpore: `Device(id:0) memory isn't enough and alloc failed`.
    "memory isn't enough",
    "memory is not enough",
    // Other runtimes' and applications' words for the same.
    "insufficient gpu memory",
    "not enough gpu memory",
    "not enough vram",
    "insufficient vram",
    "out of vram",
    "out of video memory",
    "memory exhausted",
    // MIOpen: `Memory not available to allocate buffer: 655360000`.
    "memory not available to allocate",
    "memory is insufficient",
    "memory insufficient",
    // Chinese and Japanese for the device's memory short (显存: video memory).
    "显存不足",
    "显存溢出",
    // (内存: memory, the host's unless a device is named on the line: `CUDA 内存不足`.)
    "内存不足",
    "内存溢出",
    "gpuメモリ不足",
    "ビデオメモリ不足",
    "allocation failed",
    "alloc failed",
    "failed to alloc",
    "outofmemory",
    "out_of_memory",
    "out of device memory",
    "outofdevicememory",
    "not enough memory",
    "insufficient memory",
    "failed to allocate",
    "memory allocation failed",
    "cannot allocate",
    "could not allocate",
    "unable to allocate",
];
/// Words that put it on a device.
/// (`thrust::`: thrust's exceptions, `thrust::system::system_error`, are its CUDA backend's.)
const ON_A_DEVICE: &[&str] = &[
    "gpu",
    "cuda",
    "device",
    "vram",
    "video memory",
    "hbm",
    "npu",
    "xpu",
    "rocm",
    "hip",
    "metal",
    "vulkan",
    "opencl",
    "thrust::",
    // OneFlow's exceptions (`oneflow::RuntimeException` ... `what(): Error: out of memory`).
    "oneflow::",
    "显存",
    // wgpu and WebGPU (Burn, Bevy, browsers).
    "wgpu",
    "webgpu",
    // XLA's runtime (its CPU backend's failures are a look-alike's words).
    "xla",
    // Apple's, Google's, Cambricon's, Intel Gaudi's and Hygon's devices, by their short names.
    "mps",
    "tpu",
    "mlu",
    "hpu",
    "dcu",
    // A card by its maker's or its line's name (`Initializing NVIDIA GeForce GTX 1060`).
    "nvidia",
    "geforce",
    "radeon",
    "quadro",
    "rtx",
    "gtx",
];
/// Words that put it in the host's memory instead.
const ON_THE_HOST: &[&str] = &["host", "cpu", " ram", "system memory", "swap", "page file", "virtual memory", "heap"];
/// Words of a failure (not a log's note that it retried).
const FAILED: &[&str] =
    &["error", "fail", "exception", "panic", "abort", "fatal", "could not", "cannot", "unable", "exhausted"];

/// A line in no runtime's words above that still says a device ran out of memory and failed
/// (a runtime oomscope has not met): read as an accelerator runtime's, without figures but
/// its request where the line counts bytes. Never where a look-alike's words are. (A KV cache
/// that could not be allocated counts as the device's: llama.cpp's `failed to allocate buffer
/// for kv cache` alone; a host buffer's failure before it is a look-alike's words.)
fn generic(lines: &[&str]) -> Option<Found> {
    let has = any_of;
    // A last line cut inside the words (`RuntimeError: CUDA out of mem`) on a device's line is
    // one, as far as it goes.
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let cut = last.filter(|&i| {
        (cut_in_oom_words(lines[i]) || device_then_cut_words(lines[i])) && on_a_device(&lines[i].to_ascii_lowercase())
    });
    if cut.is_some() && (0..lines.len()).all(|i| Some(i) == cut || !any_of(&lines[i].to_ascii_lowercase(), RAN_OUT)) {
        return cut.map(|line| Found { format: MessageFormat::DeviceRuntime, line, at: 0 });
    }
    // TensorFlow's `OOM when allocating tensor` cut inside its words at the paste's end
    // (`Error: OOM when allocating tenso`): its message, as far as it goes.
    if let Some(line) = last.filter(|&i| cut_tf_oom(lines[i])) {
        return Some(Found { format: MessageFormat::TfTensor, line, at: 0 });
    }
    let line = (0..lines.len())
        .find(|&i| {
            // (Only a line with a word the checks below could start from is read further: on 50 MB
            // of short lines, lower-casing and searching every one took twice the time.)
            if !maybe_memory_words(lines[i]) {
                return false;
            }
            let l = lines[i].to_ascii_lowercase();
            // The device may be named on the lines just above (`what(): .../cuda_alloc.cpp:` then
            // `error: out of memory`).
            let around = || lines[i.saturating_sub(2)..i].join(" ").to_ascii_lowercase();
            let t = l.trim_start();
            // (Not prose: advice, a question, a run that went well.)
            // (Nor a warning that says itself it is none: TensorFlow's `... The caller indicates
            // that this is not a failure`.)
            let prose = t.starts_with("if ")
                || t.starts_with("when ")
                || ["?", "avoid", "prevent", "successfully", "this is not a failure"].iter().any(|w| l.contains(w));
            // (Blender's Cycles: `out of GPU and shared host memory`, the device's memory and the
            // mapped host memory it overflows into: the device's.)
            let l = host_as_overflow(&l);
            (has(&l, RAN_OUT) || ran_out_of_some(&l) || allocation_failed(&l) || oom_word(&l))
            && !prose
            && mentions_memory(&l)
            && (on_a_device(&l) || on_a_device(&around()) || l.contains("for kv cache") || device_status(lines[i]))
            // (`CudaCustomAllocator out of memory`: a device's allocator named just before the
            // words is the failure; not prose's `the GPU ran out of memory`. A runtime's message
            // that begins with the words says so itself: `Out of memory in cuStreamCreate(...)`,
            // hashcat's `* Device #1: Not enough allocatable device memory for this attack.`)
            && (has(&l, FAILED)
                || glog_error(lines[i])
                || named_out_of_memory(&l)
                || named_oom(&l)
                || l.contains("out of gpu memory")
                || opens_a_message(&l)
                // (The device the subject: `Device does not provide enough allocatable
                // device-memory`, `GPU does not have enough memory`.)
                || ["not provide enough", "not have enough", "n't have enough"].iter().any(|w| l.contains(w)))
            && !on_the_host(&l)
            && other_status(lines[i]).is_none()
        })
        .or_else(|| bare_out_of_memory(lines))?;
    Some(Found { format: MessageFormat::DeviceRuntime, line, at: 0 })
}

/// `out of memory` alone on its line, CUDA's and HIP's words for an allocation's failure as a
/// program prints them (MXNet's operators, a CUDA sample's `checkCudaErrors`), where the paste
/// names a device; not after a kernel's fault (an allocation that fails after an illegal
/// access is that fault's).
fn bare_out_of_memory(lines: &[&str]) -> Option<usize> {
    let bare = |l: &str| {
        l.trim()
            .trim_matches(|c: char| "`*>\"'".contains(c) || c.is_whitespace())
            .trim_end_matches('.')
            .eq_ignore_ascii_case("out of memory")
    };
    let at = lines.iter().position(|l| bare(l))?;
    let faulted = lines[..at].iter().any(|l| ROOT_CAUSES.iter().any(|(m, _)| l.contains(m)));
    let device = lines.iter().any(|l| on_a_device(&l.to_ascii_lowercase()));
    (device && !faulted).then_some(at)
}

/// A line that ends inside TensorFlow's `OOM when allocating tensor`, from `OOM when
/// allocating` on.
fn cut_tf_oom(l: &str) -> bool {
    const WORDS: &str = "OOM when allocating tensor";
    ends_inside(line_end(l), WORDS, "OOM when allocating".len()..WORDS.len() + 1)
}

/// The line without trailing space and the marks a paste closes it with (backticks, bold,
/// quotes).
fn line_end(l: &str) -> &str {
    l.trim_end().trim_end_matches(['`', '*', '"', '\''])
}

/// `t` ends with the first `k` bytes of `words`, for a `k` in `lengths`, starting a word: a
/// line cut inside those words.
fn ends_inside(t: &str, words: &str, mut lengths: std::ops::Range<usize>) -> bool {
    lengths.any(|k| {
        t.strip_suffix(&words[..k])
            .is_some_and(|head| head.chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric()))
    })
}

/// Rust's global allocator failing (`memory allocation of 2097152 bytes failed`, then an abort:
/// a tokenizer, a data loader written in Rust): the host's memory.
fn rust_alloc(l: &str) -> Option<&'static str> {
    let t = l.trim();
    (t.starts_with("memory allocation of ") && t.trim_end_matches('.').ends_with(" bytes failed")).then_some(
        "a Rust program's allocator failing (`memory allocation of N bytes failed`: host memory, RAM): the \
         GPU's memory is not involved",
    )
}

/// DeepSpeed's inference workspace refused: `Requested: N`, `Free: N`, `Total: N` on lines of
/// their own from `line`, each a count of bytes.
fn deepspeed_workspace(lines: &[&str], line: usize) -> Option<()> {
    let field = |i: usize, key: &str| {
        lines.get(i).and_then(|l| l.trim().strip_prefix(key)).and_then(|r| r.trim().parse::<u64>().ok())
    };
    field(line, "Requested:")?;
    field(line + 1, "Free:")?;
    field(line + 2, "Total:").map(|_| ())
}

/// TGI's warm-up failing: `Not enough memory to handle 4096 prefill tokens` (a paste may cut
/// it at `prefil`). `Some` with the tokens where they are printed.
fn tgi_warmup(l: &str) -> Option<Option<u64>> {
    let rest = after(l, "Not enough memory to handle ")?;
    let (n, words) = rest.split_once(' ')?;
    ("prefill tokens".starts_with(words.trim_end()) || words.starts_with("prefill tokens")).then(|| n.parse().ok())
}

/// An engine's own check that its KV cache does not fit, in words of its own: the line that
/// says memory ran out names the KV cache, and it or the two lines below give what is required
/// and what is available (vllm.rs: `KVCache allocation failed: Insufficient GPU memory for
/// KVCache allocation.` then `Available: 29353.63 MB, Required: 131072.00 MB, Reserved: …`).
/// The two figures, required first.
fn kv_cache_check(lines: &[&str], line: usize) -> Option<(u64, u64)> {
    let squeezed = |l: &str| l.to_ascii_lowercase().replace(['_', '-'], " ").replace("kvcache", "kv cache");
    if !squeezed(lines.get(line)?).contains("kv cache") {
        return None;
    }
    let around = lines[line..(line + 3).min(lines.len())].join(" ");
    let lower = around.to_ascii_lowercase();
    let figure = |words: &[&str]| {
        words.iter().find_map(|w| {
            let at = lower.find(w)? + w.len();
            leading_figure(around[at..].trim_start_matches([':', '=', ' ']))
        })
    };
    Some((figure(&["required", "needed"])?, figure(&["available"])?))
}

/// An engine's own check at start-up that what it must load does not fit, in words of its own:
/// what is available, and the parts it needs, summed (MLC-LLM: `Insufficient GPU memory error:
/// The available single GPU memory is 23669.327 MB, which is less than the sum of model weight
/// size (17851.479 MB) and temporary buffer size (15275.630 MB).`). The two figures, needed
/// first. (A budget of parts, not one allocation's request against the free memory, which
/// says nothing of the cause.)
fn engine_check(lines: &[&str], line: usize) -> Option<(u64, u64)> {
    let around = lines.get(line..(line + 2).min(lines.len()))?.join(" ");
    let lower = around.to_ascii_lowercase();
    let Some(sum) = lower.find("less than the sum of ") else {
        // In other words: what a model's load needs beside what is available (`Not enough GPU
        // memory to load the model: required 14.5 GiB, available 11.2 GiB`), with no one
        // allocation's request. (Not one step's own need: `Need: 1.5GB free, Have:0.1GB free`.)
        let near = lines.get(line..(line + 3).min(lines.len()))?.join(" ");
        let lower = near.to_ascii_lowercase();
        if !["model", "weight", "load", "engine", "checkpoint"].iter().any(|w| lower.contains(w)) {
            return None;
        }
        let f = figures::labelled(&near);
        return match (figures::first(&f, Role::Need), figures::first(&f, Role::Free), figures::first(&f, Role::Request))
        {
            (Some(need), Some(free), None) => Some((need, free)),
            _ => None,
        };
    };
    // The first figure within a few words after `available`.
    let at = lower[..sum].find("available")? + "available".len();
    let words = around[at..sum].split_whitespace().take(8).collect::<Vec<_>>();
    let available = words.windows(2).find_map(|w| parse_figure(&format!("{} {}", w[0], w[1].trim_end_matches(','))))?;
    // The parts: each figure in brackets after `sum of`.
    let parts: Vec<u64> = around[sum..]
        .split('(')
        .skip(1)
        .filter_map(|p| p.split(')').next())
        .filter_map(|p| leading_figure(p).filter(|_| p.trim().contains(' ') || p.trim().ends_with('B')))
        .collect();
    (!parts.is_empty()).then(|| (parts.iter().fold(0u64, |s, p| s.saturating_add(*p)), available))
}

/// `not enough allocatable device memory`, `out of the memory`: memory run out, in words with
/// others between (up to three; never `shared memory`, a kernel's per-block memory or the
/// host's /dev/shm).
pub(crate) fn ran_out_of_some(l: &str) -> bool {
    // (hashcat 3: `Device does not provide enough allocatable device-memory`.)
    [
        "not enough ",
        "insufficient ",
        "unsufficient ",
        "out of ",
        "not provide enough ",
        "not have enough ",
        "n't have enough ",
    ]
    .iter()
    .any(|head| {
        l.match_indices(head).any(|(at, _)| {
            let words: Vec<&str> = l[at + head.len()..].split_whitespace().take(4).collect();
            let memory = words.iter().position(|w| {
                w.starts_with("memory")
                    || w.starts_with("device-memory")
                    || w.starts_with("vram")
                    || w.trim_end_matches([',', '.']) == "ram"
            });
            memory.is_some_and(|m| !words[..m].contains(&"shared"))
        })
    })
}

/// Words of memory running out that a cut may have left half of at a paste's end, and how
/// much of them must be left to say so (past their first word, which alone says little:
/// `failed`, `out of`).
const CUT_OOM_WORDS: &[(&str, usize)] = &[
    ("out of memory", 8),
    ("outofmemoryerror", 6),
    ("resource_exhausted", 10),
    ("resourceexhausted", 9),
    ("cudaerrormemoryallocation", 10),
    ("cuda_error_out_of_memory", 12),
    ("failed to allocate", 11),
    ("cannot allocate", 8),
    ("could not allocate", 11),
    ("not enough memory", 12),
    ("insufficient memory", 14),
];

/// The paste's last line ends inside words of memory running out (`CUDA error: out of memo`,
/// `torch.cuda.OutOfMem`): what it was cut from was an out-of-memory error, whatever the rest
/// reads as.
pub(crate) fn cut_in_oom_words(text: &str) -> bool {
    let Some(last) = text.lines().rev().find(|l| !l.trim().is_empty()) else { return false };
    let l = line_end(last).to_ascii_lowercase();
    CUT_OOM_WORDS.iter().any(|&(w, least)| ends_inside(&l, w, least..w.len()))
}

/// A line that may hold words of memory running out, checked without allocating: ASCII words
/// in any case (`out`, `alloc`, `oom`, `enough`, `sufficient`, `memory`), or any non-ASCII text
/// (the Chinese and Japanese words).
fn maybe_memory_words(l: &str) -> bool {
    !l.is_ascii()
        || ["out", "alloc", "oom", "enough", "sufficient", "memory", "exhaust"]
            .iter()
            .any(|w| contains_ignoring_case(l, w))
}

/// `RuntimeError: CUDA out o`: a device's name, then the start of `out of memory` where the
/// paste ends.
fn device_then_cut_words(l: &str) -> bool {
    let l = line_end(l).to_ascii_lowercase();
    let Some(at) = l.rfind(" out") else { return false };
    let tail = &l[at + 1..];
    // (The device's word just before, or its runtime's error: `CUDA error: out o`, no other
    // of CUDA's errors starting so.)
    let device = |w: &str| any_of(w, &["cuda", "gpu", "hip", "mps", "xpu", "npu"]);
    let mut before = l[..at].split_whitespace().rev();
    "out of memory".starts_with(tail)
        && match before.next() {
            Some("error:") => before.next().is_some_and(device),
            w => w.is_some_and(device),
        }
}

/// `memory allocation on GPU failed`: an allocation, then a few words on in the same clause,
/// its failure (not `allocation succeeded; later the download failed`).
fn allocation_failed(l: &str) -> bool {
    l.match_indices("alloc").any(|(at, _)| {
        // (A sentence's end stops it; a call's `cudaMalloc(p, size) == cudaSuccess' failed` does
        // not.)
        let mut words = l[at..].split_whitespace();
        let clause_ends = |w: &str| w.ends_with([';', '.']);
        words.next();
        for w in words.take(5) {
            if w.starts_with("fail") {
                return true;
            }
            if clause_ends(w) {
                return false;
            }
        }
        false
    })
}

/// An accelerator API's status for its memory running out (`VPI_ERROR_OUT_OF_MEMORY`,
/// `CUDA_ERROR_OUT_OF_MEMORY`): such enums are the device's (the host's say `OUT_OF_HOST_MEMORY`).
fn device_status(l: &str) -> bool {
    l.match_indices("_ERROR_OUT_OF_MEMORY").any(|(at, _)| {
        l[..at].rsplit(|c: char| !(c.is_ascii_uppercase() || c == '_')).next().is_some_and(|api| !api.is_empty())
    })
}

/// A glog line at the error or fatal level (`E itex/core/devices/bfc_allocator.cc:101] ...`,
/// `F0101 00:00:00.000000 1234 file.cc:71] ...`): the program says it failed.
fn glog_error(l: &str) -> bool {
    let t = l.trim_start();
    let Some(rest) = t.strip_prefix('E').or_else(|| t.strip_prefix('F')) else { return false };
    let head = rest.split(']').next().unwrap_or("");
    (rest.starts_with(' ') || rest.starts_with(|c: char| c.is_ascii_digit()))
        && rest.contains("] ")
        && head.contains(".c")
        && head.contains(':')
}

/// `oom` as a word (`CUDA OOM at step 100`), not inside one (`room`, `zoom`).
fn oom_word(l: &str) -> bool {
    l.match_indices("oom").any(|(at, _)| {
        let before = l[..at].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
        let after = l[at + 3..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
        before && after
    })
}

/// `CUDA OOM`, `GPU OOM`: a device named just before the word.
fn named_oom(l: &str) -> bool {
    oom_word(l)
        && l.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[1].trim_matches(|c: char| !c.is_ascii_alphanumeric()) == "oom" && any_of(w[0], ON_A_DEVICE))
}

/// The words that say memory ran out open the line's message: at its start, or after a
/// label's colon or a log's bracket (`* Device #1: Not enough ...`, `Out of memory in ...`).
fn opens_a_message(l: &str) -> bool {
    let at = ["out of ", "not enough ", "insufficient "].iter().filter_map(|w| l.find(w)).min();
    at.is_some_and(|at| {
        let before = l[..at].trim_end().trim_end_matches(['*', '`', '"', '\'', '>']).trim_end();
        before.is_empty() || before.ends_with(':') || before.ends_with(']')
    })
}

/// The line with the host memory a device's overflows into (`gpu and shared host memory`)
/// named as the device's alone (`l` lower-cased).
fn host_as_overflow(l: &str) -> String {
    let mut out = l.to_string();
    if !(l.contains("host") || l.contains("system")) {
        return out;
    }
    for device in ["gpu", "device", "vram"] {
        for overflow in [" and shared host memory", " and host memory", " and shared system memory"] {
            out = out.replace(&format!("{device}{overflow}"), &format!("{device} memory"));
        }
    }
    out
}

/// The host named in `l` (lower-cased) as a word (`host`, not `hostname=` or the machine's
/// name after it, `hostname=iw-log-host`; `cpu`, not a longer name holding it).
fn on_the_host(l: &str) -> bool {
    let l = l.split_whitespace().filter(|w| !w.starts_with("hostname")).collect::<Vec<_>>().join(" ");
    let l = l.as_str();
    ON_THE_HOST.iter().any(|w| {
        let w = w.trim_start();
        l.match_indices(w).any(|(at, _)| {
            let before = l[..at].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
            let after = l[at + w.len()..].chars().next().is_none_or(|c| !c.is_ascii_alphabetic());
            // (Not a part of a name inside an identifier: `<cryptonight_extra_cpu_init>`, the
            // function that set up a miner's kernel on the device.)
            let inside = l[..at].ends_with('_') && l[at + w.len()..].starts_with('_');
            before && after && !inside
        })
    })
}

/// A device named in `l` (lower-cased): its short names (`hip`, `npu`) only at a word's start
/// (not `shipment`).
fn on_a_device(l: &str) -> bool {
    ON_A_DEVICE.iter().any(|w| {
        l.match_indices(w).any(|(at, _)| w.len() > 4 || at == 0 || !l.as_bytes()[at - 1].is_ascii_alphanumeric())
    })
}

/// The line says what could not be had is memory (`failed to allocate device number` is not).
fn mentions_memory(l: &str) -> bool {
    // (`array`: Theano's `CudaNdarray_ZEROS: allocation failed.`, an array on the device.)
    ["mem", "buffer", "byte", "tensor", "array", "vram", "cache", "pool", "malloc", "显存", "メモリ"]
        .iter()
        .any(|w| l.contains(w))
        || oom_word(l)
        // A size: digits, then a unit (`4 gb`, `896mb`).
        || ["gb", "mb", "gib", "mib", "kb", "kib"].iter().any(|u| {
            l.match_indices(u).any(|(at, _)| {
                l[..at].trim_end().ends_with(|c: char| c.is_ascii_digit())
                    && l.as_bytes().get(at + u.len()).is_none_or(|c| !c.is_ascii_alphabetic())
            })
        })
}

/// `... CudaCustomAllocator out of memory`, `GPU out of memory`: the word just before the
/// words names a device (`l` lower-cased).
fn named_out_of_memory(l: &str) -> bool {
    l.match_indices("out of memory")
        .any(|(at, _)| l[..at].split_whitespace().next_back().is_some_and(|w| any_of(w, ON_A_DEVICE)))
}

/// The old form's clauses.
const OLD_FORM_LABELS: &[&str] =
    &["total capacity", "already allocated", " free", " allowed", "reserved in total by PyTorch", " cached", " cache"];

/// `8.63GiB resrved in total by Pytorch`: a clause whose words are a label of the old form
/// retyped with a letter or two wrong (at most one in eight), as that label; else as it is.
fn relabelled(part: &str) -> String {
    if OLD_FORM_LABELS.iter().any(|l| part.ends_with(l)) {
        return part.to_string();
    }
    // The figure and its unit, then the words.
    let Some(unit_end) =
        part.find(|c: char| c.is_ascii_alphabetic()).and_then(|u| part[u..].find(char::is_whitespace).map(|w| u + w))
    else {
        return part.to_string();
    };
    let words = part[unit_end..].trim().to_ascii_lowercase();
    let close = OLD_FORM_LABELS.iter().find(|label| {
        let label = label.trim().to_ascii_lowercase();
        label.len() >= 8 && edit_distance(&words, &label) <= label.len() / 8
    });
    match close {
        Some(label) => format!("{} {}", &part[..unit_end], label.trim()),
        None => part.to_string(),
    }
}

/// Levenshtein's distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    edits(&a.chars().collect::<Vec<_>>(), b, false)
}

/// `part` (`3.66 GiB reserved i n total by PyTorch`) with the one space removed that a line
/// break mid-word left where a paste's repair joined the halves with one, when that makes it
/// end in a clause of the old form; else as it is.
fn mended(part: &str) -> String {
    if OLD_FORM_LABELS.iter().any(|l| part.ends_with(l)) {
        return part.to_string();
    }
    let figure = leading_figure(part);
    part.match_indices(' ')
        .map(|(i, _)| format!("{}{}", &part[..i], &part[i + 1..]))
        .find(|c| OLD_FORM_LABELS.iter().any(|l| c.ends_with(l)) && leading_figure(c) == figure)
        .unwrap_or_else(|| part.to_string())
}

/// `part` (`6.83 GiB rese`) with its words completed to the one of `words` they begin, when
/// they begin one (at least three letters); else as it is.
fn completed(part: &str, words: &[&str]) -> String {
    let mut it = part.splitn(3, ' ');
    let (Some(n), Some(unit), tail) = (it.next(), it.next(), it.next().unwrap_or("")) else { return part.to_string() };
    let tail = tail.trim();
    match words.iter().find(|w| tail.len() >= 3 && w.starts_with(tail) && w.len() > tail.len()) {
        Some(w) => format!("{n} {unit} {w}"),
        None => part.to_string(),
    }
}

/// The figure a paste ends in, its unit cut to its first letters (`289.29 M`, `1.5 Gi`):
/// read in the unit those letters begin. None when anything follows it.
/// Where PaddlePaddle 1.x's legacy allocator's words start on `l`: `Cannot allocate X in GPU
/// N, available Y`.
fn paddle_legacy(l: &str) -> Option<usize> {
    let at = l.find("Cannot allocate ")?;
    let rest = &l[at..];
    let gpu = rest.find(" in GPU ")?;
    rest[gpu..].contains(", available ").then_some(at)
}

/// A figure at the start of `s` whose unit runs into the next word, as a paste that lost a
/// line break leaves it (`5.937500MBtotal`): the longest unit it starts with.
fn glued_figure(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let digits = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let rest = &s[digits..];
    ["bytes", "KiB", "MiB", "GiB", "TiB", "kB", "KB", "MB", "GB", "TB", "B"]
        .iter()
        .find(|u| rest.starts_with(**u))
        .and_then(|u| parse_figure(&format!("{} {u}", &s[..digits])))
}

/// The figure at the start of `s` when all that follows it is the start of `label`, the words
/// that name it, which a paste's end cut short (`217.26 MiB is reserve`).
fn cut_label(s: &str, label: &str) -> Option<u64> {
    let s = s.trim();
    let mut words = s.splitn(3, ' ');
    let (n, unit) = (words.next()?, words.next()?);
    let rest = words.next().unwrap_or("");
    // (In any case: a lower-cased paste's `reserved by pyt`, which no word's recasing restores.)
    let begins = label.get(..rest.len()).is_some_and(|l| l.eq_ignore_ascii_case(rest));
    (!rest.is_empty() && begins).then(|| parse_figure(&format!("{n} {unit}"))).flatten()
}

fn cut_figure(s: &str) -> Option<u64> {
    let s = s.trim();
    let (n, unit) = s.split_once(' ')?;
    if unit.contains(' ') || unit.is_empty() {
        return None;
    }
    let unit = unit.to_ascii_lowercase();
    let full = ["GiB", "MiB", "KiB", "TiB"].into_iter().find(|u| u.to_ascii_lowercase().starts_with(&unit))?;
    parse_figure(&format!("{n} {full}"))
}

/// Figures in `body` that are not sizes, as printed: a negative number, `nan` or `inf`, or
/// a number with an exponent, before a unit (`-2.00 GiB`, `nan GiB`, `1e308 GiB`).
fn unreadable_figures(body: &str) -> Vec<String> {
    const UNITS: &[&str] = &["B", "bytes", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"];
    let words: Vec<&str> = body.split_whitespace().collect();
    let mut out = Vec::new();
    for w in words.windows(2) {
        let unit = w[1].trim_end_matches(['.', ',', ';', ')']);
        if !UNITS.contains(&unit) {
            continue;
        }
        let n = w[0].trim_start_matches(['(', '*', '`']);
        let lower = n.to_ascii_lowercase();
        let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
        let negative = n.strip_prefix('-').is_some_and(number);
        let not_finite = matches!(lower.trim_start_matches(['-', '+']), "nan" | "inf" | "infinity");
        let exponent = lower.split_once('e').is_some_and(|(m, e)| {
            number(m) && !e.is_empty() && e.trim_start_matches(['-', '+']).chars().all(|c| c.is_ascii_digit())
        });
        if (negative || not_finite || exponent) && out.len() < 8 {
            out.push(format!("{n} {unit}"));
        }
    }
    out
}

fn leading_u64(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

/// The figure just before `key` (`9.87 GiB already allocated`).
fn figure_before(s: &str, key: &str) -> Option<u64> {
    let i = s.find(key)?;
    let head = s[..i].trim_end();
    // The figure is the last two words (`9.87 GiB`) or the last one (`6.00MiB`).
    let words: Vec<&str> = head.rsplitn(3, [' ', ';', '(']).collect();
    if words.len() >= 2
        && let Some(v) = parse_figure(&format!("{} {}", words[1], words[0]))
    {
        return Some(v);
    }
    words.first().and_then(|w| parse_figure(w))
}

/// The integer just before `key` (`14942208 bytes available` → 14942208).
fn exact_before(s: &str, key: &str) -> Option<u64> {
    let head = s[..s.find(key)?].trim_end();
    // (After the character before the digits, which may be more than a byte: `报错8`.)
    let start = head.char_indices().rev().find(|(_, c)| !c.is_ascii_digit()).map_or(0, |(i, c)| i + c.len_utf8());
    head[start..].parse().ok()
}

/// A `Stats:` figure logged after the message (`InUse:  9984`), in bytes.
fn stat_after(text: &str, label: &str) -> Option<u64> {
    after(text, label).and_then(leading_u64)
}

/// `(33554432 bytes) from device` → 33554432.
fn exact_bytes_before(s: &str, key: &str) -> Option<u64> {
    let i = s.find(key)?;
    let head = &s[..i];
    let open = head.rfind('(')?;
    head[open + 1..].trim().parse().ok()
}

/// PyTorch's caching allocator, every era. Returns the request.
fn torch_cache(body: &str, m: &mut Message) -> Option<u64> {
    // R's torch (lantern) and hand-retyped messages spell it `Pytorch`.
    let respelled;
    let body = if body.contains("by Pytorch") {
        respelled = body.replace("by Pytorch", "by PyTorch");
        respelled.as_str()
    } else {
        body
    };
    m.format = if body.contains("total capacty") {
        MessageFormat::TorchCapacty
    } else if body.contains("total capacity of") || body.contains("reserved by PyTorch but unallocated") {
        MessageFormat::TorchCapacity
    } else if body.contains(" cached") {
        MessageFormat::TorchCached
    } else if body.contains("max_split_size_mb") {
        MessageFormat::TorchMaxSplitHint
    } else {
        MessageFormat::TorchReserved
    };
    m.suggests_expandable = body.contains("expandable_segments");
    m.suggests_max_split = body.contains("max_split_size_mb");
    let request =
        if body.contains("Tried to allocate more than 1EB") || body.contains("Tried to allocate more than 1eb") {
            Some(1u64 << 60)
        } else {
            after(body, "Tried to allocate ").and_then(leading_figure)
        };
    // Forks for other accelerators keep the old form with their device's name: Ascend's
    // `(NPU 3; ...)`, Intel's, Cambricon's.
    let old_form = ["GPU", "NPU", "XPU", "MLU", "HPU", "DCU"]
        .iter()
        .find_map(|d| after(body, &format!("({d} ")).filter(|r| leading_u64(r).is_some()).map(|r| (*d, r)));
    if let Some((kind, rest)) = old_form {
        // Which of free, cached, reserved and allocated were printed in MiB or finer.
        let (mut free_fine, mut cached_fine, mut reserved_fine, mut allocated_fine) = (false, false, false, false);
        // ≤ 2.0: `(GPU 0; 10.92 GiB total capacity; 9.87 GiB already allocated; 1.44 MiB free; ...)`.
        m.device = leading_u64(rest).map(|n| format!("{kind} {n}"));
        let inside = rest.split(')').next().unwrap_or(rest);
        let parts: Vec<&str> = inside.split(';').skip(1).collect();
        for (i, part) in parts.iter().enumerate() {
            let p = part.trim();
            let v = leading_figure(p);
            // The last figure of a paste cut short, its words cut (`6.83 GiB rese`): the word
            // it began is the one it was.
            let cut = i + 1 == parts.len() && !rest.contains(')');
            let p = if cut {
                completed(p, &["reserved in total by PyTorch", "cached", "free", "already allocated"])
            } else {
                relabelled(&mended(p))
            };
            let p = p.as_str();
            if p.ends_with("total capacity") {
                m.total = v;
            } else if p.ends_with("already allocated") {
                m.allocated = v;
                allocated_fine = fine_unit(p);
            } else if p.ends_with(" free") {
                m.free = v;
                free_fine = fine_unit(p);
            } else if p.ends_with(" allowed") {
                m.allowed = v;
            } else if p.ends_with("reserved in total by PyTorch") {
                m.reserved = v;
                reserved_fine = fine_unit(p);
            } else if p.ends_with(" cached") || p.ends_with(" cache") {
                // Cached = reserved minus allocated.
                m.reserved = v.and_then(|c| Some(c.saturating_add(m.allocated?)));
                cached_fine = fine_unit(p);
            }
        }
        m.fine_figures = free_fine && (cached_fine || (reserved_fine && allocated_fine));
    } else {
        // 2.1+: sentences.
        m.device = after(body, "out of memory. Tried to allocate ")
            .and_then(|r| r.find(" has a total capac").map(|i| &r[..i]))
            .and_then(|r| r.rfind("GPU ").map(|i| r[i..].trim().to_string()))
            .or_else(|| after(body, ". GPU ").and_then(leading_u64).map(|n| format!("GPU {n}")));
        m.total =
            after(body, "total capacty of ").or_else(|| after(body, "total capacity of ")).and_then(leading_figure);
        m.free = after(body, " of which ").and_then(leading_figure);
        m.fine_figures = after(body, " of which ").is_some_and(fine_unit)
            && after(body, " is allocated by PyTorch, and ").is_some_and(fine_unit);
        m.process = after(body, "this process has ").and_then(leading_figure);
        // (NVML's no-answer, 2^64 bytes: no measure, left out.)
        if m.process == Some(u64::MAX) {
            m.process = None;
            m.process_unanswered = true;
        }
        m.allowed = figure_before(body, " allowed;");
        m.allocated = after(body, "Of the allocated memory ").and_then(leading_figure);
        m.private_pools = figure_before(body, " allocated in private pools");
        // (A paste cut inside the last figure keeps its unit's first letter: `and 289.29 M`; one
        // cut inside the words after it keeps the figure whole: `and 217.26 MiB is reserve`.)
        let unallocated = figure_before(body, " is reserved by PyTorch but unallocated").or_else(|| {
            after(body, " is allocated by PyTorch, and ")
                .and_then(|r| cut_figure(r).or_else(|| cut_label(r, "is reserved by PyTorch but unallocated")))
        });
        m.reserved = unallocated.and_then(|u| Some(u.saturating_add(m.allocated?)));
        let mut rest = body;
        while let Some(r) = after(rest, "Process ") {
            if let Some(pid) = leading_u64(r)
                && let Some(bytes) = after(r, " has ").and_then(leading_figure)
                && r.find(" has ").is_some_and(|i| i < 24)
            {
                m.processes.push(ProcessMemory { pid, bytes, this: false });
            }
            rest = r;
        }
        if m.process.is_none() && !m.processes.is_empty() {
            // In a container PyTorch cannot tell its own pid from NVML's, and lists itself as
            // another process: the one whose memory holds all that PyTorch reserved (or, the
            // reserved figure cut off, all the device's used memory and what PyTorch allocated).
            let used = m.total.zip(m.free).map(|(t, f)| t.saturating_sub(f));
            let holds = m.reserved.or(m.allocated.filter(|_| m.processes.len() == 1));
            if let Some(reserved) = holds
                && let Some(p) = m
                    .processes
                    .iter_mut()
                    .filter(|p| p.bytes >= reserved)
                    .filter(|p| m.reserved.is_some() || used.is_some_and(|u| u.abs_diff(p.bytes) < ROUNDING))
                    .min_by_key(|p| p.bytes - reserved)
            {
                p.this = true;
                m.process = Some(p.bytes);
            }
        }
    }
    request
}

/// PyTorch's cudaMallocAsync backend: one figure per line.
fn torch_async(body: &str, m: &mut Message) -> Option<u64> {
    let field = |key: &str| after(body, key).and_then(|r| leading_figure(r.trim_start().trim_start_matches(':')));
    m.device = after(body, "Allocation on device ").and_then(leading_u64).map(|n| format!("GPU {n}"));
    m.allocated = field("Currently allocated");
    m.total = field("Device limit");
    m.free = field("Free (according to CUDA)");
    // No limit prints as 2^64 bytes (`17179869184.00 GiB`).
    m.allowed = field("memory fraction)").filter(|&l| m.total.is_none_or(|t| l < t));
    field("Requested")
}

/// MPS: `MPS backend out of memory (MPS allocated: 7.23 GB, other allocations: 1.54 GB, max
/// allowed: 9.07 GB). Tried to allocate 896.00 MB on private pool.`
fn torch_mps(body: &str, m: &mut Message) -> Option<u64> {
    m.device = Some("MPS".into());
    m.allocated = after(body, "MPS allocated: ").and_then(leading_figure);
    let others = after(body, "other allocations: ").and_then(leading_figure);
    m.allowed = after(body, "max allowed: ").and_then(leading_figure);
    m.total = m.allowed;
    if let Some(o) = others {
        // Memory the process holds outside the MPS pool (Metal, other libraries): the
        // watermark counts it too.
        m.process = m.allocated.map(|a| a.saturating_add(o));
    }
    m.free = m.allowed.and_then(|l| Some(l.saturating_sub(m.process?)));
    after(body, "Tried to allocate ").and_then(leading_figure)
}

/// XLA's request: `Out of memory while trying to allocate 7406166528 bytes`, `... to allocate
/// 223.52GiB with allocator GPU_0_bfc` (newer XLA) or `Failed to allocate request for 2.99GiB
/// (3206250496B) on device ordinal 0`.
fn xla_request(body: &str) -> Option<u64> {
    if let Some(r) = after(body, "Out of memory while trying to allocate ") {
        return leading_figure(r).or_else(|| leading_u64(r));
    }
    let r = after(body, "Failed to allocate request for ")?;
    r.find('(').and_then(|i| leading_u64(&r[i + 1..])).or_else(|| leading_figure(r))
}

fn device_ordinal(body: &str) -> Option<String> {
    after(body, "on device ordinal ").and_then(leading_u64).map(|n| format!("GPU {n}"))
}

/// Where `key` starts a field in a line: at its start or after a space, a tab or a
/// launcher's prefix (`(MeshHostWorker pid=489) `).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = line[from..].find(key) {
        let at = from + i;
        if at == 0 || line[..at].ends_with([' ', '\t', ')', ']']) {
            return Some(&line[at + key.len()..]);
        }
        from = at + key.len();
    }
    None
}

/// The figure after `label` (and an optional `:`) on the first line that has it:
/// `  total allocation:   12.00MiB`, `    arguments        15.90G`.
fn labeled(lines: &[&str], label: &str) -> Option<u64> {
    lines.iter().find_map(|l| {
        let r = field(l, label)?;
        leading_figure(r.trim_start().trim_start_matches(':'))
    })
}

/// XLA's rematerialization that fell short: the program's need and the memory it was to fit
/// in (`below 67.69GiB (72678595712 bytes) ...; only reduced to 95.40GiB (102432320060 bytes)`).
fn rematerialized(lines: &[&str]) -> Option<XlaProgram> {
    let line = lines.iter().find(|l| l.contains("by rematerialization; only reduced to"))?;
    let bytes_in = |r: &str| r.find('(').and_then(|i| leading_u64(&r[i + 1..])).or_else(|| leading_figure(r));
    // (A limit below zero, `below -30.29GiB`: the device less the program's arguments and
    // outputs, these alone more than it; what the program may have beyond them is nothing.)
    // (Its words as a paste may break them, `use be low 24.11GiB`: the figure after them.)
    let below = after(line, "reduce memory use ")?.trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == ' ');
    let capacity = if below.trim_start().starts_with('-') { 0 } else { bytes_in(below)? };
    let needed = after(line, "only reduced to ").and_then(bytes_in)?;
    Some(XlaProgram { needed, capacity, ..XlaProgram::default() })
}

/// The request of XLA's BFC allocator's own line in the same text (`Allocator (GPU_0_bfc) ran
/// out of memory trying to allocate 95.40GiB (rounded to 102432004352)`).
fn bfc_request(lines: &[&str]) -> Option<u64> {
    let r = lines.iter().find_map(|l| after(l, "ran out of memory trying to allocate "))?;
    after(r, "(rounded to ").and_then(leading_u64).or_else(|| leading_figure(r))
}

/// XLA's `BufferAssignment` stats, wherever they are in the text.
fn xla_stats(lines: &[&str]) -> Option<XlaProgram> {
    let parts = ["parameter allocation:", "maybe_live_out allocation:", "preallocated temp allocation:"];
    // A paste cut before `total allocation:` keeps its parts: their sum is the least it needs.
    let needed = labeled(lines, "total allocation:").or_else(|| {
        labeled(lines, "preallocated temp allocation:")?;
        parts.iter().filter_map(|p| labeled(lines, p)).reduce(|a, b| a + b)
    })?;
    Some(XlaProgram {
        needed,
        capacity: 0,
        parameters: labeled(lines, "parameter allocation:").unwrap_or(0),
        outputs: labeled(lines, "maybe_live_out allocation:").unwrap_or(0),
        temporaries: labeled(lines, "preallocated temp allocation:").unwrap_or(0),
        fragmentation: labeled(lines, "total fragmentation:").unwrap_or(0),
    })
}

/// The buffers XLA lists (`Buffer 1:` with `Size:`, or a TPU's `1. Size: …`), as usage by
/// op: the op name and shape, or the parameter's shape.
fn buffers(lines: &[&str]) -> Vec<NodeUsage> {
    let mut out: Vec<NodeUsage> = Vec::new();
    let mut size: Option<u64> = None;
    let mut op: Option<String> = None;
    let mut shape: Option<String> = None;
    let mut label: Option<String> = None;
    let mut parameter: Option<String> = None;
    let mut flush = |size: &mut Option<u64>,
                     op: &mut Option<String>,
                     shape: &mut Option<String>,
                     label: &mut Option<String>,
                     parameter: &mut Option<String>| {
        if let Some(bytes) = size.take() {
            let name = match (op.take(), shape.take(), parameter.take(), label.take()) {
                (Some(o), Some(s), _, _) => format!("{o} {s}"),
                (Some(o), None, _, _) => o,
                (None, _, Some(p), _) => format!("parameter {p}"),
                (None, Some(s), None, Some(l)) => format!("{l} {s}"),
                (None, Some(s), None, None) => s,
                (None, None, None, Some(l)) => l,
                (None, None, None, None) => "(unnamed buffer)".into(),
            };
            out.push(NodeUsage { op: name, bytes, requested: bytes, count: 1 });
        }
        (*op, *shape, *label, *parameter) = (None, None, None, None);
    };
    let clean = |r: &str| r.trim().split('{').next().unwrap_or("").trim().to_string();
    for l in lines {
        if let Some(r) = field(l, "Size:").filter(|_| !l.contains("Unpadded size")) {
            flush(&mut size, &mut op, &mut shape, &mut label, &mut parameter);
            size = leading_figure(r);
        } else if let Some(r) = field(l, "Operator:") {
            op = after(r, "op_name=\"").map(|s| without_params(s.split('"').next().unwrap_or(s)));
        } else if let Some(r) = field(l, "Entry Parameter Subshape:") {
            parameter = Some(clean(r));
        } else if let Some(r) = field(l, "Shape:") {
            shape = Some(clean(r));
        } else if let Some(r) = field(l, "XLA Label:").or_else(|| field(l, "XLA label:")) {
            label = Some(r.trim().split([' ', '=']).next().unwrap_or("").to_string());
        }
    }
    flush(&mut size, &mut op, &mut shape, &mut label, &mut parameter);
    out.sort_by_key(|n| std::cmp::Reverse(n.bytes));
    out
}

/// An XLA op name without its parameters: `.../dot_general[dimension_numbers=...]` →
/// `.../dot_general`.
fn without_params(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A TPU's compile-time OOM: `Used 17.47G of 15.48G hbm`, the usage split, the largest
/// program allocations.
fn hbm(lines: &[&str]) -> XlaProgram {
    let text = lines.iter().take(3).copied().collect::<Vec<_>>().join(" ");
    let used = after(&text, "Used ");
    // Compiling stopped early: `Requires 3.47E, has 14.49G available.`
    let requires = after(&text, "Requires ");
    // A paste that starts at the usage: `Total hbm usage >= 101.25G:`.
    let total = after(&text, "Total hbm usage >= ");
    XlaProgram {
        needed: used.or(requires).or(total).and_then(leading_figure).unwrap_or(0),
        capacity: used
            .and_then(|r| after(r, " of "))
            .or_else(|| requires.and_then(|r| after(r, "has ")))
            .and_then(leading_figure)
            .unwrap_or(0),
        parameters: labeled(lines, "arguments").unwrap_or(0),
        outputs: 0,
        temporaries: labeled(lines, "HLO temp").unwrap_or(0),
        fragmentation: 0,
    }
}

/// The failing call: the innermost traceback frame outside the framework, the standard
/// library and site-packages, and the framework call made from there.
fn call_site(lines: &[&str]) -> Option<CallSite> {
    let mut frames: Vec<(String, u32, String, Option<String>)> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = strip_prefix(l);
        let Some(r) = after(t, "File \"") else { continue };
        let Some((path, rest)) = r.split_once('"') else { continue };
        let Some(line) = after(rest, ", line ").and_then(leading_u64) else { continue };
        let function = after(rest, ", in ").map(|f| f.trim().to_string()).unwrap_or_default();
        let code = lines.get(i + 1).map(|c| strip_prefix(c).trim().to_string()).filter(|c| {
            !c.is_empty() && !c.starts_with("File \"") && !c.chars().all(|ch| ch == '^' || ch == '~' || ch == ' ')
        });
        frames.push((path.to_string(), u32::try_from(line).unwrap_or(0), function, code));
    }
    let library = |p: &str| {
        let p = p.replace('\\', "/");
        p.contains("site-packages/")
            || p.contains("dist-packages/")
            || p.contains("/lib/python3")
            || p.starts_with("<frozen")
            || p.contains("/torch/")
    };
    // Without a frame of the user's, the innermost one (the framework's own call).
    let user = frames.iter().rposition(|f| !library(&f.0)).or_else(|| frames.len().checked_sub(1))?;
    let (path, line, function, code) = &frames[user];
    // The call: from the frame after the user's (inside the framework), else the user's line.
    let call = frames
        .get(user + 1..)
        .and_then(|rest| rest.iter().rev().find_map(|f| f.3.as_deref().and_then(called)))
        .or_else(|| code.as_deref().and_then(called));
    Some(CallSite {
        file: path.replace('\\', "/").rsplit('/').next().unwrap_or(path).to_string(),
        line: *line,
        function: function.clone(),
        call,
    })
}

/// The function a line of code calls first after `return` or `=`: `F.linear`,
/// `torch.nn.functional.scaled_dot_product_attention`, `self.conv` (None for none).
fn called(code: &str) -> Option<String> {
    let c = code.trim();
    let c = c.strip_prefix("return ").unwrap_or(c);
    let c = match c.find(" = ") {
        Some(i) if !c[..i].contains('(') => &c[i + 3..],
        _ => c,
    };
    let open = c.find('(')?;
    let name = c[..open].trim();
    let name = name.rsplit([' ', '=', '[', ',']).next().unwrap_or(name);
    let ok = !name.is_empty() && name.chars().all(|ch| ch.is_alphanumeric() || ch == '_' || ch == '.');
    ok.then(|| name.to_string())
}

fn build(
    path: &Path,
    m: Message,
    request: Option<u64>,
    op: Option<String>,
    shape: Option<Vec<i64>>,
    usage: Vec<NodeUsage>,
    lines: usize,
) -> Dump {
    let total = m.total.unwrap_or(0);
    let free = m.free.unwrap_or(0);
    let allocated = m.allocated.unwrap_or(0);
    let reserved = m.reserved.unwrap_or(allocated);
    let limit = m.allowed.or(m.total).unwrap_or(0);
    let others = m.others().unwrap_or(0);
    let oom = request.map(|r| OomRecord {
        requested: r,
        rounded: r,
        op: op.clone(),
        shape: shape.clone(),
        step: -1,
        bytes_in_use: allocated,
        pool_bytes: reserved,
        device_free: free,
        device_total: total,
        limit_headroom: limit.saturating_sub(reserved),
        ..OomRecord::default()
    });
    let stats = Stats {
        bytes_limit: limit,
        bytes_in_use: allocated,
        peak_bytes_in_use: allocated,
        pool_bytes: reserved,
        peak_pool_bytes: reserved,
        free_bytes: reserved.saturating_sub(allocated),
        num_ooms: u64::from(request.is_some()),
        ..Stats::default()
    };
    let device_name = m.device.clone().unwrap_or_else(|| "the device".into());
    let mut absent = vec![Section::Bins, Section::ChunkState, Section::Regions, Section::Summary, Section::Events];
    if request.is_none() {
        absent.push(Section::Request);
    }
    if m.total.is_none() && m.allocated.is_none() {
        absent.extend([Section::Totals, Section::Stats]);
    }
    if usage.is_empty() {
        absent.push(Section::Usage);
    }
    absent.push(Section::Occupancy);
    absent.sort();
    let allocator = match m.format {
        f if f.is_torch_cache() => "PyTorch caching allocator",
        MessageFormat::TorchAsync => "PyTorch cudaMallocAsync allocator",
        MessageFormat::TorchMps => "PyTorch MPS allocator",
        MessageFormat::XlaRuntime | MessageFormat::XlaHbm | MessageFormat::TpuRuntime => "XLA",
        MessageFormat::XlaAsync => "XLA cudaMallocAsync allocator",
        MessageFormat::TfTensor => "TensorFlow",
        MessageFormat::Paddle => "PaddlePaddle allocator",
        MessageFormat::Ggml => "llama.cpp (ggml)",
        MessageFormat::OnnxArena => "ONNX Runtime arena",
        MessageFormat::VllmKvCache => "vLLM KV cache",
        MessageFormat::SglangKvCache => "SGLang KV cache",
        MessageFormat::TgiWarmup => "TGI's warm-up",
        MessageFormat::KvCacheCheck => "the engine's KV cache",
        MessageFormat::EngineCheck => "the engine's start-up check",
        _ => "the device",
    };
    Dump {
        version: oomscope_format::DUMP_VERSION,
        tool: format!("oomscope {}", env!("CARGO_PKG_VERSION")),
        source: Source {
            kind: SourceKind::Message,
            path: Some(path.display().to_string()),
            command: None,
            created_unix: None,
        },
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: device_name.clone(),
            model: device_name,
            total,
            free,
            others,
        },
        allocator: AllocatorInfo { name: allocator.into(), limit, ..AllocatorInfo::default() },
        stats,
        ooms: oom.iter().cloned().collect(),
        ooms_total: u64::from(oom.is_some()),
        oom,
        usage_by_node: usage,
        imported: Some(Imported {
            from: ImportedFrom::Message,
            absent,
            message: Some(m),
            lines_read: lines as u64,
            lines_used: 1,
            ..Imported::default()
        }),
        ..Dump::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device of 0 bytes (a size the framework never filled in) is read as no figure, not
    /// as a device every request is larger than.
    #[test]
    fn vllms_start_up_check_gives_free_total_and_what_it_wanted() {
        let m = read(
            "ValueError: Free memory on device cuda:0 (10.50/79.19 GiB) on startup is less than desired GPU memory \
             utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other \
             processes.",
        );
        let gib = |x: f64| (x * (1u64 << 30) as f64).round() as u64;
        assert_eq!((m.free, m.total, m.allowed), (Some(gib(10.50)), Some(gib(79.19)), Some(gib(71.27))));
        assert_eq!(m.device.as_deref(), Some("cuda:0"));
    }

    /// Runtimes' own allocation failures, each in the words its source prints, are read as
    /// out-of-memory errors; host memory's as not the GPU's.
    #[test]
    fn libraries_own_allocation_failures_are_read() {
        for text in [
            "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
            "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED",
            "RuntimeError: nvjpeg error: NVJPEG_STATUS_ALLOCATOR_FAILURE",
            "[TRT] [E] 2: [executionContext.cpp::enqueue] Error Code 2: OutOfMemory (no further information)",
            "RuntimeError: Exception from src/inference/src/infer_request.cpp:223:\n[GPU] out of GPU resources",
            "Error: Cannot malloc 2048.000000 MB GPU memory. Please shrink FLAGS_fraction_of_gpu_memory_to_use",
            "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 4096 Bytes of memory on device",
            "RuntimeError: Prefill out of memory. Try to lower your batch size.",
            "RuntimeError: Workspace can't be allocated, no enough memory.",
            "Error out of memory at line 417 in file /src/csrc/ops.cu",
            "[GPU] Exceeded max size of memory allocation: Required 8589934592 bytes, already occupied : 2147483648 \
             bytes, but available memory size is 6442450944 bytes",
            "RUNTIME_EXCEPTION : Exception(1) tid(1f2c) 8007000E Not enough memory resources are available to complete \
             this operation.",
            "RuntimeError: [malloc_or_wait] Unable to allocate 1073741824 bytes.",
            "src/storage/./pooled_storage_manager.h:62: Memory allocation failed.",
            "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
            "InternalError: Blas GEMM launch failed : a.shape=(32, 784), b.shape=(784, 512) [Op:MatMul]",
            "InternalError: Failed copying input tensor from /job:localhost/replica:0/task:0/device:CPU:0 to \
             /job:localhost/replica:0/task:0/device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized.",
            "RuntimeError: No executable batch size found, reached zero.",
            "RuntimeError: Native API failed. Native API returns: -5 (PI_ERROR_OUT_OF_RESOURCES)",
            "UnknownError: Failed to get convolution algorithm. This is probably because cuDNN failed to initialize, \
             so try looking to see if a warning log message was printed above.",
            "[ONNXRuntimeError] : 1 : FAIL : CUDNN failure 4: CUDNN_STATUS_INTERNAL_ERROR ; GPU=0 ; \
             file=cuda_execution_provider.cc ; line=170 ; expr=cudnnCreate(&cudnn_handle_);",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "  current device: 0, in function ggml_cuda_pool_malloc at ggml/src/ggml-cuda/ggml-cuda.cu:382",
            "MXNetError: Memory allocation failed out of memory",
            "llama_kv_cache_init: failed to allocate buffer for kv cache",
            "ERROR: CUDA RUN OUT OF MEMORY",
            "RuntimeError: Malloc for kernel output failed, Memory isn't enough, node:Default/network/Conv2D-op1",
            "HIP error: out of memory",
            "llama_model_load: error loading model: unable to allocate backend buffer",
            "RuntimeError: Not enough VRAM to load the model on GPU",
            "fatal: GPU memory exhausted",
            "ERROR: Out of GPU memory",
            "terminate called after throwing an instance of 'paddle::memory::allocation::BadAlloc'\n  what():",
            "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease \
             `--max-batch-prefill-tokens`",
            "AssertionError: Insufficient space in device allocation",
            "cupy_backends.cuda.libs.cutensor.CuTensorError: CUTENSOR_STATUS_ALLOC_FAILED",
            "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB",
            "Out of GPU memory trying to allocate 8.016 MiB\nEffective GPU memory usage: 91.54% (14.446 GiB/15.782 \
             GiB)",
            "RuntimeError: Not enough memory, use lower resolution (max approx. 640x640). Need: 1.5GB free, Have:0.1GB \
             free",
            "[W] [TRT] GPU memory allocation error during getBestTactic: 9_full\n[E] [TRT] Internal error: could \
             not find any implementation for node 9_full, try increasing the workspace size",
            "Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by GE module.",
            "Call rtMalloc fail, purpose: page caching, type = 2, size:3221291008, device_id:0",
            "RuntimeError: miopenStatusAllocFailed",
            "gpu-node03:40117:40117 [0] include/alloc.h:199 NCCL WARN Failed to CUDA malloc 536870912 bytes",
            "pyopencl.MemoryError: clCreateBuffer failed: mem object allocation failure",
            "CudaCustomAllocator out of memory\n [requestedSpace:             148560384 B] .........",
            "terminate called after throwing an instance of 'oneflow::RuntimeException'\n  what():  Error: out of \
             memory",
            "terminate called after throwing an instance of 'thrust::system::system_error'\n  what():  parallel_for \
             failed: out of memory",
        ] {
            assert!(recognises(text), "{text}");
        }
        // Host memory in a CUDA library's words: PyCUDA's aligned buffer, Paddle's pinned one.
        for text in [
            "pycuda._driver.MemoryError: aligned_malloc failed: out of memory - aligned malloc failed",
            "ExternalError: CUDA error(2), out of memory. [Hint: 'cudaErrorMemoryAllocation'.] (at \
             /paddle/paddle/fluid/memory/allocation/pinned_allocator.cc:38)",
            "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 4294967296\n\
             llama_kv_cache_init: failed to allocate buffer for kv cache",
        ] {
            assert!(!recognises(text) && not_an_oom(text).is_some(), "{text}");
        }
        for text in [
            "Memory cgroup out of memory: Killed process 4242 (python) total-vm:98765432kB",
            "RuntimeError: unable to mmap 1073741824 bytes from file </torch_12345_0>: Cannot allocate memory (12)",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory \
             (shm).",
            "[launch.py:320:sigkill_handler] ['python', 'train.py'] exits with return code = -9",
            "RuntimeError: CUDA error: operation not permitted when stream is capturing",
            "RuntimeError: cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph.",
            "failed assertion `[MPSNDArray initWithDevice:descriptor:] Error: total bytes of NDArray > 2**32'",
            "RuntimeError: Invalid buffer size: 12.50 GB",
            "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            "W bfc_allocator.cc:337] Garbage collection: deallocate free memory regions (i.e., allocations) so that we \
             can re-allocate a larger region to avoid OOM due to memory fragmentation.",
            "[TRT] [W] Tactic Device request: 4096MB Available: 2048MB. Device memory is insufficient to use tactic.",
            "ggml_metal_add_buffer: warning: current allocated size is greater than the recommended max working set \
             size",
            "WARNING config.py:1234] Possibly too large swap space. 16.00 GiB out of the 31.26 GiB total CPU memory",
            "WARNING scheduler.py:1012] Decode out of memory happened. #retracted_reqs: 3",
            "[WARNING] [stage3.py:2941:_post_step] 4 pytorch allocator cache flushes since last step.",
            "RuntimeError: [GPU] Exceeded max size of memory object allocation: requested 4294967296 bytes",
            "RuntimeError: [metal::malloc] Attempting to allocate 34359738368 bytes which is greater than the maximum \
             allowed buffer size of 28991029248 bytes.",
            "wgpu error: In Device::create_buffer Buffer size 4294967296 is greater than the maximum buffer size",
            "887A0005 The GPU device instance has been suspended. Use GetDeviceRemovedReason",
            "common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 99",
            "RuntimeError: CUDA error: no CUDA-capable device is detected",
            "RuntimeError: cuda runtime error (999) : unknown error at /pytorch/aten/src/THC/THCGeneral.cpp:47",
            "RuntimeError: CUDA error: the launch timed out and was terminated",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
            "Memory access fault by GPU node-1 (Agent handle: 0x55d3) on address 0x7f. Reason: Page not present",
            "RuntimeError: HIP error: invalid device function",
            "RuntimeError: DataLoader worker (pid(s) 12345) exited unexpectedly",
            "OSError: [WinError 1455] The paging file is too small for this operation to complete.",
            "Segmentation fault (core dumped)",
            "    Reason:       OOMKilled",
            "[1]    12345 killed     python train.py",
            "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL",
            "Process finished with exit code -1073741819 (0xC0000005)",
            "OpenCV Error: Gpu API call (unknown error) in allocate, file gpu_mat.cu, line 116",
            "ERROR: CUDA error (code 999, ERROR_UNKNOWN)",
            "Callback: Queue 0x77ec42100000 aborting with error : HSA_STATUS_ERROR_INVALID_ISA: The instruction set",
            "vkQueueSubmit failed -4",
            "vkAllocateMemory failed -1000072003",
            "process 1 terminated with signal SIGSEGV",
            "[launch.py:320:sigkill_handler] ['python', 'train.py'] exits with return code = -11",
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
            "The node was low on resource: memory. Container trainer was using 30712348Ki",
            "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception",
            "DXGI_ERROR_DEVICE_HUNG (0x887A0006): The application's device failed due to badly formed commands",
            "RuntimeError: DataLoader worker (pid 8102) is killed by signal: Terminated.",
            "RuntimeError: DataLoader worker (pid 2256) is killed by signal: Aborted.",
            "NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error",
            "StandardGpuResources: alloc fail type TemporaryMemoryBuffer dev 0 size 805306368 bytes (no temp space); \
             retrying",
            "cv2.error: OpenCV(4.8.0) /io/opencv/modules/core/src/cuda_host_mem.cpp:209: error: (-217:Gpu API \
             call) out \
             of memory in function 'create'",
            "NCCL WARN Cuda failure 'out of memory'\nNCCL WARN Failed to CUDA host alloc 33554432 bytes",
            "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: rmm/mr/host/pinned_memory_resource.hpp:140: \
             cudaErrorMemoryAllocation out of memory",
            // Any other CUDA error: not an allocation's, said as such.
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, ...)`",
            "RuntimeError: cuDNN error: CUDNN_STATUS_ARCH_MISMATCH",
            "ValueError: Available memory on node 0 (12.50/62.70 GiB) on kv cache allocation is less than requested \
             memory for kv (20.00/40.00 GiB). Reduce CPU memory used by other processes.",
        ] {
            assert!(!recognises(text) && not_an_oom(text).is_some(), "{text}");
        }
    }

    /// TensorRT's builder short of memory for one tactic goes on: a failure only where no
    /// implementation was found after it.
    #[test]
    fn a_tensorrt_tactic_short_of_memory_is_no_failure_unless_the_build_failed() {
        let probe = "[W] [TRT] GPU memory allocation error during getBestTactic: 9_full_with_bias";
        assert!(parse(Path::new("t.txt"), probe).is_err());
        assert!(not_an_oom(probe).is_some());
        let failed = format!("{probe}\n[E] [TRT] Internal error: could not find any implementation for node 9_full");
        assert!(parse(Path::new("t.txt"), &failed).is_ok());
    }

    /// The generic reader does not take prose, other resources or other programs' words for a
    /// device's memory running out; a warning above a failure, or a crash below it, does not
    /// hide the failure.
    #[test]
    fn the_generic_reader_reads_failures_not_prose() {
        for text in [
            "If you run out of GPU memory, lower the batch size or enable gradient checkpointing.",
            "Warning  UnexpectedAdmissionError  pod/train-0  Failed to allocate device plugin resource for pod \
             train-0: requested number of devices unavailable for nvidia.com/gpu.",
            "We tried to seed the RNG. That was not possible with the old API.",
            "ERROR orders.py:88 Failed to allocate shipment slot for order 1234 (warehouse full)",
            "Debug.LogError: Maximum pool size exceeded for ObjectPool<Bullet>",
        ] {
            assert!(!recognises(text), "{text}");
        }
        for text in [
            "WARNING 11-28 04:00:00 config.py:1234] Possibly too large swap space. 16.00 GiB out of the 31.26 GiB \
             total CPU memory is allocated for the swap space.\nERROR: Not enough GPU memory to load the model weights \
             on device cuda:0",
            "ERROR: Out of GPU memory trying to allocate 8.016 MiB\nEffective GPU memory usage: 91.54% (14.446 \
             GiB/15.782 GiB)\nSegmentation fault (core dumped)",
            "fatal: GPU memory exhausted\n[1]    12345 killed     python train.py",
        ] {
            assert!(parse(Path::new("t.txt"), text).is_ok(), "{text}");
        }
        // A PyTorch OOM after TensorRT's probe is PyTorch's; llama.cpp's backend buffer after
        // its CPU backend failed is the host's.
        let text = "WARNING: [Torch-TensorRT] - Skipping tactic 0x0 due to exception Memory of size 4294967296 could \
                    not be allocated\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has \
                    a total capacity of 23.65 GiB of which 1.02 GiB is free.";
        assert!(parse(Path::new("t.txt"), text).is_ok());
        let text = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 42949672960\n\
                    llama_model_load: error loading model: unable to allocate backend buffer";
        assert!(!recognises(text) && not_an_oom(text).is_some());
    }

    #[test]
    fn a_total_of_zero_bytes_is_no_figure() {
        let text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity \
                    of 0 bytes of which 0 bytes is free.";
        let d = parse(Path::new("t.txt"), text).unwrap();
        let m = d.imported.as_ref().and_then(|i| i.message.as_ref()).unwrap();
        assert_eq!((m.total, m.free), (None, Some(0)));
        assert_eq!(d.device.total, 0);
    }

    /// A paste of two ranks' OOMs on two GPUs: both are read, the verdict the first's, the
    /// other listed with its device and request; the same error printed twice is one.
    #[test]
    fn every_oom_of_a_paste_on_another_device_is_listed() {
        let one = |rank: u32, gpu: u32, gib: u32| {
            format!(
                "[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}.00 GiB. GPU {gpu} has \
                 a total capacity of 24.00 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated \
                 by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
            )
        };
        let text = format!("{}\n{}\n{}\n", one(0, 0, 2), one(0, 0, 2), one(3, 3, 8));
        let d = parse(Path::new("t.txt"), &text).unwrap();
        let m = d.imported.as_ref().and_then(|i| i.message.as_ref()).unwrap();
        assert_eq!(m.device.as_deref(), Some("GPU 0"));
        assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(2 << 30));
        let others: Vec<(u64, Option<&str>, Option<u64>)> =
            m.others.iter().map(|o| (o.line, o.device.as_deref(), o.requested)).collect();
        assert_eq!(others, vec![(3, Some("GPU 3"), Some(8 << 30))]);
        assert_eq!(d.ooms_total, 2);
        let alone = parse(Path::new("t.txt"), &format!("{}\n{}\n", one(0, 0, 2), one(0, 0, 2))).unwrap();
        assert!(alone.imported.unwrap().message.unwrap().others.is_empty());
    }

    /// vLLM's KV-cache check behind a launcher's prefix, after a `Traceback:` line shorter
    /// than the offset of the marker in the next, cut anywhere: read or refused, never a
    /// panic (it once sliced the shorter line at the other's offset).
    #[test]
    fn a_vllm_check_after_a_short_line_cut_anywhere_never_panics() {
        let p = "(EngineCore_DP0 pid=4242) ERROR 11-20 10:00:00 [core.py:708] ";
        let text = format!(
            "{p}Traceback:\n{p}ValueError: To serve at least one request with the models's max seq len (32768), \
             (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (2.25 GiB). Based on \
             the available memory, the estimated maximum model length is 18432."
        );
        let mut read = 0;
        for cut in (0..=text.len()).filter(|&c| text.is_char_boundary(c)) {
            if let Ok(d) = parse(Path::new("t.txt"), &text[..cut]) {
                read += 1;
                let m = d.imported.as_ref().and_then(|i| i.message.as_ref()).expect("a message");
                assert_eq!(m.format, MessageFormat::VllmKvCache, "{cut}");
            }
        }
        assert!(read > 0);
        let whole = parse(Path::new("t.txt"), &text).expect("the whole text is read");
        assert_eq!(whole.oom.as_ref().map(|o| o.requested), Some(4 << 30));
    }

    fn read(text: &str) -> Message {
        let d = parse(Path::new("m.txt"), text).unwrap();
        d.imported.unwrap().message.unwrap()
    }

    #[test]
    fn a_pytorch_2_message_gives_every_figure() {
        let m = read(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has a total capacity of \
             39.49 GiB of which 321.31 MiB is free. Process 3721648 has 414.00 MiB memory in use. Including \
             non-PyTorch memory, this process has 37.46 GiB memory in use. Process 1374765 has 414.00 MiB memory in \
             use. Of the allocated memory 36.04 GiB is allocated by PyTorch, and 321.37 MiB is reserved by PyTorch but \
             unallocated. If reserved but unallocated memory is large try setting \
             PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        );
        assert_eq!(m.format, MessageFormat::TorchCapacity);
        assert_eq!(m.device.as_deref(), Some("GPU 0"));
        assert_eq!(oomscope_base::size::torch(m.total.unwrap()), "39.49 GiB");
        assert_eq!(oomscope_base::size::torch(m.free.unwrap()), "321.31 MiB");
        assert_eq!(oomscope_base::size::torch(m.process.unwrap()), "37.46 GiB");
        assert_eq!(m.processes.len(), 2);
        assert_eq!(m.processes[0].pid, 3721648);
        assert_eq!(oomscope_base::size::torch(m.others().unwrap()), "828.00 MiB");
        assert!(m.suggests_expandable);
    }

    #[test]
    fn in_a_container_the_listed_process_holding_the_cache_is_this_one() {
        let m = read(
            "CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty of 14.75 GiB of which \
             235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 GiB is \
             allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(m.format, MessageFormat::TorchCapacty);
        assert!(m.processes[0].this);
        assert_eq!(m.others(), Some(0));
    }

    #[test]
    fn old_messages_read_their_parenthesis() {
        let m = read(
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; \
             9.87 GiB already allocated; 1.44 MiB free; 105.14 MiB cached)",
        );
        assert_eq!(m.format, MessageFormat::TorchCached);
        assert_eq!(oomscope_base::size::torch(m.unallocated().unwrap()), "105.14 MiB");
        let m = read(
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 11.17 GiB total capacity; 8.00 GiB already \
             allocated; 1.00 GiB free; 5.00 GiB allowed; 9.00 GiB reserved in total by PyTorch) If reserved memory \
             is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
        );
        assert_eq!(m.format, MessageFormat::TorchMaxSplitHint);
        assert_eq!(m.device.as_deref(), Some("GPU 1"));
        assert_eq!(m.allowed, Some(5 << 30));
        assert_eq!(m.reserved, Some(9 << 30));
    }

    #[test]
    fn the_call_site_is_the_users_frame_and_the_frameworks_call() {
        let text = "Traceback (most recent call last):\n  File \"train.py\", line 42, in step\n    out = model(x)\n  \
                    File \"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 114, in forward\n    \
                    return F.linear(input, self.weight, self.bias)\ntorch.OutOfMemoryError: CUDA out of memory. Tried \
                    to allocate 20.00 MiB. GPU 0 has a total capacity of 4.00 GiB of which 2.00 MiB is free.";
        let s = read(text).site.unwrap();
        assert_eq!((s.file.as_str(), s.line, s.function.as_str()), ("train.py", 42, "step"));
        assert_eq!(s.call.as_deref(), Some("F.linear"));
    }

    #[test]
    fn look_alikes_are_named() {
        assert!(not_an_oom("RuntimeError: CUDA error: an illegal memory access was encountered").is_some());
        assert!(not_an_oom("RuntimeError: CUDA error: out of memory").is_none());
        assert!(!recognises("RuntimeError: CUDA error: device-side assert triggered"));
        let named = |t: &str, w: &str| not_an_oom(t).is_some_and(|l| l.what.contains(w));
        assert!(named("slurmstepd: error: Detected 1 oom_kill event in StepId=4242871.batch.", "OOM killer"));
        assert!(named("RuntimeError: mkl_malloc: failed to allocate memory", "Intel MKL"));
        assert!(named(
            "Exception(2) tid(9264) 887A0006 The GPU will not respond to more commands, most likely",
            "hung"
        ));
        assert!(named(
            "[2025-05-20 14:02:11 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1",
            "SGLang"
        ));
        assert!(named(
            "WARNING 03-01 10:22:13 [scheduler.py:1560] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode",
            "nothing failed"
        ));
        assert!(named(
            "[d2.utils.memory]: Attempting to copy inputs of <function pairwise_iou> to CPU due to CUDA OOM",
            "recovered"
        ));
        // A notebook's kernel that died; Kaggle's and MATLAB's host memory; nvidia-smi without
        // its driver.
        let died = "Kernel Restarting\nThe kernel for train.ipynb appears to have died. It will restart automatically.";
        assert!(named(died, "OOM killer"));
        assert!(named("The Kernel crashed while executing code in the current cell or a previous cell.", "notebook"));
        assert!(named("Your notebook tried to allocate more memory than is available. It has restarted.", "Kaggle"));
        assert!(named("Out of memory. Type \"help memory\" for your options.", "MATLAB"));
        assert!(named("Out of memory. Type HELP MEMORY for your options.", "MATLAB"));
        assert!(named("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "driver"));
        // MATLAB's GPU is the device's; so is a Jetson's nvmap refusing with ENOMEM, not with
        // another status.
        assert!(recognises(
            "Error using gpuArray\nOut of memory on device. To view more detail about available memory on the GPU, use 'gpuDevice()'."
        ));
        assert!(recognises("NvMapMemAllocInternalTagged: 1075072515 error 12\nNvMapMemHandleAlloc: error 0"));
        assert!(!recognises("NvMapMemAllocInternalTagged: 1075072515 error 22"));
        // A marker's line that gives another status is that status's; Vulkan's device lost.
        assert!(named(
            "MemoryError: std::bad_alloc: CUDA error at: cuda_memory_resource.hpp:66: cudaErrorIllegalAddress an illegal memory access was encountered",
            "illegal memory access"
        ));
        assert!(named("Failed to acquire fence: vkQueueSubmit VK_ERROR_DEVICE_LOST", "VK_ERROR_DEVICE_LOST"));
        assert!(named("script/run.sh: 行 30: 23195 已杀死", "OOM killer"));
        // A status quoted as a result where nothing names a device: the host's, as far as shown.
        assert!(named("`<DatasetHost :: reg>: 50 \"out of memory\"`", "nothing in the paste names a GPU"));
        // TF's message cut inside its words; MXNet's cuBLAS handle that would not start.
        assert_eq!(
            find("Starting.\nError: OOM when allocating tenso").map(|f| f.format),
            Some(MessageFormat::TfTensor)
        );
        assert!(!cut_tf_oom("the OOM when allocating tensors of this size is rare, they say"));
        let mx =
            "stream_gpu-inl.h:115: Check failed: err == CUBLAS_STATUS_SUCCESS (1 vs. 0) Create cublas handle failed";
        assert_eq!(find(mx).map(|f| f.format), Some(MessageFormat::Cublas));
        // `out of memory` alone on its line where a device is named, before a kernel's fault
        // (after one, the fault's).
        let bare = "out of memory\ninvalid argument\nan illegal memory access was encountered\n\
                    tensor_gpu-inl.h:69: Check failed: e == cudaSuccess CUDA: an illegal memory access was encountered";
        assert_eq!(find(bare).map(|f| (f.format, f.line)), Some((MessageFormat::DeviceRuntime, 0)));
        let after = "an illegal memory access was encountered\nout of memory\nCUDA: illegal";
        assert!(find(after).is_none());
        assert!(find("out of memory\nthe job ended").is_none());
        // MLC-LLM's load check; PyTorch's advice alone, its head lost.
        let mlc = "AssertionError: Cannot estimate KV cache capacity. The model weight size 11219714048.0 may b";
        assert_eq!(find(mlc).map(|f| f.format), Some(MessageFormat::EngineCheck));
        let hint =
            "ERROR : \nIf reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.";
        assert_eq!(find(hint).map(|f| f.format), Some(MessageFormat::TorchMaxSplitHint));
    }

    /// SGLang's prefill check: the tokens it tried, the pool's free slots.
    #[test]
    fn sglangs_prefill_check_gives_its_tokens_and_free_slots() {
        let text = "RuntimeError: Prefill out of memory. Try to lower your batch size.\nTry to allocate 8192 tokens.\n\
                    Available full tokens: 8070656 (full_available_size=7936 + full_evictable_size_=8062720)";
        let m = parse(Path::new("m.txt"), text).unwrap().imported.and_then(|i| i.message).unwrap();
        assert_eq!((m.format, m.prefill_tokens, m.kv_tokens), (MessageFormat::SglangKvCache, Some(8192), Some(7936)));
    }

    /// An allocation's line whose result is another status is that status's failure.
    #[test]
    fn an_allocations_other_status_is_that_status() {
        let l = "E cuda_driver.cc:767] failed to alloc 47987818496 bytes unified memory; result: CUDA_ERROR_INVALID_VALUE: invalid argument";
        assert_eq!(other_status(l), Some("CUDA_ERROR_INVALID_VALUE"));
        assert!(generic(&[l]).is_none());
        assert!(cuda_error(l).is_some());
        assert_eq!(
            other_status("failed to alloc 2.00G (2147483648 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY"),
            None
        );
        assert_eq!(
            other_status("Check failed: e == cudaSuccess || e == cudaErrorCudartUnloading CUDA: out of memory"),
            None
        );
        assert_eq!(other_status("cudaMalloc returned cudaErrorMemoryAllocation"), None);
    }

    /// A figure past 64 bits is the most they count, not none (NVML's 2^64 bytes).
    #[test]
    fn a_figure_past_64_bits_is_the_most_they_count() {
        assert_eq!(leading_figure("17179869184.00 GiB memory in use."), Some(u64::MAX));
        assert_eq!(leading_figure("20.00 MiB."), Some(20 << 20));
        assert_eq!(leading_figure("12.00 parsecs"), None);
    }

    /// PyTorch's process figure of 2^64 bytes is NVML's no-answer: left out, and said so; a
    /// device figure past 64 bits stays, beyond any device.
    #[test]
    fn nvmls_no_answer_is_left_out() {
        let text = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total \
                    capacty of 24.00 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has \
                    17179869184.00 GiB memory in use. Of the allocated memory 23.01 GiB is allocated by PyTorch, and \
                    121.23 MiB is reserved by PyTorch but unallocated.";
        let d = parse(Path::new("m.txt"), text).unwrap();
        let m = d.imported.and_then(|i| i.message).unwrap();
        assert!(m.process_unanswered && m.process.is_none() && m.allocated.is_some(), "{m:?}");
        let text = text.replace("a total capacty of 24.00 GiB", "a total capacty of 17179869184.00 GiB");
        let m = parse(Path::new("m.txt"), &text).unwrap().imported.and_then(|i| i.message).unwrap();
        assert_eq!(m.total, Some(u64::MAX));
    }

    /// The generic reader's words: phrases with words between, a message that opens with them,
    /// the host's memory only where the host is named as a word.
    #[test]
    fn generic_words_and_their_limits() {
        assert!(ran_out_of_some("* device #1: not enough allocatable device memory for this attack."));
        assert!(ran_out_of_some("cuda out of the memory. tried"));
        assert!(!ran_out_of_some("fullyfusedmlp: insufficient shared memory available on the gpu."));
        assert!(!ran_out_of_some("out of patience, the run took more memory than planned later"));
        assert!(opens_a_message("out of memory in custreamcreate(&s)"));
        assert!(opens_a_message("* device #1: not enough allocatable device memory"));
        assert!(!opens_a_message("the gpu ran out of memory again"));
        assert_eq!(host_as_overflow("system is out of gpu and shared host memory"), "system is out of gpu memory");
        assert!(!on_the_host("cuda failure 2: out of memory ; gpu=0 ; hostname=iw-log-host ; expr=cudamalloc(("));
        assert!(on_the_host("failed to allocate host memory"));
        assert!(on_the_host("out of memory on the cpu"));
        assert!(!on_the_host("out of memory in cpufreq_driver"));
        let lines = ["Out of memory in cuStreamCreate(&s, 0) (intern/cycles/device/cuda/queue.cpp:21)"];
        assert!(generic(&lines).is_some());
        let lines = ["CUDA failure 2: out of memory ; GPU=0 ; hostname=IW-LOG-HOST ; expr=cudaMalloc(("];
        assert!(generic(&lines).is_some());
        // Memory exhausted is a failure; Chinese for memory short, with a device named.
        assert!(generic(&["GPU memory exhausted: requested 512 MB, only 128 MB available"]).is_some());
        assert!(generic(&["RuntimeError: CUDA 内存不足。尝试分配 2.00 GiB"]).is_some());
        assert!(generic(&["CPU 内存不足"]).is_none());
    }

    /// Another engine's KV cache check, in its own words: its two figures, required first; not a
    /// line about the KV cache without them, nor figures on a line that is not about it.
    #[test]
    fn an_engines_kv_cache_check_gives_what_it_needs_and_has() {
        let lines = [
            "ERROR vllm_rs::utils::kvcache_allocator: KVCache allocation failed: Insufficient GPU memory for KVCache allocation.",
            "Available: 29353.63 MB, Required: 131072.00 MB, Reserved: 512.00 MB.",
        ];
        assert_eq!(kv_cache_check(&lines, 0), Some((131072 << 20, (29353.63f64 * 1048576.0).round() as u64)));
        assert_eq!(kv_cache_check(&["Insufficient GPU memory for the KV cache."], 0), None);
        assert_eq!(kv_cache_check(&["Insufficient GPU memory.", "Available: 1 GB, Required: 2 GB"], 0), None);
        let text = lines.join("\n");
        assert_eq!(find(&text).map(|f| f.format), Some(MessageFormat::KvCacheCheck));
    }

    /// An allocation that failed, `OOM` as a word after a device's name.
    #[test]
    fn allocation_failures_and_oom_as_a_word() {
        assert!(allocation_failed("memory allocation on gpu failed"));
        assert!(!allocation_failed("allocation succeeded; later the download failed"));
        assert!(oom_word("[error] cuda oom at step 100") && named_oom("[error] cuda oom at step 100"));
        assert!(!oom_word("zoom in the room"));
        assert!(!named_oom("oom at step 100"));
        assert_eq!(
            process_end("failed (exitcode: -6) local_rank: 0 (pid: 1234)").map(|w| w.contains("SIGABRT")),
            Some(true)
        );
        let ollama = r#"msg="error loading llama server" error="llama runner process has terminated: signal: killed""#;
        assert!(process_end(ollama).is_some_and(|w| w.contains("SIGKILL")));
        assert!(process_end("worker killed by signal 9").is_some_and(|w| w.contains("SIGKILL")));
        let hip = "F ./tensorflow/core/util/gpu_launch_config.h:174] Check failed: err == hipSuccess (98 vs. 0)";
        assert!(process_end(hip).is_some_and(|w| w.contains("invalid device function")));
        assert_eq!(process_end("Check failed: err == cudaSuccess (2 vs. 0)"), None);
        assert!(
            find("F tensorflow/core/util/cuda_launch_config.h:127] Check failed: err == cudaSuccess (2 vs. 0)")
                .is_some()
        );
        assert!(
            process_end("exit status: signal: segmentation fault (core dumped)").is_some_and(|w| w.contains("SIGSEGV"))
        );
        assert_eq!(process_end("the signal: 9.5 dB above the noise"), None);
        assert_eq!(process_end("signal: killing the old runner"), None);
    }

    /// A look-alike's words retyped in another case and spacing are still its words; a short
    /// marker is not sought so.
    #[test]
    fn look_alikes_retyped() {
        let l = retyped_look_alike("RuntimeError:Dataloader worker (pid 6479) is killed by signal:killed\n").unwrap();
        assert!(l.what.contains("OOM killer") && l.line == 1, "{l:?}");
        assert_eq!(retyped_look_alike("all good\n"), None);
        let l = retyped_look_alike("\"RuntimeError: Dataloader worker (pid 15623) is killed by signaled: Killed\"\n")
            .unwrap();
        assert!(l.what.contains("OOM killer"), "{l:?}");
        assert!(
            within_edits(&['a', 'b', 'c', 'd'], "xxabxdxx", 1) && !within_edits(&['a', 'b', 'c', 'd'], "xxaxxdxx", 1)
        );
    }

    /// A clause's label retyped with a letter wrong is that label; a far one is not.
    #[test]
    fn old_form_labels_retyped() {
        assert_eq!(relabelled("8.63GiB resrved in total by Pytorch"), "8.63GiB reserved in total by PyTorch");
        assert_eq!(relabelled("5.99 GiB alredy allocated"), "5.99 GiB already allocated");
        assert_eq!(relabelled("1.7GiB free"), "1.7GiB free");
        assert_eq!(relabelled("3.00 GiB held by nobody"), "3.00 GiB held by nobody");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
