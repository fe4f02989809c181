"""oomscope inside a PyTorch process: loaded by oomscope's sitecustomize under `oomscope run`,
or by `oomscope.install()` in a process that runs already (a notebook).

When `torch` is imported, this installs `liboomscope.so` as PyTorch's CUDA allocator
(`CUDAPluggableAllocator`) and names every allocation by module path and op:
`ResNet.layer1.0.conv1/aten::convolution` in the forward pass,
`ResNet.layer1.0.conv1/aten::convolution_backward` in the backward pass. A module's path is
the one its root's `named_modules()` gives, whatever holds it (a `ModuleList`, a wrapper
that calls its model's `forward`: PEFT, DDP's `module.`, `torch.compile`'s `_orig_mod.`). It marks a step
at each optimizer step. An OOM reaches the script as `torch.cuda.OutOfMemoryError` (a
`RuntimeError`) whose text starts "CUDA out of memory. Tried to allocate", so the script's
own handlers and accelerate's batch-size finder keep working. With OOMSCOPE_DUMP_AT_EXIT it
writes the dump at exit from an `atexit` handler, while the program's globals still hold
their tensors (the interpreter frees them as it shuts down, before the library's own
destructor runs).

What each allocation is for is recorded with it (its kind): a module's forward makes
activations, a backward pass its own tensors (gradients of activations) and the weights'
gradients, an optimizer step optimizer state, DDP's and FSDP's communication collective
buffers, and what the training loop brings to the GPU outside all of these inputs. What is
known only later is said then, by tensor: at each forward of a root module its parameters
and buffers are named `Net.head/weight` (kind weight), whatever function allocated them
(initialisation, `.to()`, `load_state_dict`, FSDP's sharding); before each optimizer step
the gradients `Net.head/weight.grad`; after it the optimizer's state
`AdamW.state/Net.head/weight.exp_avg`.

Op names come from a torch function mode (`TorchFunctionMode`): the torch function the
program called (`linear`, `conv2d`, `zeros_like`), which changes nothing PyTorch does in
training. The backward pass is named by the autograd node (`AddmmBackward0`) through hooks
on the nodes the forward pass made. A torch *dispatch* mode would name aten ops
(`aten::addmm`), but while one is active PyTorch takes out-of-place paths in composite ops
("composite compliance": `linear` on a 3-D input allocates its output twice), so the program
would run out of memory where PyTorch alone would not; it is there only on request
(OOMSCOPE_OPS=aten).

Settings (environment, set by `oomscope run`): OOMSCOPE_LIB (the library), OOMSCOPE_NO_OPS=1
(module paths only: no function mode, for the least overhead or with torch.compile),
OOMSCOPE_OPS=aten (aten op names through a dispatch mode, see above),
OOMSCOPE_TORCH_EMULATE=1 (on a machine without CUDA, record CPU tensors as if they were on
the GPU: for trying the naming, and for oomscope's own tests), OOMSCOPE_TORCH_STANDIN=1 (the
tests' stand-in torch: install even on the simulated device).
"""

import atexit
import ctypes
import functools
import os
import sys
import threading
import weakref
from typing import Any, List, Optional

# (The emulation's rules: what a GPU allocates where the CPU allocates otherwise; imported
# once, as the function and dispatch modes read its counters on every op.)
from . import _abi, _gpu, _watch
from ._log import say as _say, swallowed as _swallowed


class _State:
    """What the hook holds in a process, in one place."""

    def __init__(self) -> None:
        self.lib: Optional[ctypes.CDLL] = None
        self.installed = False
        # The autograd nodes are named by hooks (the function mode is on).
        self.names_nodes = False
        # The modes installed, kept alive; the emulator among them.
        self.keep: List[Any] = []
        self.emulator: Optional[Any] = None
        # Optimizer steps taken, and whether step 0 was marked.
        self.steps = 0
        self.steps_started = False
        # Installed by `oomscope.install()`: the report of an OOM is printed from Python,
        # where a notebook shows it (under `oomscope run` the library prints it).
        self.report_at_oom = False
        # Emulation: puts a module's state on the device (`_gpu.install_models`).
        self.place: Optional[Any] = None


_state = _State()

from ._abi import ACTIVATION, BACKWARD, COLLECTIVE, GRADIENT, INPUT, OPTIMIZER, TEMPORARY, UNKNOWN, WEIGHT  # noqa: F401
# Under emulation, the GPU each process stands for: its local rank in a job, as a real job
# puts each rank on `cuda:LOCAL_RANK`.
_EMULATED_DEVICE = int(os.environ.get("LOCAL_RANK", "0") or 0)


def _load() -> ctypes.CDLL:
    if _state.lib is None:
        _state.lib = _abi.load(os.environ["OOMSCOPE_LIB"])
    return _state.lib


def watch_for_torch() -> None:
    """Installs oomscope when (and only if) the program imports torch."""
    _watch.when_imported(["torch"], lambda _name, torch: _on_torch(torch))


def _on_torch(torch: Any) -> None:
    if _state.installed:
        return
    _state.installed = True
    try:
        _install(torch)
    except Exception as e:  # never break the user's program
        _say(f"warning: not installed ({type(e).__name__}: {e}); the run goes on with PyTorch's allocator")


def _install(torch):
    # The library words its OOM message as this PyTorch does.
    os.environ["OOMSCOPE_TORCH_VERSION"] = str(getattr(torch, "__version__", ""))
    lib = _load()
    no_ops = os.environ.get("OOMSCOPE_NO_OPS") == "1"
    ops = "none" if no_ops else ("aten" if os.environ.get("OOMSCOPE_OPS") == "aten" else "functions")
    emulate = os.environ.get("OOMSCOPE_TORCH_EMULATE") == "1"
    # A simulated device gives addresses no GPU kernel may touch: never under a real torch
    # with CUDA (OOMSCOPE_TORCH_STANDIN=1 is for oomscope's tests, with a stand-in torch).
    simulated = os.environ.get("OOMSCOPE_DEVICE", "cuda").startswith("sim:")
    if os.environ.get("OOMSCOPE_TORCH_STANDIN") == "1":
        simulated = False
    if torch.cuda.is_available() and simulated and not emulate:
        _say("note: the simulated device cannot hold real CUDA tensors (use --device cuda); nothing to watch")
        return
    if torch.cuda.is_available() and not simulated:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            os.environ["OOMSCOPE_LIB"], "oomscope_torch_malloc", "oomscope_free"
        )
        inner = allocator._allocator
        # torch.cuda.empty_cache() calls the reset hook; set_per_process_memory_fraction
        # the memory-fraction hook.
        for setter, fn in (
            ("set_record_stream_fn", lib.oomscope_record_stream),
            ("set_reset_fn", lib.oomscope_empty_cache),
            ("set_memory_fraction_fn", lib.oomscope_set_memory_fraction),
        ):
            if hasattr(inner, setter):
                getattr(inner, setter)(ctypes.cast(fn, ctypes.c_void_p).value)
        torch.cuda.memory.change_current_allocator(allocator)
    elif not emulate:
        _say("note: this PyTorch sees no CUDA device; nothing to watch")
        return
    else:
        _install_emulated_cache_calls(torch, lib)
        _gpu.install(torch, lib)
        _state.place = _gpu.install_models(torch, lambda t: _state.emulator and _state.emulator.place(t))
        _gpu.install_data(torch, lambda: _state.emulator)
    _install_exit_dump(lib)
    # The training loop's own allocations (outside modules, backward passes and optimizer
    # steps) bring data to the GPU.
    lib.oomscope_kind_set(INPUT)
    _install_names(torch, lib, ops=ops, emulate=emulate)
    _install_backward_errors(torch)
    _install_steps(torch, lib)
    _install_weights(torch, lib)
    _install_fsdp(torch, lib)


def _install_exit_dump(lib):
    """The dump at exit, written by an `atexit` handler: those run before the interpreter
    tears down its modules, whose globals (a model, a cache of tensors) free their memory
    then; the library's destructor comes after and writes no second one. A process that
    never allocated (a launcher, a DataLoader worker) writes none."""
    if os.environ.get("OOMSCOPE_DUMP_AT_EXIT", "0") in ("", "0", "false", "no"):
        return

    def dump_at_exit():
        try:
            lib.oomscope_dump_at_exit()
        except Exception as e:  # never break the program's exit
            _swallowed("dump_at_exit", e)
            pass

    atexit.register(dump_at_exit)


def _install_emulated_cache_calls(torch, lib):
    """Emulation: no CUDA, so PyTorch would ignore empty_cache and refuse a memory
    fraction; both go to oomscope's allocator instead."""

    def empty_cache():
        lib.oomscope_empty_cache()

    def set_per_process_memory_fraction(fraction, device=None):
        if not isinstance(fraction, float) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        index = device if isinstance(device, int) else getattr(device, "index", None) or 0
        lib.oomscope_set_memory_fraction(fraction, index)

    torch.cuda.empty_cache = empty_cache
    torch.cuda.memory.empty_cache = empty_cache
    torch.cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    torch.cuda.memory.set_per_process_memory_fraction = set_per_process_memory_fraction
    _install_emulated_memory_calls(torch, lib)


class _Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "size limit bytes_in_use peak_bytes_in_use pool_bytes peak_pool_bytes largest_free_block "
            "num_allocs num_frees num_ooms live_allocations"
        ).split()
    ] + [("fragmentation", ctypes.c_double)]


class _Peaks:
    """Peaks since the program's last `reset_peak_memory_stats()` (the allocator's own
    peaks until it calls it): followed at each emulated allocation once it has."""

    reset = False
    allocated = 0
    reserved = 0


_peaks = _Peaks()


def _stats(lib, device=None):
    s = _Stats()
    s.size = ctypes.sizeof(_Stats)
    index = device if isinstance(device, int) else getattr(device, "index", None) or 0
    return s if lib.oomscope_stats(index, ctypes.byref(s)) == 0 else None


def _follow_peaks(lib):
    """After an emulated allocation: the peaks since the last reset."""
    if _peaks.reset:
        s = _stats(lib)
        if s is not None:
            _peaks.allocated = max(_peaks.allocated, s.bytes_in_use)
            _peaks.reserved = max(_peaks.reserved, s.pool_bytes)


def _install_emulated_memory_calls(torch, lib):
    """Emulation: the program's own memory calls (`torch.cuda.max_memory_allocated()`,
    `reset_peak_memory_stats()`, `synchronize()`, `memory._record_memory_history` and
    `_dump_snapshot`: training scripts that profile themselves) answer with the emulated
    device's figures, where a PyTorch without CUDA answers 0 or raises."""
    lib.oomscope_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]

    def figure(name):
        def read(device=None):
            s = _stats(lib, device)
            if s is None:
                return 0
            if _peaks.reset and name == "peak_bytes_in_use":
                return max(_peaks.allocated, s.bytes_in_use)
            if _peaks.reset and name == "peak_pool_bytes":
                return max(_peaks.reserved, s.pool_bytes)
            return int(getattr(s, name))

        return read

    def reset_peak_memory_stats(device=None):
        s = _stats(lib, device)
        _peaks.reset = True
        _peaks.allocated = s.bytes_in_use if s is not None else 0
        _peaks.reserved = s.pool_bytes if s is not None else 0

    def synchronize(device=None):
        lib.oomscope_synchronize()

    def record_memory_history(*args, **kwargs):
        # oomscope keeps every allocation's history already.
        return None

    def dump_snapshot(filename="dump_snapshot.pickle"):
        """oomscope's state as a PyTorch memory snapshot (what `memory_viz` reads): its dump,
        exported by the oomscope command."""
        import subprocess
        import tempfile

        from . import _paths

        with tempfile.TemporaryDirectory(prefix="oomscope-snapshot-") as tmp:
            dump = os.path.join(tmp, "dump.json")
            lib.oomscope_dump.argtypes = [ctypes.c_char_p]
            if lib.oomscope_dump(dump.encode()) != 0:
                raise RuntimeError("oomscope could not write its state for _dump_snapshot")
            subprocess.run(
                [_paths.binary(), "export", dump, "--format", "torch-snapshot", "--output", str(filename)],
                check=True,
                capture_output=True,
            )

    calls = {
        "memory_allocated": figure("bytes_in_use"),
        "max_memory_allocated": figure("peak_bytes_in_use"),
        "memory_reserved": figure("pool_bytes"),
        "max_memory_reserved": figure("peak_pool_bytes"),
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "synchronize": synchronize,
    }
    for name, fn in calls.items():
        setattr(torch.cuda, name, fn)
        if hasattr(torch.cuda.memory, name):
            setattr(torch.cuda.memory, name, fn)
    torch.cuda.memory._record_memory_history = record_memory_history
    torch.cuda.memory._dump_snapshot = dump_snapshot


# ---- names ----------------------------------------------------------------------------


def _oom_error(torch, e):
    """oomscope's OOM arrives as `torch.cuda.OutOfMemoryError` (the C ABI throws PyTorch's
    own exception type when it finds PyTorch's libc10), or else as the `RuntimeError`
    PyTorch makes of a pluggable allocator's C++ exception: the program gets
    `torch.cuda.OutOfMemoryError` with the same text either way, as PyTorch's own allocator
    raises it, its report said once as it passes the first frame. None when there is nothing
    to replace (re-raised as it is)."""
    if not getattr(e, "_oomscope_said", False):
        try:
            # An OOM in a convolution, held while cuDNN might go on without it: an error
            # reached the program instead (the OOM itself, or cuDNN's "Unable to find a valid
            # cuDNN algorithm" once every algorithm's workspace failed).
            _state.lib.oomscope_say_held_report()
        except Exception as failure:  # no library, or one without the call: nothing held
            _swallowed("say_held_report", failure)
    text = str(e)
    if not text.startswith("CUDA out of memory."):
        return None
    if not getattr(e, "_oomscope_said", False):
        _said(e)
        _reported(text)
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return None
    oom = torch.cuda.OutOfMemoryError(text)
    _said(oom)
    return oom


def _said(e):
    try:
        e._oomscope_said = True
    except Exception:  # an exception type without a __dict__
        pass


def _reported(message: str) -> None:
    """An OOM on its way to the program: under `oomscope.install()`, its report printed first."""
    if _state.report_at_oom:
        from . import _report_at_oom

        _report_at_oom(message)


class _Modules(threading.local):
    def __init__(self):
        # (module, path, boundary grad_fn ids) of the modules whose forward is running.
        self.stack = []


_modules = _Modules()
# id(parent) -> {id(child): attribute name}, rebuilt when a child is not found.
_child_names = {}


def _name_in(parent, child):
    names = _child_names.get(id(parent))
    if names is None or id(child) not in names:
        names = {id(m): n for n, m in parent.named_children()}
        _child_names[id(parent)] = names
    return names.get(id(child))


class _Paths:
    """Each module's path as its root's `named_modules()` gives it (`GPT2LMHeadModel.
    transformer.h.3.attn`): the one scheme weights, gradients and optimizer state are named
    by too. A module is found whatever holds it (a `ModuleList` iterated, never called; a
    wrapper that calls its model's `forward` directly, as PEFT's does) and wherever it runs
    (gradient checkpointing runs a layer again inside the backward pass)."""

    def __init__(self):
        # id(module) -> (weakref to it, path, id of its root); ids are checked against the
        # weak reference (an id is reused once its module is freed).
        self.by_id = {}
        # Roots whose modules were listed, by id: (weakref, path).
        self.roots = {}
        # (root, module) ids a module was not found under its root with.
        self.missing = set()

    def of(self, module):
        """(path, id of its root) of a module listed under a root, or None."""
        entry = self.by_id.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1], entry[2]
        return None

    def list_root(self, root, path, again=False):
        """Lists `root`'s modules under `path` (`again`: even if listed already)."""
        known = self.roots.get(id(root))
        if known is not None and known[0]() is root and known[1] == path and not again:
            return
        try:
            named = list(root.named_modules(remove_duplicate=True))
        except Exception as e:
            _swallowed("named_modules", e)
            return
        self.roots[id(root)] = (weakref.ref(root), path)
        self.missing.clear()
        for qualified, m in named:
            try:
                ref = weakref.ref(m)
            except TypeError:
                continue
            self.by_id[id(m)] = (ref, f"{path}.{qualified}" if qualified else path, id(root))

    def below(self, root, module):
        """The path of `module` under root module `root` (by id), listing the root's modules
        again once if it is not found (one added since); None if it is not the root's."""
        known = self.of(module)
        if known is not None and known[1] == root:
            return known[0]
        if (root, id(module)) in self.missing:
            return None
        listed = self.roots.get(root)
        if listed is not None and listed[0]() is not None:
            self.list_root(listed[0](), listed[1], again=True)
            known = self.of(module)
            if known is not None and known[1] == root:
                return known[0]
        if len(self.missing) > 10_000:
            self.missing.clear()
        # Not the root's (a module made in a forward, another model called inside this one):
        # not listed again for it.
        self.missing.add((root, id(module)))
        return None


_paths = _Paths()


def _tensors(value):
    """Tensors in a module's inputs or outputs (tuples, lists, dicts, dataclass-likes)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _tag_backward(outputs, path, boundary, hooks):
    """Marks the autograd nodes this module's forward created with its path, so the
    backward pass's allocations are named by module too. Inner modules tagged theirs first
    (their forward ends first); the walk stops at the module's inputs."""
    grad_fns = [t.grad_fn for t in _tensors(outputs) if getattr(t, "grad_fn", None) is not None]
    _tag_nodes(grad_fns, boundary, path, hooks, through_tagged=True)


def _tag_nodes(start, stop, path, hooks, through_tagged):
    """Marks the autograd nodes reachable from `start` (not past the nodes in `stop`) that
    nothing tagged yet with `path`: in their metadata (which the aten dispatch mode reads),
    and, with `hooks`, with a hook naming what each runs, `path/NodeName` (the node's name
    alone when `path` is empty). `through_tagged`: walk on below nodes tagged already."""
    # Node wrappers are created on access and may be freed at once, so their ids are only
    # meaningful while a reference is held: `seen` and `stop` hold them.
    stop_ids = {id(f) for f in stop}
    pending = list(start)
    seen = {}
    while pending:
        fn = pending.pop()
        if fn is None or id(fn) in seen or id(fn) in stop_ids:
            continue
        seen[id(fn)] = fn
        try:
            md = fn.metadata
        except Exception as e:
            _swallowed("_tag_nodes", e)
            continue
        if "oomscope" in md:
            if not through_tagged:
                continue
        else:
            md["oomscope"] = path
            if hooks:
                _hook_node(fn, (f"{path}/{fn.name()}" if path else fn.name()).encode())
        pending.extend(f for f, _ in fn.next_functions)


class _NodeScopes(threading.local):
    def __init__(self):
        # How many names node hooks pushed on this thread and have not taken off, and the
        # last one.
        self.pushed = 0
        self.name = None


_node_scopes = _NodeScopes()


def _enter_node(lib, name, kind=BACKWARD):
    """A node (or a gradient's accumulation, `kind` GRADIENT) begins on this thread: the
    previous one on it is over, whether it ended or raised. One hook per node, before it:
    what the engine does between two nodes (summing gradients for the next) is named by the
    one before."""
    ns = _node_scopes
    while ns.pushed:
        ns.pushed -= 1
        lib.oomscope_scope_pop()
    lib.oomscope_scope_push(name)
    lib.oomscope_kind_set(kind)
    ns.pushed = 1
    ns.name = name


def _leave_nodes(lib):
    """The backward pass is over: this thread (the caller's, where CPU nodes ran) holds no
    node's name any more."""
    ns = _node_scopes
    while ns.pushed:
        ns.pushed -= 1
        lib.oomscope_scope_pop()


def _hook_node(fn, name):
    """While autograd node `fn` runs (on the engine's thread: a GPU's own, or the caller's
    for CPU nodes), its allocations are named `name`."""
    lib = _state.lib

    def before(grad_outputs):
        _enter_node(lib, name)

    try:
        fn.register_prehook(before)
    except Exception as e:  # a node that takes no hooks keeps the module's name off
        _swallowed("before", e)
        pass


def _tag_outside_modules(roots):
    """The nodes a backward pass starts from that no module's forward made (a loss computed
    outside the model) are named by themselves (`NllLossBackward0`); the walk stops at the
    nodes the modules tagged."""
    import torch

    roots = roots if isinstance(roots, (tuple, list)) else (roots,)
    grad_fns = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    _tag_nodes(grad_fns, [], "", hooks=True, through_tagged=False)


# Modules whose parameters' gradients are named.
_grads_named = set()
# The backward pass is named by node hooks (with names by torch function; not under
# --no-ops: each hook costs the backward pass a Python call).


def _hook_parameters(module, path):
    """Names what accumulating each parameter's gradient allocates (the first `.grad`, a
    contiguous copy of a strided one): `Net.head/weight.grad`, from the tensor hook that
    runs before the accumulation."""
    lib = _state.lib
    try:
        params = list(module.named_parameters(recurse=False))
    except Exception as e:
        _swallowed("_hook_parameters", e)
        return
    for pname, p in params:
        if not getattr(p, "requires_grad", False):
            continue
        name = f"{path}/{pname}.grad".encode()

        def before(grad, name=name):
            _enter_node(lib, name, GRADIENT)
            # Accumulation usually keeps the incoming gradient as `.grad`: it is the weight's.
            _tag(grad, name.decode(), GRADIENT)

        try:
            p.register_hook(before)
        except Exception as e:
            _swallowed("before", e)
            pass


def _install_backward_errors(torch):
    """An OOM in the backward pass (raised on autograd's thread, as a RuntimeError with
    PyTorch's text) reaches the program as `torch.cuda.OutOfMemoryError`, as PyTorch's own
    allocator raises it; each pass is numbered for the node hooks."""
    try:
        import torch.autograd as autograd
    except ImportError:
        return

    def wrap(original):
        def run(*args, **kwargs):
            if _state.names_nodes and args:
                _tag_outside_modules(args[0])
            restore = _state.lib.oomscope_kind_set(BACKWARD) if _state.lib is not None else None
            try:
                return original(*args, **kwargs)
            except RuntimeError as e:
                oom = _oom_error(torch, e)
                if oom is None:
                    raise
                raise oom from None
            finally:
                if _state.lib is not None:
                    _leave_nodes(_state.lib)
                    if restore is not None:
                        _state.lib.oomscope_kind_set(restore)

        run.__wrapped__ = original
        run.__name__ = getattr(original, "__name__", "backward")
        run.__doc__ = getattr(original, "__doc__", None)
        return run

    for name in ("backward", "grad"):
        if callable(getattr(autograd, name, None)):
            setattr(autograd, name, wrap(getattr(autograd, name)))


def _install_names(torch, lib, ops, emulate):
    import torch.nn.modules.module as module_hooks

    def pre(module, args):
        stack = _modules.stack
        known = _paths.of(module)
        inner = known is not None and known[1] != id(module)
        recompute = False
        if not stack and inner and torch._C._current_autograd_node() is not None:
            # A layer run again in the backward pass (gradient checkpointing): named by its
            # path (`.../recompute`: torch functions are not seen inside a backward pass),
            # and what it allocates is the backward pass's. The node's name is put back after.
            path = known[0]
            lib.oomscope_scope_clear()
            restore = lib.oomscope_kind_set(BACKWARD)
            kind = BACKWARD
            recompute = True
        elif stack:
            path = _paths.below(stack[-1][6], module)
            if path is None:
                path = f"{stack[-1][1]}.{_name_in(stack[-1][0], module) or type(module).__name__}"
            lib.oomscope_scope_pop()
            restore = None
            recompute = stack[-1][7]
            kind = BACKWARD if recompute else ACTIVATION
        else:
            # A root module (or one of a root's modules called by the training loop itself,
            # named by its path there): start from a clean slate, whatever an exception left
            # behind.
            path = known[0] if inner else type(module).__name__
            if not inner:
                _paths.list_root(module, path)
            lib.oomscope_scope_clear()
            if _state.place is not None:
                # Emulation: a model never moved is on the device from its first forward,
                # before step 0 (as the weights of one moved are).
                restore = lib.oomscope_kind_set(WEIGHT)
                _state.place(module)
                lib.oomscope_kind_set(restore)
            if not _state.steps_started:
                _start_steps(lib)
            _tag_module_state(module, path)
            restore = lib.oomscope_kind_set(ACTIVATION)
            kind = ACTIVATION
        root = stack[-1][6] if stack else (known[1] if known is not None else id(module))
        # A wrapper that communicates (DDP) allocates its buckets in its own forward.
        collective = type(module).__name__ in _COLLECTIVE_WRAPPERS
        scope = f"{path}/buckets" if collective else (f"{path}/recompute" if recompute else path)
        kind = COLLECTIVE if collective else kind
        boundary = [t.grad_fn for t in _tensors(args) if getattr(t, "grad_fn", None) is not None]
        stack.append((module, path, boundary, scope, kind, restore, root, recompute))
        lib.oomscope_scope_push(scope.encode())
        lib.oomscope_kind_set(kind)
        if ops == "functions" and id(module) not in _grads_named:
            _grads_named.add(id(module))
            _hook_parameters(module, path)

    def post(module, args, output):
        stack = _modules.stack
        if not stack or stack[-1][0] is not module:
            return
        _, path, boundary, _, _, restore, _, recompute = stack.pop()
        lib.oomscope_scope_pop()
        if stack:
            lib.oomscope_scope_push(stack[-1][3].encode())
            lib.oomscope_kind_set(stack[-1][4])
        else:
            if restore is not None:
                lib.oomscope_kind_set(restore)
            if recompute and _node_scopes.pushed and _node_scopes.name:
                lib.oomscope_scope_push(_node_scopes.name)
        if torch.is_grad_enabled():
            _tag_backward(output, path, boundary, hooks=ops == "functions")

    module_hooks.register_module_forward_pre_hook(pre)
    module_hooks.register_module_forward_hook(post, always_call=True)
    # Emulation records CPU tensors with a dispatch mode (it sees every tensor made); the
    # names come from the same function mode as on a GPU unless aten names were asked for.
    if ops == "aten" or emulate:
        mode = _OpNames(torch, lib, ops == "aten", emulate)
        mode.__enter__()  # for the rest of the program
        _state.keep.append(mode)
        if emulate:
            _state.emulator = mode
    if ops == "functions":
        _state.names_nodes = True
        try:
            mode = _make_function_mode_class(torch)(lib)
        except Exception as e:  # a torch without function modes: names by module only
            _swallowed("post", e)
            return
        mode.__enter__()
        _state.keep.append(mode)




def _op_name(func):
    try:
        return func._schema.name  # aten::convolution
    except Exception as e:
        _swallowed("_op_name", e)
        return str(func)


def _make_mode_class(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpNames(TorchDispatchMode):
        def __init__(self, lib, ops, emulate):
            super().__init__()
            self.lib = lib
            self.ops = ops
            self.emulate = emulate
            self.live = {}  # emulation: storage data_ptr -> [tensor count, bytes]
            # Emulation, by storage data_ptr: host memory (a dataset's tensors), batches a
            # DataLoader made on the host not yet used on the device, and tensors the program
            # put on the device itself (moved, or made with a device).
            self.host = {}
            self.pending = {}
            self.moved = {}
            self.to_copy = getattr(getattr(torch.ops.aten, "_to_copy", None), "default", None)
            # Emulation: what CUDA's kernels allocate beside their outputs (`_gpu`).
            self.scratch = None
            if emulate:
                try:
                    self.scratch = _gpu.KernelScratch(torch, self)
                except Exception as e:
                    _swallowed("KernelScratch", e)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            _in_dispatch.depth += 1
            try:
                return self._dispatch(func, args, kwargs)
            finally:
                _in_dispatch.depth -= 1

        def _dispatch(self, func, args, kwargs):
            lib = self.lib
            pushed = 0
            if self.emulate:
                if _gpu.fetching.depth:
                    # A DataLoader reading its dataset: what it reads is host memory.
                    for t in _tensors(args):
                        self.to_host(t)
                elif self.pending and not _gpu_paused():
                    for t in _tensors(args):
                        if _storage_key(t) in self.pending:
                            self.arrive(t)
            if self.ops:
                op = _op_name(func)
                node = torch._C._current_autograd_node()
                if node is not None:
                    # Backward, on an autograd thread: name it by the forward's module.
                    try:
                        path = node.metadata.get("oomscope")
                    except Exception as e:
                        _swallowed("__torch_dispatch__", e)
                        path = None
                    lib.oomscope_scope_push(f"{path or 'backward'}/{op}".encode())
                else:
                    lib.oomscope_scope_push(op.encode())
                pushed = 1
            try:
                if self.emulate and self.scratch is not None and func in self.scratch.watched and not _gpu_paused():
                    with self.scratch.around(func, args, kwargs) as after:
                        out = func(*args, **(kwargs or {}))
                        self._record(out)
                        after(out)
                    return out
                out = func(*args, **(kwargs or {}))
                if self.emulate:
                    self._record(out)
                if func is self.to_copy and args:
                    _autocast_copy(torch, args[0], out)
                return out
            except RuntimeError as e:
                oom = _oom_error(torch, e)
                if oom is None:
                    raise
                raise oom from None
            finally:
                if pushed:
                    lib.oomscope_scope_pop()

        def _record(self, out):
            """Emulation: the CPU tensors this op made, allocated in oomscope as if on GPU 0
            (not the CPU's own work where a GPU would do other work: `_gpu`)."""
            if _gpu_paused():
                return
            for t in _tensors(out):
                self._allocate(t)

        def place(self, t):
            """A tensor made in host memory, now on the device (a module moved): allocated
            once."""
            try:
                key = t.untyped_storage().data_ptr()
            except Exception as e:
                _swallowed("place", e)
                return
            if key and key not in self.live:
                self._allocate(t)

        def malloc(self, nbytes):
            """Device memory for a kernel's own use (freed with `free`), as the GPU's
            allocator would serve it; out of memory as a GPU's."""
            restore = self.lib.oomscope_kind_set(TEMPORARY)
            try:
                return self._malloc(nbytes)
            finally:
                self.lib.oomscope_kind_set(restore)

        def _malloc(self, nbytes):
            """An allocation on the emulated device; its OOM raised as PyTorch raises one."""
            ptr = self.lib.oomscope_malloc(nbytes, _EMULATED_DEVICE, None)
            if not ptr:
                # Room for the whole message: its end names this OOM's dump.
                buf = ctypes.create_string_buffer(1 << 16)
                self.lib.oomscope_last_error(buf, 1 << 16)
                text = buf.value.decode(errors="replace")
                _reported(text)
                raise torch.cuda.OutOfMemoryError(text)
            return ptr

        def free(self, ptr):
            self.lib.oomscope_free(ptr, 0, _EMULATED_DEVICE, None)

        def to_host(self, t):
            """Tensor `t` is host memory (a dataset's), unless the program put it on the
            device itself: off the emulated device."""
            key = _storage_key(t)
            if not key or key in self.moved or key in self.host:
                return
            entry = self.live.pop(key, None)
            if entry is not None:
                self.lib.oomscope_free(entry[1], 0, _EMULATED_DEVICE, None)
            _remember(self.host, key, t)

        def pend(self, t):
            """A batch a DataLoader made in host memory: on the device once used there."""
            key = _storage_key(t)
            if key and key not in self.live and key not in self.host and key not in self.pending:
                _remember(self.pending, key, t)

        def arrive(self, t):
            """A tensor in host memory the program uses on the device (moved by it, or read
            by an op there): allocated now, as the copy to the device would be, as an input."""
            key = _storage_key(t)
            if not key:
                return
            self.pending.pop(key, None)
            self.host.pop(key, None)
            if key not in self.live:
                restore = self.lib.oomscope_kind_set(INPUT)
                try:
                    self._allocate(t)
                finally:
                    self.lib.oomscope_kind_set(restore)
                _tag_shapes([t])
            _remember(self.moved, key, t)

        def on_device(self, t):
            """The program put `t` on the device (`.to(device)`, a factory's `device=`): a
            tensor made on the host (a batch, a dataset's, `from_numpy`'s) arrives."""
            key = _storage_key(t)
            if key and key not in self.moved:
                if key in self.live:
                    _remember(self.moved, key, t)
                else:
                    self.arrive(t)

        def _allocate(self, t):
            try:
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
            except Exception as e:
                _swallowed("_record", e)
                return
            if not key or not nbytes or key in self.host:
                return
            entry = self.live.get(key)
            if entry is None:
                entry = self.live[key] = [0, self._malloc(nbytes)]
            entry[0] += 1
            _follow_peaks(self.lib)
            # Freed when the tensor is, as on a GPU: not by weakref's own exit handler,
            # which would free what the program still held before the dump at exit.
            weakref.finalize(t, self._release, key).atexit = False

        def _release(self, key):
            entry = self.live.get(key)
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] == 0:
                del self.live[key]
                self.lib.oomscope_free(entry[1], 0, _EMULATED_DEVICE, None)

    return OpNames


def _autocast_copy(torch, source, out):
    """A parameter cast to another type inside a forward (autocast's copy of a weight for a
    bfloat16 or float16 op, which autocast keeps until its region ends): a weight, not an
    activation, named after the parameter: `Net.fc/weight (bfloat16 copy)`."""
    if not isinstance(source, torch.nn.Parameter) or not isinstance(out, torch.Tensor) or out.dtype == source.dtype:
        return
    name = _param_names.get(id(source))
    # Autocast's own state is off while the cast runs: the cast is told by where it runs.
    if name is not None and _modules.stack:
        _tag(out, f"{name} ({str(out.dtype).replace('torch.', '')} copy)", WEIGHT)


def _storage_key(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return 0


def _remember(table, key, t):
    """`table[key]` while tensor `t` lives (a storage's tensors may outlive it: the table says
    what it says of the storage, the dataset's own tensor or a batch, which the program
    keeps)."""
    table[key] = True
    try:
        weakref.finalize(t, table.pop, key, None).atexit = False
    except TypeError:
        pass


def _gpu_paused():
    """Emulation records nothing of the CPU's own work (`_gpu`) or of a module's construction
    (in host memory until it is moved)."""
    return _gpu.paused.depth > 0 or _gpu.building.depth > 0


def _OpNames(torch, lib, ops, emulate):
    return _make_mode_class(torch)(lib, ops, emulate)


# Names of torch functions, each worked out once: `linear`, `conv2d`, `add` for `__add__`;
# None for what allocates nothing to name (attribute getters).
_function_names = {}


def _function_name(func):
    try:
        return _function_names[func]
    except (KeyError, TypeError):
        pass
    name = getattr(func, "__name__", None)
    # A backward pass is named by its nodes (see `_hook_node`); on CPU they run on the
    # caller's thread, inside whatever the caller named, so `backward` names nothing.
    if not isinstance(name, str) or name in ("__get__", "__set__", "backward", "grad"):
        name = None
    elif name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
    encoded = name.encode() if name else None
    try:
        _function_names[func] = encoded
    except TypeError:
        pass
    return encoded


# Emulation: the functions that move a tensor to a device.
_MOVES = (b"to", b"cuda")


class _InDispatch(threading.local):
    depth = 0


# Emulation: inside an op (the dispatch mode's handler), where the torch functions called are
# the op's own, not the program's.
_in_dispatch = _InDispatch()


def _moved(torch, name, args, kwargs, out):
    """Emulation: the program put a tensor on the device: `.cuda()`, `.to(device)` (not
    `.to(dtype)`), a factory's `device=`. On the CPU the move returns the tensor itself: it
    is allocated on the emulated device now if it was host memory. Not what an op does
    inside (its own calls), nor a module's move (`_gpu` places its state)."""
    if _in_dispatch.depth or _gpu.moving.depth or _gpu_paused():
        return
    emulator = _state.emulator
    device = kwargs.get("device") if kwargs else None
    if name == b"to" and device is None:
        device = next((a for a in args[1:] if isinstance(a, (str, torch.device, torch.Tensor))), None)
    if name == b"cuda" or device is not None:
        for t in _tensors(out):
            emulator.on_device(t)


def _make_function_mode_class(torch):
    from torch.overrides import TorchFunctionMode

    class FunctionNames(TorchFunctionMode):
        """Names what each torch function the program calls allocates. PyTorch takes the
        mode off while its handler runs, so a function's inner calls are named by the
        outermost: what the program wrote."""

        def __init__(self, lib):
            super().__init__()
            self.lib = lib

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = _function_name(func)
            if name is None:
                return func(*args, **(kwargs or {}))
            lib = self.lib
            lib.oomscope_scope_push(name)
            # The training loop's own calls (outside every module, backward pass and step):
            # what they make from the model's outputs (a loss) is an activation, the rest is
            # data brought to the GPU, whose shapes are recorded.
            outside = not _modules.stack and _step_kind.restore is None and not _node_scopes.pushed
            restore = None
            if outside and torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in _tensors(args)):
                restore = lib.oomscope_kind_set(ACTIVATION)
            try:
                if _state.place is not None:
                    # Emulation: the program's `cuda` is the CPU, and CUDA autocast's float32
                    # list (see `_gpu`).
                    func, args, kwargs = _gpu.host_devices(torch, func, name.decode(), args, kwargs)
                    args, kwargs = _gpu.upcast(torch, name.decode(), args, kwargs)
                out = func(*args, **(kwargs or {}))
                if _state.emulator is not None and (name in _MOVES or (kwargs and kwargs.get("device") is not None)):
                    _moved(torch, name, args, kwargs, out)
                if outside and restore is None:
                    _tag_shapes(out)
                return out
            except RuntimeError as e:
                oom = _oom_error(torch, e)
                if oom is None:
                    raise
                raise oom from None
            finally:
                if restore is not None:
                    lib.oomscope_kind_set(restore)
                lib.oomscope_scope_pop()

    return FunctionNames


# ---- what the memory is: tags by tensor --------------------------------------------------

# Wrappers whose own forward allocates communication buffers (DDP's gradient buckets).
_COLLECTIVE_WRAPPERS = {"DistributedDataParallel"}
# The emulated device's allocations by CPU storage (set when emulating).
# id(tensor) -> (the allocation's address, the name and kind it was tagged with).
_tagged = {}
# id(parameter) -> its name, from the root modules seen: names gradients and optimizer state.
_param_names = {}


class _StepKind(threading.local):
    restore = None


_step_kind = _StepKind()


def _allocation(t):
    """(address, device) of the allocation holding tensor `t` on the GPU oomscope serves,
    or None (a CPU tensor, a tensor of no storage)."""
    local = getattr(t, "_local_tensor", None)  # a DTensor (FSDP2): its shard
    if local is not None:
        t = local
    try:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
    except Exception as e:
        _swallowed("_allocation", e)
        return None
    if not ptr:
        return None
    if _state.emulator is not None:
        entry = _state.emulator.live.get(ptr)
        return (entry[1], _EMULATED_DEVICE) if entry else None
    device = getattr(t, "device", None)
    if getattr(device, "type", None) != "cuda":
        return None
    return ptr, device.index or 0


def _tag(t, name, kind):
    """Tells the library what tensor `t`'s allocation is, once per (allocation, name)."""
    where = _allocation(t)
    if where is None or _state.lib is None:
        return
    key = (where[0], name, kind)
    if _tagged.get(id(t)) == key:
        return
    _tagged[id(t)] = key
    _state.lib.oomscope_tag(where[0], where[1], name.encode(), kind)


def _tag_shapes(out):
    """Records the shapes of the tensors an op made: for what the training loop brings to the
    GPU (its inputs), whose shapes set one rank apart from the others."""
    lib = _state.lib
    for t in _tensors(out):
        where = _allocation(t)
        if where is None:
            continue
        dims = tuple(t.shape)
        array = (ctypes.c_int64 * len(dims))(*dims)
        dtype = str(t.dtype).replace("torch.", "").encode()
        lib.oomscope_tag_shape(where[0], where[1], array, len(dims), dtype)


def _state_name(path, qualified):
    """`Net.head/weight` for parameter `head.weight` of root module `Net`."""
    module, _, leaf = qualified.rpartition(".")
    return f"{path}.{module}/{leaf}" if module else f"{path}/{leaf}"


def _tag_module_state(module, path):
    """The parameters and buffers of root module `module` (named `path`), as weights."""
    try:
        params = list(module.named_parameters())
        buffers = list(module.named_buffers())
    except Exception as e:
        _swallowed("_tag_module_state", e)
        return
    for qualified, p in params:
        name = _state_name(path, qualified)
        _param_names[id(p)] = name
        _tag(p, name, WEIGHT)
    for qualified, b in buffers:
        _tag(b, _state_name(path, qualified), WEIGHT)


def _params_of(optimizer):
    for group in getattr(optimizer, "param_groups", ()):
        for p in group.get("params", ()):
            yield p


def _tag_gradients(optimizer):
    """Before a step: the gradients it reads, as the weights' gradients."""
    for p in _params_of(optimizer):
        g = getattr(p, "grad", None)
        if g is not None:
            _tag(g, _param_names.get(id(p), "parameter") + ".grad", GRADIENT)


def _tag_optimizer_state(optimizer):
    """After a step: the state it keeps for each parameter (`exp_avg`, `momentum_buffer`)."""
    import torch

    prefix = type(optimizer).__name__
    state = getattr(optimizer, "state", {})
    for p in _params_of(optimizer):
        for key, value in (state.get(p) or {}).items():
            if isinstance(value, torch.Tensor):
                _tag(value, f"{prefix}.state/{_param_names.get(id(p), 'parameter')}.{key}", OPTIMIZER)


def _with_kind(fn, kind, scope=None):
    """`fn`, its allocations of `kind` (in scope `scope`, when given) on the calling thread."""

    def run(*args, **kwargs):
        lib = _state.lib
        if lib is None:
            return fn(*args, **kwargs)
        restore = lib.oomscope_kind_set(kind)
        if scope:
            lib.oomscope_scope_push(scope(*args).encode() if callable(scope) else scope.encode())
        try:
            return fn(*args, **kwargs)
        finally:
            if scope:
                lib.oomscope_scope_pop()
            lib.oomscope_kind_set(restore)

    # The wrapped function's attributes too (FSDP's `fully_shard.state`).
    functools.update_wrapper(run, fn)
    run._oomscope = True
    return run


def _ours(fn):
    """Whether `fn` is one of this module's wrappers (`__wrapped__` alone does not say: other
    decorators set it too)."""
    return getattr(fn, "_oomscope", False)


def _install_weights(torch, lib):
    """What moves or loads a model's state allocates weights: `Module.to()`/`.cuda()`/
    `.half()` (through `_apply`), `load_state_dict`, DDP's construction (its buckets are
    collective buffers); a parameter or buffer registered on a module is a weight at once."""
    import torch.nn as nn

    for name in ("_apply", "load_state_dict"):
        original = getattr(nn.Module, name, None)
        if original is not None and not _ours(original):
            setattr(nn.Module, name, _with_kind(original, WEIGHT))
    hooks = torch.nn.modules.module
    def registered(module, name, tensor):
        # Returns None: a registration hook that returns a value replaces the tensor.
        if tensor is not None:
            _tag(tensor, f"{type(module).__name__}/{name}", WEIGHT)

    for hook in ("register_module_parameter_registration_hook", "register_module_buffer_registration_hook"):
        register = getattr(hooks, hook, None)
        if register is not None:
            register(registered)
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception as e:
        _swallowed("registered", e)
        return
    if not _ours(DDP.__init__):
        DDP.__init__ = _with_kind(DDP.__init__, COLLECTIVE, "DistributedDataParallel/buckets")


def _install_fsdp(torch, lib):
    """FSDP2 (`fully_shard`): sharding allocates the shards (weights); unsharding before a
    forward or backward allocates all-gather buffers, and a backward's reduce-scatter its
    own (collective buffers), named by what they do."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group_module
        from torch.distributed.fsdp._fully_shard import _fully_shard as shard_module
    except Exception as e:  # a torch without FSDP2, or without distributed
        _swallowed("FSDP2", e)
        return
    for owner, name in ((shard_module, "fully_shard"),):
        fn = getattr(owner, name, None)
        if fn is not None and not _ours(fn):
            wrapped = _with_kind(fn, WEIGHT)
            setattr(owner, name, wrapped)
            for public in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
                mod = sys.modules.get(public)
                if mod is not None and getattr(mod, name, None) is fn:
                    setattr(mod, name, wrapped)
    group = getattr(group_module, "FSDPParamGroup", None)
    if group is None:
        return
    for method, what in (("unshard", "all-gather"), ("wait_for_unshard", "all-gather"), ("post_backward", "reduce-scatter")):
        fn = getattr(group, method, None)
        if fn is not None and not _ours(fn):
            setattr(group, method, _with_kind(fn, COLLECTIVE, f"FSDP/{what}"))


# ---- steps ----------------------------------------------------------------------------



def _start_steps(lib):
    """Marks step 0, once: at the first forward of a root module or the first optimizer
    step, whichever comes first. What was allocated before (the weights, moved to the GPU)
    is before step 0, and a dump at step 0 shows it."""
    if not _state.steps_started:
        _state.steps_started = True
        lib.oomscope_step(0)


def _install_steps(torch, lib):
    """Names the optimizer's allocations (`Adam/aten::zeros_like`: its state) and marks a
    step after each optimizer step (step 0: see `_start_steps`)."""
    from torch.optim import optimizer as optim

    def before_step(optimizer, args, kwargs):
        _start_steps(lib)
        _tag_gradients(optimizer)
        if not _modules.stack:
            lib.oomscope_scope_clear()
            lib.oomscope_scope_push(type(optimizer).__name__.encode())
            _step_kind.restore = lib.oomscope_kind_set(OPTIMIZER)

    def after_step(optimizer, args, kwargs):
        _start_steps(lib)
        if not _modules.stack:
            lib.oomscope_scope_clear()
            restore = getattr(_step_kind, "restore", None)
            if restore is not None:
                lib.oomscope_kind_set(restore)
                _step_kind.restore = None
        _tag_optimizer_state(optimizer)
        _state.steps += 1
        lib.oomscope_step(_state.steps)

    if hasattr(optim, "register_optimizer_step_pre_hook"):
        optim.register_optimizer_step_pre_hook(before_step)
    optim.register_optimizer_step_post_hook(after_step)
