//! Foreign data → dumps: TensorFlow OOM logs and PyTorch memory snapshots, so that what
//! users already have gets the same report, verdict and UI as oomscope's own recordings.

pub(crate) mod figures;
pub mod message;
pub mod other_error;
pub mod paste;
pub mod snapshot;
pub mod tf_log;
pub mod tf_variables;
pub mod torch_frames;
pub mod torch_snapshot;

use oomscope_format::{Dump, InputError};

use std::path::Path;

/// The formats `oomscope import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    TfLog,
    TorchSnapshot,
    /// An out-of-memory message (PyTorch, XLA, cuBLAS/cuDNN, TensorFlow without its dump).
    Message,
}

/// Which importer reads `bytes` ([`crate::input_kind::importer`], where every "what is
/// this file" is decided).
pub fn detect(path: &Path, bytes: &[u8]) -> From {
    crate::input_kind::importer(path, bytes)
}

/// Imports `bytes` read from `path`; `device` picks a snapshot's device. A text with no
/// out-of-memory error in it, but a failure users take for one (an illegal memory access,
/// host memory), is refused with what it is.
pub fn import(path: &Path, bytes: &[u8], from: Option<From>, device: Option<i64>) -> Result<Dump, InputError> {
    let named = from.is_some();
    if from == Some(From::TorchSnapshot) || from.is_none() && crate::input_kind::is_snapshot(path, bytes) {
        return torch_snapshot::parse(path, bytes, device);
    }
    // Logs pasted from web pages can hold stray bytes; they are not OOM content. A text
    // copied from a JSON string keeps its escapes (`\n`, `\"`): they are undone, and so is
    // what pasting did to it (wrapping, quotes, markdown, prefixes, case). The importer is
    // told from the repaired text, undone once.
    let raw = paste::normalised(&unescape(&String::from_utf8_lossy(bytes)));
    let pasted = paste::undo(&raw);
    let text = pasted.text.as_str();
    // A look-alike's words are looked for as repaired, then as pasted (a line broken mid-word
    // that the repair joined with a space: `an illeg` / `al memory access`). The line an error
    // names is then the paste's own already.
    let look_alike = |path: &Path, text: &str| {
        look_alike(path, text).or_else(|| {
            look_alike(path, &paste::unmarked(&raw)).map(|mut e| {
                e.line = pasted.line_in_repaired(e.line);
                e
            })
        })
    };
    let from = from.unwrap_or_else(|| crate::input_kind::text_importer(text));
    let read = match from {
        From::Message => message::parse(path, text)
            .and_then(|d| refused(path, not_the_devices(&d, text), d))
            .map(|d| bar_instead(path, text, d))
            .map_err(|e| look_alike(path, text).unwrap_or(e)),
        From::TfLog | From::TorchSnapshot => tf_log::parse(path, text)
            .and_then(|d| refused(path, pinned_host(text).map(|l| (l, PINNED_HOST_BFC.to_string())), d))
            .and_then(|d| refused(path, tf_cpu_allocator(text).map(|l| (l, TF_CPU_ALLOCATOR.to_string())), d))
            .and_then(|d| refused(path, host_beside_refusals(&d, text), d))
            .map_err(|e| {
                // Named as a TF log, but a message that the message reader knows: say so, not
                // what a look-alike's marker inside it would suggest.
                if named && message::recognises(text) {
                    return InputError {
                        path: path.to_path_buf(),
                        line: e.line,
                        message: "no TensorFlow allocator report in it, but an out-of-memory message: read it with \
                              --from message, or without --from"
                            .into(),
                    };
                }
                look_alike(path, text).unwrap_or(e)
            }),
    };
    // Not one oomscope knows by name, but an error all the same: said, with its own words.
    // (Not an error line the paste's cut ended inside the start of memory's words: `CUDA out`,
    // `ran out of mem`; what it went on to say is not known.)
    let last = text.lines().count();
    let cut_in_words = pasted.cut
        && text.lines().last().and_then(|l| l.split_whitespace().last()).is_some_and(|w| {
            let w = w.to_ascii_lowercase();
            ["out", "of", "memory", "alloc", "allocate", "resource", "exhausted", "oom"]
                .iter()
                .any(|m| m.starts_with(&w))
        });
    // (Nor a last line cut short that speaks of memory at all: `ValueError: Free memory on
    // device cuda:0 (22.76/24.0 GiB) on startup is less than de` may have gone on to say it ran
    // out; the cut is said instead.)
    // Nor an error line the cut left with its first words only (`RuntimeError: CUDA`,
    // `RuntimeError: cuDNN error:`): what it was is not in the paste.
    let cut_about_memory =
        pasted.cut && text.lines().last().is_some_and(|l| message::contains_ignoring_case(l, "memory"));
    let cut_early =
        |words: &str| pasted.cut && words.split_once(": ").is_none_or(|(_, said)| said.split_whitespace().count() <= 3);
    let read = read.map_err(|e| match other_error::another_error(text) {
        Some((line, words))
            if e.message.starts_with("no out-of-memory")
                && !((cut_in_words || cut_about_memory || cut_early(&words)) && line == last) =>
        {
            InputError {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "not an out-of-memory error: the paste's error is `{words}`, a failure of another kind (nothing in \
                 it says memory ran out). Look that error up as it is; if another run of this program ran out of \
                 memory, paste that run's output"
                ),
            }
        }
        _ => e,
    });
    match read {
        Ok(mut d) => {
            said(&mut d, &pasted);
            Ok(d)
        }
        Err(mut e) => {
            e.line = pasted.line(e.line);
            if pasted.cut && !e.message.starts_with("not an out-of-memory error") {
                e.message.push_str(" (the paste's last line ends mid-way: was it cut short?)");
            }
            Err(e)
        }
    }
}

/// A message without a figure (TensorFlow's `Dst tensor is not initialized`) beside the BFC
/// allocator's occupancy bar: the bar says more (all in use, a peak), and is read instead.
fn bar_instead(path: &Path, text: &str, d: Dump) -> Dump {
    let figureless = d.oom.as_ref().is_none_or(|o| o.requested == 0)
        && d.imported.as_ref().and_then(|i| i.message.as_ref()).is_some_and(|m| m.total.is_none() && m.free.is_none());
    if !figureless || !text.lines().any(tf_log::is_occupancy) {
        return d;
    }
    tf_log::parse(path, text).unwrap_or(d)
}

/// `d`, unless what was read is `found` instead: its line and what it is.
fn refused(path: &Path, found: Option<(usize, String)>, d: Dump) -> Result<Dump, InputError> {
    match found {
        Some((line, message)) => Err(InputError { path: path.to_path_buf(), line, message }),
        None => Ok(d),
    }
}

/// What a message read as the device's out-of-memory error is instead, where its text says
/// so: a pinned host allocator's, a compiler's, a limit on one allocation, a kernel's fault
/// before a library's handle failed.
fn not_the_devices(d: &Dump, text: &str) -> Option<(usize, String)> {
    caching_host(text)
        .map(|l| (l, CACHING_HOST.to_string()))
        .or_else(|| compiler(d, text).map(|l| (l, COMPILER.to_string())))
        .or_else(|| one_allocation_limit(d, text).map(|l| (l, ONE_ALLOCATION_LIMIT.to_string())))
        .or_else(|| handle_after_a_fault(d, text).map(|l| (l.line, told_apart(&l))))
}

/// A look-alike's refusal, in words.
fn told_apart(l: &message::LookAlike) -> String {
    format!("not an out-of-memory error of the GPU: this is {}", l.what)
}

/// The dump read from a paste, with what pasting did (a cut that reached what was read
/// among it) and the lines it names as the paste's own.
fn said(d: &mut Dump, pasted: &paste::Pasted) {
    let Some(i) = d.imported.as_mut() else { return };
    i.pasted.clone_from(&pasted.undone);
    // Lines as the paste has them (a wrapped line is several).
    i.lines_read = i.lines_read.max(pasted.lines as u64);
    let cut = match i.message.as_mut() {
        Some(m) => {
            // The message's lines run on to the paste's last (a cut inside it).
            let reached = (m.line as usize).saturating_sub(1) + message::MESSAGE_LINES >= pasted.last;
            m.line = pasted.line(m.line as usize) as u64;
            for o in &mut m.others {
                o.line = pasted.line(o.line as usize) as u64;
            }
            pasted.cut && reached && m.others.iter().all(|o| (o.line as usize) < pasted.line(pasted.last + 1))
        }
        None => pasted.cut,
    };
    if cut {
        i.pasted.push(oomscope_format::PasteDamage::CutShort);
    }
}

const PINNED_HOST_BFC: &str = "not an out-of-memory error of the GPU: this is TensorFlow's pinned host memory \
     allocator (cuda_host_bfc) running out: page-locked RAM used for copies to and from the GPU, not the GPU's \
     memory. Copy less at once (smaller prefetch buffers or host-side tensors), or give the pinned allocator more \
     (TF_GPU_HOST_MEM_LIMIT_IN_MB)";

/// The line of a TF log whose failures are all of the pinned host memory allocator
/// (`cuda_host_bfc`, `gpu_host_bfc`), not a GPU's.
fn pinned_host(text: &str) -> Option<usize> {
    let mut first = None;
    for (i, l) in text.lines().enumerate() {
        // The allocator's own header, or the tensor's message (`... by allocator gpu_host_bfc`).
        let name = match l.split("Allocator (").nth(1).and_then(|r| r.split(')').next()) {
            Some(name) if tf_log::is_oom_header(l) => name,
            _ => match l.split(" by allocator ").nth(1).filter(|_| l.contains("OOM when allocating")) {
                Some(r) => r.split(|c: char| c.is_whitespace() || c == '\'' || c == '"').next().unwrap_or(""),
                None => continue,
            },
        };
        if !name.contains("host_bfc") {
            return None;
        }
        first.get_or_insert(i + 1);
    }
    first
}

const COMPILER: &str = "not an out-of-memory error of the GPU: this is a compiler running out of host memory \
     (RAM) while building (nvcc, ptxas, cicc, a C++ compiler): nothing ran on the GPU yet. Build with fewer \
     parallel jobs (MAX_JOBS=2, --parallel 2, -j2), or with more RAM or swap";

/// The line where a compiler, building CUDA code, ran out of memory (`ptxas fatal   : Memory
/// allocation failure`, nvcc's front end's `catastrophic error: out of memory`, `cc1plus: out
/// of memory allocating ...`), where what was read is a runtime's failure without figures.
fn compiler(d: &Dump, text: &str) -> Option<usize> {
    let m = d.imported.as_ref()?.message.as_ref()?;
    if !matches!(m.format, oomscope_format::MessageFormat::DeviceRuntime | oomscope_format::MessageFormat::CudaRuntime)
    {
        return None;
    }
    const WORDS: &[&str] = &["ptxas fatal", "catastrophic error", "cc1plus: out of memory", "cicc", "nvcc fatal"];
    let lines: Vec<&str> = text.lines().collect();
    let at = (m.line as usize).saturating_sub(1);
    let near = lines.get(at.saturating_sub(2)..(at + 3).min(lines.len()))?;
    near.iter().any(|l| WORDS.iter().any(|w| l.contains(w))).then_some(m.line as usize)
}

const ONE_ALLOCATION_LIMIT: &str = "not an out-of-memory error of the GPU: this is one buffer larger than the \
     driver allows in a single allocation (Vulkan's maxMemoryAllocationSize, often 4 GiB, whatever the device's memory): \
     a limit of one buffer, not the device running out. Make that buffer smaller (for llama.cpp a smaller \
     --ubatch-size or context), or use a backend without the limit";

/// The line of ggml's Vulkan backend saying one allocation passed the driver's limit for one
/// (`Requested buffer size exceeds device memory allocation limit: ErrorOutOfDeviceMemory`),
/// where what was read is a runtime's failure without figures: the error code is the
/// driver's, the cause the limit.
fn one_allocation_limit(d: &Dump, text: &str) -> Option<usize> {
    let m = d.imported.as_ref()?.message.as_ref()?;
    if !matches!(m.format, oomscope_format::MessageFormat::DeviceRuntime | oomscope_format::MessageFormat::CudaRuntime)
    {
        return None;
    }
    text.lines().position(|l| l.contains("exceeds device memory allocation limit")).map(|i| i + 1)
}

/// A cuDNN or cuBLAS handle that failed without figures, in a text where a kernel's illegal
/// access or failed assert came first: the fault, which leaves the context unusable, is the
/// cause (read as an out-of-memory error, the handle's failure would send the user after
/// memory that was never short).
fn handle_after_a_fault(d: &Dump, text: &str) -> Option<message::LookAlike> {
    let m = d.imported.as_ref()?.message.as_ref()?;
    if !matches!(m.format, oomscope_format::MessageFormat::Cudnn | oomscope_format::MessageFormat::Cublas) {
        return None;
    }
    if let Some(l) = message::root_cause(text).filter(|l| l.line <= m.line as usize) {
        return Some(l);
    }
    // A handle that would not start (not one refused memory: no `ALLOC_FAILED`) in a build
    // without kernels for this GPU, which the program then raised: the build, not memory
    // (TensorFlow's `failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED`, then
    // `CUDA_ERROR_NO_BINARY_FOR_GPU: no kernel image is available`).
    let handle = text.lines().nth((m.line as usize).saturating_sub(1)).unwrap_or("");
    if handle.contains("ALLOC_FAILED") {
        return None;
    }
    let line =
        text.lines().position(|l| l.contains("no kernel image is available") || l.contains("NO_BINARY_FOR_GPU"))?;
    Some(message::LookAlike { line: line + 1, what: message::NO_KERNEL_IMAGE })
}

const CACHING_HOST: &str = "not an out-of-memory error of the GPU: this is a pinned host memory allocator running \
     out (PyTorch's CachingHostAllocator, a runtime's page-locked host buffer): RAM for copies to and from the GPU \
     (`pin_memory=True`, `.pin_memory()`, a host buffer), not the GPU's memory. Pin less at once (fewer DataLoader \
     workers or a smaller prefetch), or pin_memory=False";

/// The line of an out-of-memory error raised in a pinned host allocator: PyTorch's
/// (`cuda runtime error (2) : out of memory at .../THCCachingHostAllocator.cpp:296`) or a
/// driver's page-locked allocation, when no other line of the text is a GPU's out-of-memory
/// error; or one whose traceback's frames are a page-locked host buffer's (AMDGPU.jl's
/// `Mem.HostBuffer`).
fn caching_host(text: &str) -> Option<usize> {
    // (MIOpen's `hipMalloc 8589934592 status: 2` before its host fallback fails too: the
    // device's allocation failed first, with HIP's out-of-memory status.)
    let oom = |l: &str| {
        ["out of memory", "OutOfMemory", "OutOfDeviceMemory", "OUT_OF_MEMORY", "ailed to allocate"]
            .iter()
            .any(|w| l.contains(w))
            || l.contains("Malloc ") && l.trim_end().ends_with("status: 2")
    };
    // PyTorch's pinned allocator; the drivers' page-locked allocations (`failed on
    // cuMemAllocHost: CUDA_ERROR_OUT_OF_MEMORY`); ggml's `Failed to allocate pinned memory`.
    let host = |l: &str| {
        [
            "CachingHostAllocator",
            "pinned memory",
            "pinned host",
            "cuMemAllocHost",
            "cudaHostAlloc",
            "cudaMallocHost",
            "hipHostMalloc",
            "hipMallocHost",
            "page-locked",
        ]
        .iter()
        .any(|w| l.contains(w))
    };
    if let Some(i) = text.lines().position(|l| oom(l) && host(l)) {
        return text.lines().all(|l| !oom(l) || host(l)).then_some(i + 1);
    }
    let frame = text.lines().position(|l| l.contains("Mem.HostBuffer("))?;
    text.lines().any(oom).then_some(frame + 1)
}

const TF_CPU_ALLOCATOR: &str = "not an out-of-memory error of the GPU: this is TensorFlow's CPU allocator (`by \
     allocator cpu`, or a node placed on `/cpu:0`) running out: host memory (RAM), where the op ran on the CPU, not the GPU's memory. Is \
     TensorFlow seeing the GPU? (`tf.config.list_physical_devices('GPU')`; a CPU-only build or a missing CUDA \
     library leaves every op on the CPU.) Otherwise load less into RAM at once";

/// The first line of TensorFlow's `OOM when allocating tensor ... by allocator cpu` when every
/// OOM in the text is its plain CPU allocator's (host memory; the CPU's BFC allocator that
/// oomscope's own tests use is named `bfc_cpu_allocator_for_gpu`, and other allocators' OOMs
/// make the text an OOM of theirs).
fn tf_cpu_allocator(text: &str) -> Option<usize> {
    let mut first = None;
    for (i, l) in text.lines().enumerate() {
        let Some((_, after)) = l.split_once(" by allocator ") else { continue };
        if !l.contains("OOM when allocating") {
            continue;
        }
        let name = after.split(|c: char| c.is_whitespace() || c == '\'' || c == '"').next().unwrap_or("");
        // (`cpu`, and oneDNN builds' `mklcpu`; not `bfc_cpu_allocator_for_gpu`.)
        let name = name.trim_end_matches(['.', ',', ';']);
        if !name.ends_with("cpu") || name.contains("gpu") {
            return None;
        }
        first.get_or_insert(i + 1);
    }
    // A BFC report beside it is a device allocator's, whatever the tensor message says.
    first
        .or_else(|| old_cpu_node(text))
        .filter(|_| !text.contains("BFCAllocator dump") && !text.contains("ran out of memory trying to allocate"))
}

/// The host's memory running out (NumPy's `MemoryError` in a data generator) beside nothing
/// of TensorFlow's but its pool's refusals at start-up (`failed to allocate 6.35G ... from
/// device`, then 10% less): TF went on with a smaller pool; the failure is the host's.
fn host_beside_refusals(d: &Dump, text: &str) -> Option<(usize, String)> {
    if d.oom.is_some() || d.refusals.is_empty() || d.has(oomscope_format::Section::Stats) || !d.regions.is_empty() {
        return None;
    }
    let l = message::not_an_oom(text)?;
    (l.what.contains("host memory") || l.what.contains("(RAM)")).then(|| (l.line, told_apart(&l)))
}

/// TensorFlow 0.x named no allocator (`OOM when allocating tensor with shapedim { size: 5000
/// } ...`): its failing node's `_device="/job:localhost/replica:0/task:0/cpu:0"` says where,
/// when every node the text places is on the CPU and no GPU is named anywhere in it.
fn old_cpu_node(text: &str) -> Option<usize> {
    let first = text.lines().position(|l| l.contains("OOM when allocating") && !l.contains(" by allocator "))?;
    let mut devices = text.match_indices("_device=\"").map(|(i, m)| {
        let rest = &text[i + m.len()..];
        rest[..rest.find('"').unwrap_or(rest.len())].to_ascii_lowercase()
    });
    let on_cpu = devices.next().is_some_and(|d| d.contains("/cpu:") || d.contains("device:cpu"))
        && devices.all(|d| d.contains("/cpu:") || d.contains("device:cpu"));
    let gpu_named = ["/gpu:", "device:GPU", "GPU_0_bfc", "gpu_bfc", "/device:gpu"].iter().any(|g| text.contains(g));
    (on_cpu && !gpu_named).then_some(first + 1)
}

/// A text whose line breaks are `\n` escapes (copied out of JSON) as the lines it stands for.
pub(crate) fn unescape(text: &str) -> String {
    let escaped = text.matches("\\n").count();
    if escaped > 2 && escaped > text.matches('\n').count() {
        text.replace("\\n", "\n").replace("\\\"", "\"").replace("\\t", "\t")
    } else {
        text.to_string()
    }
}

/// The refusal for a text that is another failure than an out-of-memory error.
fn look_alike(path: &Path, text: &str) -> Option<InputError> {
    let l = message::not_an_oom(text)?;
    Some(InputError { path: path.to_path_buf(), line: l.line, message: told_apart(&l) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorFlow 0.x's OOM named no allocator: its node's device says the CPU, unless a GPU
    /// is named anywhere in the text.
    #[test]
    fn an_old_tf_oom_on_a_cpu_node_is_host_memory() {
        let text = "W conv_ops.cc:178] Resource exhausted: OOM when allocating tensor with shapedim { size: 5000 }\n\
                    \t [[Node: Conv2D_2 = Conv2D[T=DT_FLOAT, use_cudnn_on_gpu=true, _device=\"/job:localhost/replica:0/task:0/cpu:0\"](x)]]";
        assert_eq!(tf_cpu_allocator(text), Some(1));
        let on_gpu = text.replace("/cpu:0", "/gpu:0");
        assert_eq!(tf_cpu_allocator(&on_gpu), None);
        let gpu_beside = format!("I gpu_device.cc] Creating TensorFlow device (/gpu:0)\n{text}");
        assert_eq!(tf_cpu_allocator(&gpu_beside), None);
    }

    /// A pinned host allocation that fails alone is host memory; one that failed after the
    /// device's own allocation did (MIOpen's fallback) is the device's out-of-memory error.
    #[test]
    fn a_host_fallback_after_the_device_refused_is_the_devices_failure() {
        let alone = "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingHostAllocator.cpp:296\n";
        assert_eq!(caching_host(alone), Some(1));
        let fallback = "MIOpen(HIP): Warning [default_allocator] hipMalloc 8589934592 status: 2\n\
                        MIOpen Error: /src/hip/handlehip.cpp:117: hipHostMalloc 8589934592 out of memory\n";
        assert_eq!(caching_host(fallback), None);
    }
}
