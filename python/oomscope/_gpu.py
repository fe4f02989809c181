"""What a GPU would allocate where the CPU allocates otherwise, for a PyTorch program run on
the CPU with its tensors counted as a simulated GPU's (OOMSCOPE_TORCH_EMULATE=1, what
`oomscope fit` does without a GPU). Each rule says which PyTorch source it follows; the
measured effect of each is in docs/torch.md.

- Attention (`torch.nn.functional.scaled_dot_product_attention`): on the CPU, with dropout
  or a mask, PyTorch runs the math path, which keeps the B*H*L*L scores, their softmax and
  the dropout mask for the backward pass. On a GPU it picks a fused kernel
  (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: flash attention for fp16/bf16
  without a mask, else memory-efficient attention) that keeps the output and a float32
  logsumexp only. Here the math path runs unrecorded, and what the GPU kernel allocates is
  allocated instead, in its order: the forward's output and logsumexp
  (attention.cu: `_efficient_attention_forward`; flash_api.cpp: `mha_fwd`, with its
  2-word RNG state), the backward's gradients and its scratch (attention_backward.cu:
  `_efficient_attention_backward`, grad_out * out and its row sums, then the kernel's
  float32 workspace; flash_api.cpp: `mha_bwd`, `softmax_d` and `dq_accum` with the
  sequence rounded up to 128 and the head size to 32).
- Dropout (`torch.nn.functional.dropout`, training): CUDA runs the fused kernel
  (aten/src/ATen/native/Dropout.cpp: `is_fused_kernel_acceptable` needs a CUDA tensor),
  `native_dropout`, which keeps a one-byte mask for the backward pass; the CPU multiplies by
  a float noise tensor as large as the input. Here `native_dropout` runs, as on CUDA.
- Models are built in host memory and moved: a module's construction (its parameters'
  initialization, a template layer deep-copied, as `nn.TransformerEncoder` does) allocates
  nothing on a GPU when the program builds on the CPU and then calls `.to(device)` or
  `.cuda()`; here what a module's `__init__` makes is not recorded, and its parameters and
  buffers are allocated when it is moved (`Module._apply`: children first, then its own
  parameters, then buffers) or, for a program that never moves it, at its first forward.
- Autocast: the program, seeing no GPU, asks for CPU autocast; CUDA autocast's policy
  differs (aten/src/ATen/autocast_mode.cpp: its float32 list, `pow`, `exp`, `log`,
  `layer_norm`, `softmax`, `log_softmax`, `sum`, the losses, which the CPU's lacks). Under
  CPU autocast, the functions on CUDA's float32 list get float32 inputs, as CUDA autocast
  would give them (the casts are allocations, and what autograd keeps is the float32 copy).
- Kernels' scratch (`_scratch`): the staging buffers of reductions over many rows, each
  thread's cuBLAS workspace, embedding's sort buffers in its backward pass.
- Data: a Dataset's tensors and the batches a DataLoader collates are host memory on a
  GPU until the program moves them (`.to(device)`, which the CPU answers with the tensor
  itself). Here a Dataset's construction and a DataLoader's fetch record nothing, what the
  fetch reads is taken off the device, and a batch is allocated when first moved or read
  (`install_data`).
- A program that names `cuda` itself (`.cuda()`, `device="cuda"`, `.to("cuda:0")`,
  `torch.autocast("cuda")`, `torch.cuda.set_device`) runs: those name the emulated device,
  which is the CPU here (`host_devices`, `install_cuda_names`). `torch.cuda.is_available()`
  stays False, so a program that picks its device runs as it did.
- Optimizers: on CUDA, `torch.optim` defaults to the `foreach` implementation
  (torch/optim/optimizer.py: `_default_to_fused_or_foreach`, for parameters on CUDA), which
  makes each intermediate for all parameters at once; on the CPU it defaults to the loop
  over parameters. Here the default is CUDA's.
"""

import contextlib
import functools
import threading

from . import _scratch
from ._log import swallowed as _swallowed


class _Paused(threading.local):
    depth = 0


paused = _Paused()


class _Pause:
    """Nothing allocated inside is recorded (the CPU's own work, not the GPU's)."""

    def __enter__(self):
        paused.depth += 1

    def __exit__(self, *exc):
        paused.depth -= 1


# Functions (as the program calls them) that CUDA autocast runs in float32; the CPU's autocast
# runs them in the lower precision.
CUDA_FP32 = frozenset(
    (
        "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus "
        "layer_norm group_norm cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss "
        "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
        "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
        "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp softmax log_softmax cumsum cumprod "
        "prod sum norm cross_entropy"
    ).split()
)


def upcast(torch, name, args, kwargs):
    """CUDA autocast's float32 policy under CPU autocast: `args` and `kwargs` with their
    half-precision tensors as float32 when `name` is on CUDA's float32 list."""
    if name not in CUDA_FP32 or not torch.is_autocast_enabled("cpu"):
        return args, kwargs
    low = (torch.float16, torch.bfloat16)

    def up(a):
        if torch.is_tensor(a) and a.dtype in low:
            return a.float()
        if isinstance(a, (list, tuple)) and any(torch.is_tensor(x) and x.dtype in low for x in a):
            return type(a)(up(x) for x in a)
        return a

    return tuple(up(a) for a in args), {k: up(v) for k, v in (kwargs or {}).items()}


def _round(n, to):
    return (n + to - 1) // to * to


def _kernel(torch, q, mask):
    """The fused kernel CUDA picks for these inputs (sdp_utils.cpp: flash first, then
    memory-efficient), or None for the math path."""
    dtype = q.dtype
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
    if q.dim() != 4:
        return None, dtype
    head = q.shape[-1]
    if dtype in (torch.float16, torch.bfloat16) and mask is None and head <= 256 and head % 8 == 0:
        return "flash", dtype
    if dtype in (torch.float16, torch.bfloat16, torch.float32) and head % (4 if dtype == torch.float32 else 8) == 0:
        return "efficient", dtype
    return None, dtype


def _is_cuda(torch, d):
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    # A bare GPU number (`x.to(local_rank)`, `device=0`) names a CUDA device too.
    if isinstance(d, int) and not isinstance(d, bool):
        return True
    return isinstance(d, torch.device) and d.type == "cuda"


def _same(t, *args, **kwargs):
    return t


def host_devices(torch, func, name, args, kwargs):
    """A program's own `cuda` as the emulated device, the CPU: a factory's or a move's
    `device="cuda"`, `.to("cuda")` and `.cuda()` (the tensor itself, as `.to("cpu")` gives
    it), `.pin_memory()` (host memory either way; without CUDA PyTorch refuses it). The
    function and its arguments to call instead; the move is then recorded as any other."""
    if name in ("cuda", "pin_memory") and args and torch.is_tensor(args[0]):
        return _same, args, kwargs
    if kwargs and _is_cuda(torch, kwargs.get("device")):
        kwargs = dict(kwargs, device="cpu")
    if name == "to" and len(args) > 1 and _is_cuda(torch, args[1]):
        # The device comes first after the tensor (`to(device, dtype)`); a dtype is no device.
        args = (args[0], "cpu") + tuple(args[2:])
    return func, args, kwargs


def install_cuda_names(torch):
    """`torch.autocast("cuda", ...)` as CPU autocast (which `upcast` gives CUDA's policy):
    without CUDA, PyTorch turns a CUDA autocast off with a warning, and the program would run
    in float32. `torch.cuda.set_device` and `current_device`, which a program that names its
    GPU calls, answer for the one emulated device."""
    autocast = torch.amp.autocast_mode.autocast
    init = autocast.__init__

    def __init__(self, device_type, *args, **kwargs):
        if device_type == "cuda":
            device_type = "cpu"
        init(self, device_type, *args, **kwargs)

    autocast.__init__ = functools.wraps(init)(__init__)
    torch.cuda.set_device = lambda device: None
    torch.cuda.current_device = lambda: 0


def install(torch, lib):
    """Installs the rules; a rule that cannot be installed leaves the CPU's behaviour."""
    try:
        _install_attention(torch, lib)
    except Exception as e:
        _swallowed("install_attention", e)
    for rule in (_install_foreach, _install_dropout, install_cuda_names):
        try:
            rule(torch)
        except Exception as e:
            _swallowed(rule.__name__, e)


def _install_dropout(torch):
    F = torch.nn.functional
    original = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and not inplace and 0.0 < p < 1.0 and torch.is_tensor(input) and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)

    dropout.__doc__ = original.__doc__
    F.dropout = dropout


# ---- models: built in host memory, allocated on the device when moved -----------------


class _Building(threading.local):
    depth = 0


building = _Building()


class _Moving(threading.local):
    depth = 0


# A module being moved (`Module._apply`): its state is placed when the move ends.
moving = _Moving()


# Wrappers whose construction allocates on the device itself (DDP's gradient buckets), around
# a model already there.
_ON_DEVICE = {"DistributedDataParallel", "FullyShardedDataParallel"}


def _wrap_init(cls):
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, "_oomscope_building", False) or cls.__name__ in _ON_DEVICE:
        return

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        building.depth += 1
        try:
            return init(self, *args, **kwargs)
        finally:
            building.depth -= 1

    __init__._oomscope_building = True
    cls.__init__ = __init__


def _wrap_subclasses(base, wrap):
    """`wrap(cls)` for `base` and every subclass of it, those defined already and those to come
    (through `base.__init_subclass__`, after whatever it did before)."""
    todo = [base]
    while todo:
        cls = todo.pop()
        wrap(cls)
        todo.extend(cls.__subclasses__())
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        wrap(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)


def install_models(torch, record):
    """`record(tensor)` allocates a tensor's storage on the emulated device (once)."""
    nn = torch.nn
    _wrap_subclasses(nn.Module, _wrap_init)
    apply = nn.Module._apply

    def _apply(self, fn, *args, **kwargs):
        outer = not moving.depth
        moving.depth += 1
        try:
            out = apply(self, fn, *args, **kwargs)
        finally:
            moving.depth -= 1
        if outer and building.depth == 0:
            place(self)
        return out

    nn.Module._apply = functools.wraps(apply)(_apply)

    def place(module):
        """Its state on the device, in `_apply`'s order."""
        for child in module.children():
            place(child)
        for t in list(module._parameters.values()) + list(module._buffers.values()):
            if t is not None:
                record(t)

    return place


# ---- data: in host memory until the program moves it ------------------------------------


class _Fetching(threading.local):
    depth = 0


fetching = _Fetching()


def install_data(torch, emulator):
    """A dataset and the batches a DataLoader makes are host memory on a GPU; a batch reaches
    the device when the program moves it (`.to(device)`, which the CPU answers with the tensor
    itself) or an op there reads it. Here a Dataset's construction records nothing and takes
    the tensors it is given off the device (`TensorDataset(images, labels)`), unless the
    program put them there; a DataLoader's fetch records nothing, and what it reads is host
    memory; its batch is allocated when it is first moved or read outside the fetch.
    `emulator()` is the emulator, once there."""
    data = torch.utils.data

    def wrap(cls):
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_oomscope_data", False):
            return

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            em = emulator()
            if em is not None:
                for value in list(args) + list(kwargs.values()):
                    for t in _host_tensors(torch, value):
                        em.to_host(t)
            paused.depth += 1
            try:
                return init(self, *args, **kwargs)
            finally:
                paused.depth -= 1

        __init__._oomscope_data = True
        cls.__init__ = __init__

    _wrap_subclasses(data.Dataset, wrap)

    iterator = data.dataloader._BaseDataLoaderIter
    fetch = iterator.__next__
    if getattr(fetch, "_oomscope_data", False):
        return

    @functools.wraps(fetch)
    def __next__(self):
        fetching.depth += 1
        paused.depth += 1
        try:
            batch = fetch(self)
        finally:
            paused.depth -= 1
            fetching.depth -= 1
        em = emulator()
        if em is not None:
            for t in _host_tensors(torch, batch):
                em.pend(t)
        return batch

    __next__._oomscope_data = True
    iterator.__next__ = __next__


def _host_tensors(torch, value, depth=0):
    """The tensors in a batch or a dataset's arguments (nested tuples, lists, dicts, and
    mappings such as transformers' BatchEncoding)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _host_tensors(torch, v, depth + 1)
    elif depth < 4 and hasattr(value, "values") and callable(value.values):
        try:
            items = list(value.values())
        except Exception:
            return
        for v in items:
            yield from _host_tensors(torch, v, depth + 1)


def _install_foreach(torch):
    import torch.optim.optimizer as opt

    original = opt._default_to_fused_or_foreach

    def cuda_default(params, differentiable, use_fused=False):
        fused, foreach = original(params, differentiable, use_fused)
        if not fused and not foreach and not differentiable and not torch.jit.is_scripting():
            foreach = True
        return fused, foreach

    opt._default_to_fused_or_foreach = cuda_default
    # The optimizers imported it by name.
    for name in ("adam", "adamw", "sgd", "adagrad", "rmsprop", "adamax", "nadam", "radam", "asgd", "adadelta"):
        mod = getattr(torch.optim, name, None)
        if mod is not None and getattr(mod, "_default_to_fused_or_foreach", None) is original:
            mod._default_to_fused_or_foreach = cuda_default


class _Named:
    """The kernel's own allocations, named as the function the program called, as the
    function mode names it on a GPU (not by the torch calls that stand in for it here)."""

    def __init__(self, torch, lib):
        self.off = torch._C.DisableTorchFunction
        self.lib = lib

    def __enter__(self):
        self.lib.oomscope_scope_push(b"scaled_dot_product_attention")
        self.inner = self.off()
        self.inner.__enter__()

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)
        self.lib.oomscope_scope_pop()


def _install_attention(torch, lib):
    F = torch.nn.functional
    original = F.scaled_dot_product_attention

    def real(q, k, v, mask, dropout_p, is_causal, scale, gqa):
        kw = {"attn_mask": mask, "dropout_p": dropout_p, "is_causal": is_causal, "scale": scale}
        if gqa:
            kw["enable_gqa"] = gqa
        return original(q, k, v, **kw)

    def forward(ctx, q, k, v, mask, dropout_p, is_causal, scale, gqa, kernel):
        with _Pause():
            out_cpu = real(q, k, v, mask, dropout_p, is_causal, scale, gqa)
        b, h, length = q.shape[0], q.shape[1], q.shape[2]
        # Recorded: the kernel's output, then its logsumexp (and flash's RNG state).
        with _Named(torch, lib):
            out = torch.empty_like(out_cpu)
            if kernel == "flash":
                lse = torch.empty((b, h, length), dtype=torch.float32)
                rng = torch.empty((2,), dtype=torch.int64)
            else:
                lse = torch.empty((b, h, _round(length, 32)), dtype=torch.float32)
                rng = None
        with _Pause():
            out.copy_(out_cpu)
            del out_cpu
        ctx.args = (mask, dropout_p, is_causal, scale, gqa, kernel)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.rng = rng
        return out

    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        mask, dropout_p, is_causal, scale, gqa, kernel = ctx.args
        b, h, length, d = q.shape
        # The kernels take the incoming gradient contiguous: a copy when it is not.
        contiguous = None if grad.is_contiguous() else torch.empty(grad.shape, dtype=grad.dtype)
        gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if kernel == "flash":
            softmax_d = torch.empty((b, h, _round(length, 128)), dtype=torch.float32)
            dq_accum = torch.empty((b, _round(length, 128), h, _round(d, 32)), dtype=torch.float32)
            scratch = (softmax_d, dq_accum)
        else:
            product = torch.empty(grad.shape, dtype=grad.dtype)
            rows = torch.empty((b, length, h), dtype=torch.float32)
            delta = torch.empty((b, h, length), dtype=torch.float32)
            del rows, product
            if q.dtype == torch.float32:
                # kernel_backward.h, `Params::workspace_size`: float32 accumulates in place,
                # so only dQ's tiles of 64 × 64, each behind a 16-byte header, per head.
                tiles = -(-length // 64) * -(-d // 64) * (4 + 64 * 64)
                workspace = torch.empty((b * h * _round(tiles, 4) * 4,), dtype=torch.uint8)
            else:
                workspace = torch.empty((b * h * length * d * 4 + b * h * 128,), dtype=torch.uint8)
            scratch = (delta, workspace)
        with _Pause():
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                o = real(*leaves, mask, dropout_p, is_causal, scale, gqa)
                grads = torch.autograd.grad(o, leaves, grad)
            for dst, src in zip((gq, gk, gv), grads):
                dst.copy_(src)
            del grads, o, leaves
        del scratch, contiguous
        return gq, gk, gv, None, None, None, None, None, None

    def make(name):
        return type(
            name,
            (torch.autograd.Function,),
            {"forward": staticmethod(forward), "backward": staticmethod(backward)},
        )

    flash = make("ScaledDotProductFlashAttention")
    efficient = make("ScaledDotProductEfficientAttention")

    def scaled_dot_product_attention(
        query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
    ):
        kernel, _ = _kernel(torch, query, attn_mask)
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if kernel is None or enable_gqa:
            return real(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        if not grad:
            # Inference: the kernel's output alone (no logsumexp is kept).
            with _Pause():
                out_cpu = real(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
            with _Named(torch, lib):
                out = torch.empty_like(out_cpu)
            with _Pause():
                out.copy_(out_cpu)
                del out_cpu
            return out
        fn = flash if kernel == "flash" else efficient
        if torch.is_autocast_enabled("cpu"):
            # Autocast casts the inputs as it would for the kernel (the function is on its
            # lower-precision list); the Function itself runs without autocast.
            dtype = torch.get_autocast_dtype("cpu")
            query, key, value = (t.to(dtype) for t in (query, key, value))
            with torch.autocast("cpu", enabled=False):
                return fn.apply(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel)
        return fn.apply(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel)

    scaled_dot_product_attention.__doc__ = original.__doc__
    F.scaled_dot_product_attention = scaled_dot_product_attention


class KernelScratch:
    """What CUDA's kernels allocate beside their outputs (`_scratch`), for the dispatch mode
    that records the emulated device's tensors (`mode`: its `malloc` and `free`)."""

    def __init__(self, torch, mode):
        self.torch = torch
        self.mode = mode
        self.sms, self.threads, self.major = _scratch.card()
        aten = torch.ops.aten
        self.sums = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default}
        self.gemms = {
            aten.mm.default,
            aten.addmm.default,
            aten.bmm.default,
            aten.baddbmm.default,
            aten.addmv.default,
            aten.mv.default,
        }
        self.addmm = aten.addmm.default
        self.embedding = aten.embedding_dense_backward.default
        self.watched = self.sums | self.gemms | {self.embedding}
        # The threads whose cuBLAS handle has its workspace: the program's (forward) and the
        # autograd engine's (backward; on the CPU the backward runs on the program's thread).
        self.handles = set()
        self.lt = False

    @contextlib.contextmanager
    def around(self, func, args, kwargs):
        """Runs an op (the body) with its scratch: what comes before its output, and after
        it (`after(out)`, called by the body); all freed when the op returns."""
        held = []
        try:
            after = self._plan(func, args or (), kwargs or {}, held)
            yield after
        finally:
            for ptr in reversed(held):
                self.mode.free(ptr)

    def _plan(self, func, args, kwargs, held):
        torch = self.torch
        mode = self.mode
        if func in self.sums:
            t = args[0] if args else None
            if not torch.is_tensor(t) or not t.is_floating_point() or t.dim() == 0:
                return _nothing
            dims = args[1] if len(args) > 1 else kwargs.get("dim")
            dims = list(dims) if dims else []
            staging, semaphores = _scratch.reduce_scratch(
                list(t.shape), list(t.stride()), dims, t.element_size(), self.sms, self.threads
            )

            def after(out):
                if staging:
                    held.append(mode.malloc(staging))
                    held.append(mode.malloc(semaphores))

            return after
        if func in self.gemms:

            def after(out):
                where = "backward" if torch._C._current_autograd_node() is not None else "forward"
                if where not in self.handles:
                    self.handles.add(where)
                    mode.malloc(_scratch.cublas_workspace(self.major))  # kept, as cuBLAS keeps it
                bias = args[0] if args else None
                if func is self.addmm and where == "forward" and not self.lt and torch.is_tensor(bias) and bias.dim() == 1:
                    self.lt = True
                    mode.malloc(_scratch.CUBLASLT_WORKSPACE)

            return after
        if func is self.embedding:
            grad, indices, num_weights = args[0], args[1], args[2]
            before, later = _scratch.embedding_backward(indices.numel(), int(num_weights), grad.shape[-1], 4)
            for n in before:
                held.append(mode.malloc(n))

            def after(out):
                for n in later:
                    held.append(mode.malloc(n))

            return after
        return _nothing


def _nothing(out):
    pass
