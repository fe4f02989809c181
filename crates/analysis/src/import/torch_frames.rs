//! Names for an allocation from the frames PyTorch recorded with it
//! (`torch.cuda.memory._record_memory_history`): the aten op it was made for, and the place
//! in the user's own code that asked for it.
//!
//! Frames come innermost first, and mix the recorder itself (`gather_with_cpp`,
//! `CapturedTraceback`), the caching allocator, aten's dispatch (`at::_ops::mm::call`,
//! `wrapper_CUDA_addmm`), the autograd engine, CPython's interpreter, PyTorch's Python code,
//! libraries, and at last the user's own frames. A name made from the first frame is the
//! recorder's (`gather_with_cpp() (memory_snapshot.cpp:0)`): useless to anyone.

use oomscope_dump::Frame;

/// What the frames say of an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    /// `aten::mm`: the op the memory was made for.
    pub op: Option<String>,
    /// `model.py:42 (forward)`: the innermost frame of the user's code.
    pub place: Option<String>,
}

impl Named {
    /// The node name reports rank by: `aten::mm at model.py:42 (forward)`, or either half.
    pub fn node(&self) -> Option<String> {
        match (&self.op, &self.place) {
            (Some(op), Some(place)) if place.starts_with("backward") => Some(format!("{op} in the {place}")),
            (Some(op), Some(place)) => Some(format!("{op} at {place}")),
            (Some(op), None) => Some(op.clone()),
            (None, Some(place)) => Some(place.clone()),
            (None, None) => None,
        }
    }
}

/// The node of blocks recorded without frames: they were allocated before recording began
/// (or recorded without context).
pub const BEFORE_RECORDING: &str = "(allocated before recording began)";

/// Ops that only make the storage another op then fills: the op above them names it.
const STORAGE_OPS: &[&str] = &[
    "empty",
    "empty_strided",
    "empty_memory_format",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "_empty_affine_quantized",
    "resize_",
    "as_strided",
    "set_",
];

/// The aten op a C++ frame names: `at::_ops::addmm::call(...)` or `::redispatch`,
/// `wrapper_CUDA_addmm`, `wrapper_CompositeImplicitAutograd__matmul`.
fn aten_op(function: &str) -> Option<String> {
    if let Some(rest) = function.strip_prefix("at::_ops::") {
        let name = rest.split("::").next()?;
        return (!name.is_empty()).then(|| name.to_string());
    }
    let i = function.find("wrapper_")?;
    let rest = &function[i + "wrapper_".len()..];
    let rest = rest.split(['(', '>', ',']).next()?;
    // `wrapper_CUDA_addmm`, `wrapper_CUDA__empty_strided`, `wrapper_CompositeExplicitAutograd___to_copy`.
    let (_, name) = rest.split_once('_')?;
    let name = name.strip_prefix('_').unwrap_or(name);
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| name.to_string())
}

/// A frame of the user's Python code: a `.py` file outside PyTorch, CPython and installed
/// packages. `library` widens it to installed packages other than PyTorch.
fn python_frame(f: &Frame, library: bool) -> bool {
    let Some(file) = f.file.as_deref() else { return false };
    let file = file.replace('\\', "/");
    if !file.ends_with(".py") || file.starts_with('<') {
        return false;
    }
    let torch = file.contains("/torch/") || file.starts_with("torch/");
    let installed = file.contains("site-packages/") || file.contains("dist-packages/");
    let stdlib = file.contains("/lib/python3") && !installed;
    !torch && !stdlib && (library || !installed)
}

/// Overload names aten joins to the op with `_` in C++ (`add_Tensor`, `sum_dim_IntList`):
/// `aten::add.Tensor` is how PyTorch's profiler and docs write them.
const OVERLOADS: &[&str] = &[
    "dim_IntList",
    "memory_format",
    "Tensor_mode",
    "using_ints",
    "Tensor",
    "Scalar",
    "dim",
    "int",
    "out",
    "self",
    "input",
    "default",
];

/// `add_Tensor` → `add.Tensor`; `_to_copy` stays.
fn dotted(op: &str) -> String {
    for o in OVERLOADS {
        if let Some(base) = op.strip_suffix(o).and_then(|b| b.strip_suffix('_')).filter(|b| !b.is_empty()) {
            return format!("{base}.{o}");
        }
    }
    op.to_string()
}

/// The node an allocation is ranked under, from its frames (innermost first): oomscope's
/// own export names each block in its first frame (`step:N:op tensor`); PyTorch's frames
/// give the aten op and the user's own line.
pub fn node(frames: &[Frame]) -> Option<String> {
    match frames.first().map(|f| (f.file.as_deref(), f.function.as_deref())) {
        Some((Some("step" | "setup"), Some(name))) => Some(name.split(' ').next().unwrap_or(name).to_string()),
        _ => name(frames).node(),
    }
}

/// The op and the place of an allocation, from its frames (innermost first).
pub fn name(frames: &[Frame]) -> Named {
    // aten's own op frames (`at::_ops::mm::call`); the kernel wrappers only when there are
    // none, as their names put the overload first (`wrapper_CUDA_memory_format_empty`).
    let mut ops: Vec<String> = frames
        .iter()
        .filter_map(|f| f.function.as_deref().filter(|n| n.starts_with("at::_ops::")).and_then(aten_op))
        .collect();
    if ops.is_empty() {
        ops = frames.iter().filter_map(|f| f.function.as_deref().and_then(aten_op)).collect();
    }
    let ops: Vec<String> = ops.iter().map(|o| dotted(o)).collect();
    // The innermost op that is not only storage, else the outermost op there is.
    let storage = |o: &str| STORAGE_OPS.contains(&o.split('.').next().unwrap_or(o));
    let op = ops.iter().find(|o| !storage(o)).or(ops.last()).map(|o| format!("aten::{o}"));
    let place = frames
        .iter()
        .find(|f| python_frame(f, false))
        .or_else(|| frames.iter().find(|f| python_frame(f, true)))
        .map(|f| {
            let file = f.file.as_deref().unwrap_or("?").replace('\\', "/");
            let base = file.rsplit('/').next().unwrap_or(&file).to_string();
            format!("{base}:{} ({})", f.line.unwrap_or(0), f.function.as_deref().unwrap_or("?"))
        })
        .or_else(|| backward(frames));
    Named { op, place }
}

/// An allocation of the backward pass has no Python frames (autograd's engine runs it on
/// its own thread): the autograd node says what it was, `backward of addmm`.
fn backward(frames: &[Frame]) -> Option<String> {
    let engine = frames.iter().any(|f| f.function.as_deref().is_some_and(|n| n.contains("autograd::Engine::")));
    if !engine {
        return None;
    }
    let node = frames.iter().filter_map(|f| f.function.as_deref()).find_map(|n| {
        let rest = &n[n.find("autograd::generated::")? + "autograd::generated::".len()..];
        let name = rest.split([':', '(', '_']).next()?;
        let op = name.strip_suffix("Backward0").or_else(|| name.strip_suffix("Backward1")).unwrap_or(name);
        (!op.is_empty()).then(|| op.to_ascii_lowercase())
    });
    Some(match node {
        Some(op) => format!("backward of {op}"),
        None => "backward pass".to_string(),
    })
}

/// True when the name is one of PyTorch's, the C++ runtime's or CPython's own frames (what
/// a user never wrote).
pub fn is_internal(node: &str) -> bool {
    let internal =
        ["memory_snapshot.cpp", "gather_with_cpp", "CUDACachingAllocator", "c10::", "at::", "torch::", "_Py"];
    internal.iter().any(|m| node.contains(m))
}

/// A snapshot's frames (`{name, filename, line}` dicts) as dump frames.
pub fn from_pickle(items: &[crate::pickle::Value]) -> Vec<Frame> {
    items
        .iter()
        .map(|f| Frame {
            ip: 0,
            function: f.get("name").and_then(|v| v.as_str().map(str::to_string)),
            file: f.get("filename").and_then(|v| v.as_str().map(str::to_string)),
            line: f.get("line").and_then(|v| v.as_u64()).and_then(|l| u32::try_from(l).ok()),
        })
        .collect()
}

/// A key that is equal for equal stacks, to name or store each stack once.
pub fn key(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|f| {
            format!(
                "{}|{}|{}\n",
                f.function.as_deref().unwrap_or(""),
                f.file.as_deref().unwrap_or(""),
                f.line.unwrap_or(0)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(file: &str, line: u32, function: &str) -> Frame {
        Frame { ip: 0, function: Some(function.into()), file: Some(file.into()), line: Some(line) }
    }

    fn recorder() -> Vec<Frame> {
        vec![
            f("??", 0, "torch::unwind::unwind()"),
            f("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
            f("memory_snapshot.cpp", 0, "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
            f(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long, CUstream_st*)",
            ),
        ]
    }

    #[test]
    fn a_linear_layer_is_named_by_its_matmul_and_the_users_line() {
        let mut frames = recorder();
        frames.extend([
            f("??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"),
            f(
                "RegisterCUDA.cpp",
                0,
                "at::(anonymous namespace)::wrapper_CUDA_mm(at::Tensor const&, at::Tensor const&)",
            ),
            f("??", 0, "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
            f("??", 0, "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)"),
            f(
                "??",
                0,
                "at::_ops::linear::call(at::Tensor const&, at::Tensor const&, c10::optional<at::Tensor> const&)",
            ),
            f("", 0, "cfunction_call"),
            f("/usr/lib/python3.10/site-packages/torch/nn/modules/linear.py", 114, "forward"),
            f("/usr/local/src/conda/python-3.14.6/Objects/call.c", 361, "_PyObject_Call"),
            f("/home/u/project/model.py", 42, "forward"),
            f("/home/u/project/train.py", 10, "<module>"),
        ]);
        let n = name(&frames);
        assert_eq!(n.op.as_deref(), Some("aten::mm"));
        assert_eq!(n.place.as_deref(), Some("model.py:42 (forward)"));
        assert_eq!(n.node().as_deref(), Some("aten::mm at model.py:42 (forward)"));
        assert!(!is_internal(&n.node().unwrap()));
    }

    #[test]
    fn storage_only_ops_give_way_to_the_op_above() {
        let mut frames = recorder();
        frames.extend([
            f("??", 0, "at::_ops::empty_strided::call(...)"),
            f("??", 0, "at::_ops::_to_copy::call(...)"),
            f("??", 0, "at::_ops::to_dtype_layout::call(...)"),
        ]);
        assert_eq!(name(&frames).op.as_deref(), Some("aten::_to_copy"));
        // Only storage: the outermost says what it was (torch.empty).
        let frames = vec![f("??", 0, "at::_ops::empty_memory_format::call(...)")];
        assert_eq!(name(&frames).op.as_deref(), Some("aten::empty.memory_format"));
        let frames = vec![f("??", 0, "at::_ops::sum_dim_IntList::call(...)")];
        assert_eq!(name(&frames).op.as_deref(), Some("aten::sum.dim_IntList"));
    }

    #[test]
    fn wrapper_names_and_library_code() {
        assert_eq!(
            aten_op("at::(anonymous namespace)::wrapper_CUDA_addmm(at::Tensor const&)").as_deref(),
            Some("addmm")
        );
        assert_eq!(
            aten_op("at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd___to_copy>")
                .as_deref(),
            Some("_to_copy")
        );
        // Only installed libraries above PyTorch: the innermost of them is the place.
        let frames = vec![
            f("/usr/local/lib/python3.10/dist-packages/torch/utils/_device.py", 104, "__torch_function__"),
            f("/usr/local/lib/python3.10/dist-packages/vllm/layers/embedding.py", 31, "create_weights"),
        ];
        assert_eq!(name(&frames).place.as_deref(), Some("embedding.py:31 (create_weights)"));
        assert_eq!(name(&recorder()), Named::default(), "the recorder's frames name nothing");
        // The backward pass runs in autograd's engine, with no Python frame.
        let frames = vec![
            f("??", 0, "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
            f("??", 0, "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor>&&)"),
            f("??", 0, "torch::autograd::Engine::evaluate_function(...)"),
        ];
        assert_eq!(name(&frames).node().as_deref(), Some("aten::mm in the backward of addmm"));
    }
}
