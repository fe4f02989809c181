//! Names for an allocation from the frames PyTorch recorded with it
//! (`torch.cuda.memory._record_memory_history`): the aten op it was made for, and the place
//! in the user's own code that asked for it.
//!
//! Frames come innermost first, and mix the recorder itself (`gather_with_cpp`,
//! `CapturedTraceback`), the caching allocator, aten's dispatch (`at::_ops::mm::call`,
//! `wrapper_CUDA_addmm`), the autograd engine, CPython's interpreter, PyTorch's Python code,
//! libraries, and at last the user's own frames. A name made from the first frame is the
//! recorder's (`gather_with_cpp() (memory_snapshot.cpp:0)`): useless to anyone.

use crate::pickle::Value;
use oomscope_format::{Frame, Kind};
use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

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

/// The node of blocks recorded without frames that the trace did not allocate: they were
/// allocated before recording began. The same name marks a replay's starting state as its
/// peak.
pub const BEFORE_RECORDING: &str = oomscope_core::record::BEFORE_RECORDING;

/// The node of blocks allocated while recording, with no frames, when other entries have
/// some: recorded with Python frames only (`stacks="python"`), an allocation made on a thread
/// that runs no Python has none — the backward pass (autograd's engine thread), a C++ thread.
pub const NO_PYTHON_FRAMES: &str = "(no Python frames: the backward pass, or a thread without Python)";

/// The node of blocks allocated while recording when no entry has frames (recorded without
/// context).
pub const NO_FRAMES: &str = "(recorded without frames)";

/// The node of a block without frames: before recording began, or allocated while recording
/// (`in_trace`) on a thread without Python (`frames_elsewhere`), or recorded without context.
pub fn unframed(in_trace: bool, frames_elsewhere: bool) -> &'static str {
    match (in_trace, frames_elsewhere) {
        (false, _) => BEFORE_RECORDING,
        (true, true) => NO_PYTHON_FRAMES,
        (true, false) => NO_FRAMES,
    }
}

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
    // Copied only when it has backslashes: every frame is looked at, most never need it.
    let file: Cow<str> = if file.contains('\\') { Cow::Owned(file.replace('\\', "/")) } else { Cow::Borrowed(file) };
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
    // The node's class: `autograd::generated::AddmmBackward0::apply` or
    // `AddmmBackward0_apply_functional`; not the helpers beside them
    // (`autograd::generated::details::mm_mat1_backward`).
    let node = frames.iter().filter_map(|f| f.function.as_deref()).find_map(|n| {
        let rest = &n[n.find("autograd::generated::")? + "autograd::generated::".len()..];
        let name = rest.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
        let at = name.rfind("Backward")?;
        let op = &name[..at];
        (!op.is_empty() && name[at + "Backward".len()..].chars().all(|c| c.is_ascii_digit()))
            .then(|| op.to_ascii_lowercase())
    });
    Some(match node {
        Some(op) => format!("backward of {op}"),
        None => "backward pass".to_string(),
    })
}

/// What an allocation is for, as far as its frames say (innermost first): the autograd
/// engine's accumulation of a weight's gradient is a gradient, its other work the backward
/// pass's tensors; an optimizer's `step` is optimizer state; a module's construction,
/// `Module.to()`/`_apply`, `torch.nn.init` and `load_state_dict` make weights; a `forward`
/// makes activations. Anything else is not said (`Kind::Unknown`).
pub fn kind(frames: &[Frame]) -> Kind {
    fn function(f: &Frame) -> &str {
        f.function.as_deref().unwrap_or("")
    }
    let file = |f: &Frame| f.file.as_deref().unwrap_or("").replace('\\', "/");
    if frames.iter().any(|f| function(f).contains("autograd::Engine::")) {
        let accumulate = frames.iter().any(|f| function(f).contains("AccumulateGrad"));
        return if accumulate { Kind::Gradient } else { Kind::Backward };
    }
    // The innermost Python frame that says what the code around the allocation was doing.
    for f in frames.iter().filter(|f| file(f).ends_with(".py")) {
        let (file, name) = (file(f), function(f));
        if file.contains("/torch/optim/") {
            return Kind::Optimizer;
        }
        if file.ends_with("torch/nn/init.py")
            || (file.ends_with("torch/nn/modules/module.py")
                && matches!(name, "_apply" | "to" | "cuda" | "load_state_dict" | "_load_from_state_dict"))
            || (file.contains("/torch/nn/modules/") && matches!(name, "__init__" | "reset_parameters"))
        {
            return Kind::Weight;
        }
        if name == "forward" || name == "_call_impl" {
            return Kind::Activation;
        }
    }
    Kind::Unknown
}

/// True when the name is one of PyTorch's, the C++ runtime's or CPython's own frames (what
/// a user never wrote).
pub fn is_internal(node: &str) -> bool {
    let internal =
        ["memory_snapshot.cpp", "gather_with_cpp", "CUDACachingAllocator", "c10::", "at::", "torch::", "_Py"];
    internal.iter().any(|m| node.contains(m))
}

/// The longest function or file name kept, in bytes; a longer one is cut and ends in `…`.
/// No real path or C++ signature comes near it, and it keeps a hostile snapshot from making
/// each frame copy megabytes.
pub const MAX_NAME: usize = 4096;

/// What reading a snapshot of `len` bytes may build (frames, names, blocks, events), in
/// bytes: 32 times the file, and at least 256 MiB. Real snapshots build a few times their
/// size; only one that references the same values over and over builds more.
pub fn budget(len: usize) -> u64 {
    (256u64 << 20).max(32u64.saturating_mul(len as u64))
}

/// A snapshot that would build more than its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    pub limit: u64,
}

impl OverBudget {
    /// Why the snapshot is refused, for the user.
    pub fn message(&self) -> String {
        format!(
            "the snapshot expands to more than {} MiB of frames, blocks and events when read (the limit is 32 times \
             its size, at least 256 MiB): it repeats the same values far more than a real snapshot does; it is \
             damaged, or too large to import",
            self.limit >> 20
        )
    }
}

/// A name as kept: cut at [`MAX_NAME`] bytes, on a character boundary.
fn capped(s: &Rc<str>) -> Rc<str> {
    if s.len() <= MAX_NAME {
        return s.clone();
    }
    let mut end = MAX_NAME - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Rc::from(format!("{}…", &s[..end]))
}

/// A frame as string ids and its line.
#[derive(Clone, Copy)]
struct Parsed {
    function: Option<u32>,
    file: Option<u32>,
    line: Option<u32>,
}

/// The stacks of one snapshot: its frames lists (`{name, filename, line}` dicts, innermost
/// first) as numbered stacks, equal stacks one number.
///
/// Each list, frame dict and string the pickle shares is read once (known by its identity,
/// the values kept alive so that identity stays theirs) and each distinct name kept once, so
/// the work is bounded by the file however often a snapshot references the same frames.
/// Copying a stack's frames out is charged to the budget.
pub struct Stacks {
    limit: u64,
    used: u64,
    /// Frames read, each shared list once.
    read: u64,
    lists: HashMap<usize, (Value, Option<u32>)>,
    frame_of: HashMap<usize, (Value, u32)>,
    str_of: HashMap<usize, (Value, u32)>,
    strs: Vec<Rc<str>>,
    str_index: HashMap<Rc<str>, u32>,
    frames: Vec<Parsed>,
    /// By function, file and line, an absent one as empty or 0.
    frame_index: HashMap<(u32, u32, u32), u32>,
    stacks: Vec<Rc<[u32]>>,
    stack_index: HashMap<Rc<[u32]>, u32>,
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stacks({} stacks, {} of {} bytes)", self.stacks.len(), self.used, self.limit)
    }
}

/// The string id of the empty name.
const EMPTY: u32 = 0;

impl Stacks {
    /// For a snapshot of `len` bytes.
    pub fn new(len: usize) -> Stacks {
        let mut s = Stacks {
            limit: budget(len),
            used: 0,
            read: 0,
            lists: HashMap::new(),
            frame_of: HashMap::new(),
            str_of: HashMap::new(),
            strs: Vec::new(),
            str_index: HashMap::new(),
            frames: Vec::new(),
            frame_index: HashMap::new(),
            stacks: Vec::new(),
            stack_index: HashMap::new(),
        };
        s.intern(Rc::from(""));
        s
    }

    /// Counts `bytes` built from the snapshot against its budget.
    pub fn charge(&mut self, bytes: usize) -> Result<(), OverBudget> {
        self.used = self.used.saturating_add(bytes as u64);
        if self.used > self.limit {
            return Err(OverBudget { limit: self.limit });
        }
        Ok(())
    }

    /// Bytes charged so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Frames read so far: a list shared by many blocks counts once.
    pub fn frames_read(&self) -> u64 {
        self.read
    }

    fn intern(&mut self, s: Rc<str>) -> u32 {
        if let Some(&id) = self.str_index.get(&s) {
            return id;
        }
        let id = self.strs.len() as u32;
        self.strs.push(s.clone());
        self.str_index.insert(s, id);
        id
    }

    fn string(&mut self, v: Option<Value>) -> Option<u32> {
        let v = v?;
        let Value::Str(s) = &v else { return None };
        let key = v.identity()?;
        if let Some((_, id)) = self.str_of.get(&key) {
            return Some(*id);
        }
        let id = self.intern(capped(s));
        self.str_of.insert(key, (v, id));
        Some(id)
    }

    fn frame(&mut self, f: &Value) -> u32 {
        let key = f.identity().filter(|_| f.is_dict());
        if let Some((_, id)) = key.and_then(|k| self.frame_of.get(&k)) {
            return *id;
        }
        let function = self.string(f.get("name"));
        let file = self.string(f.get("filename"));
        let line = f.get("line").and_then(|v| v.as_u64()).and_then(|l| u32::try_from(l).ok());
        let next = self.frames.len() as u32;
        let id = *self
            .frame_index
            .entry((function.unwrap_or(EMPTY), file.unwrap_or(EMPTY), line.unwrap_or(0)))
            .or_insert(next);
        if id == next {
            self.frames.push(Parsed { function, file, line });
        }
        if let Some(k) = key {
            self.frame_of.insert(k, (f.clone(), id));
        }
        id
    }

    /// The stack of a frames list; `None` when it is not a list or holds no frame.
    pub fn stack(&mut self, frames: &Value) -> Option<u32> {
        let key = frames.identity()?;
        if let Some((_, id)) = self.lists.get(&key) {
            return *id;
        }
        let items = frames.items()?;
        self.read += items.len() as u64;
        let ids: Vec<u32> = items.iter().map(|f| self.frame(f)).collect();
        let id = if ids.is_empty() {
            None
        } else {
            let ids: Rc<[u32]> = Rc::from(ids);
            let next = self.stacks.len() as u32;
            let id = *self.stack_index.entry(ids.clone()).or_insert(next);
            if id == next {
                self.stacks.push(ids);
            }
            Some(id)
        };
        self.lists.insert(key, (frames.clone(), id));
        id
    }

    /// The frames of stack `id` (from [`Stacks::stack`]) as dump frames, charged.
    pub fn frames(&mut self, id: u32) -> Result<Vec<Frame>, OverBudget> {
        let Some(ids) = self.stacks.get(id as usize).cloned() else { return Ok(Vec::new()) };
        let len = |s: Option<u32>| s.map_or(0, |i| self.strs[i as usize].len());
        let bytes: usize = ids
            .iter()
            .map(|&f| {
                let p = self.frames[f as usize];
                std::mem::size_of::<Frame>() + len(p.function) + len(p.file)
            })
            .sum();
        self.charge(bytes)?;
        let text = |s: Option<u32>| s.map(|i| self.strs[i as usize].to_string());
        Ok(ids
            .iter()
            .map(|&f| {
                let p = self.frames[f as usize];
                Frame { ip: 0, function: text(p.function), file: text(p.file), line: p.line }
            })
            .collect())
    }
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

    /// A protocol 2 pickle: `[[F, F], [F, F]]`, two lists of one frame dict F shared through
    /// the memo, its file name `file` bytes long.
    fn three_lists(file: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2, b']', b'(', b'}', b'q', 0, b'('];
        for (k, v) in [("name", "forward".to_string()), ("filename", format!("/u/{}.py", "m".repeat(file)))] {
            for s in [k, &v] {
                p.push(b'X');
                p.extend_from_slice(&(s.len() as u32).to_le_bytes());
                p.extend_from_slice(s.as_bytes());
            }
        }
        p.extend_from_slice(b"X\x04\x00\x00\x00lineK\x2au");
        // [F, F] twice, as two lists.
        p.extend_from_slice(b"0](h\x00h\x00e](h\x00h\x00e");
        p.extend_from_slice(b"e.");
        p
    }

    #[test]
    fn equal_stacks_are_one_stack_and_long_names_are_cut() {
        let v = crate::pickle::read(&three_lists(10_000)).unwrap();
        let lists = v.items().unwrap();
        assert_eq!(lists.len(), 2);
        let mut stacks = Stacks::new(1000);
        let (a, b) = (stacks.stack(&lists[0]), stacks.stack(&lists[1]));
        assert!(a.is_some() && a == b, "{a:?} {b:?}");
        assert_eq!(stacks.used(), 0, "reading a stack copies nothing");
        let frames = stacks.frames(a.unwrap()).unwrap();
        assert_eq!(frames.len(), 2);
        let file = frames[0].file.as_deref().unwrap();
        assert!(file.len() == MAX_NAME && file.ends_with('…') && file.starts_with("/u/mmm"), "{}", file.len());
        assert_eq!((frames[0].function.as_deref(), frames[0].line), (Some("forward"), Some(42)));
        assert!(stacks.used() > 2 * MAX_NAME as u64);
        // Short names are kept whole.
        let v = crate::pickle::read(&three_lists(10)).unwrap();
        let mut stacks = Stacks::new(1000);
        let id = stacks.stack(&v.items().unwrap()[0]).unwrap();
        assert_eq!(stacks.frames(id).unwrap()[0].file.as_deref(), Some("/u/mmmmmmmmmm.py"));
    }

    #[test]
    fn the_budget_is_32_times_the_file_and_at_least_256_mib() {
        assert_eq!(budget(1000), 256 << 20);
        assert_eq!(budget(100 << 20), 3200 << 20);
        let mut stacks = Stacks::new(1000);
        assert!(stacks.charge(200 << 20).is_ok());
        let e = stacks.charge(100 << 20).unwrap_err();
        assert!(e.message().contains("expands to more than 256 MiB"), "{}", e.message());
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
