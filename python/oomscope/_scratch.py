"""What CUDA kernels allocate through the caching allocator beside their outputs, for the
emulation (`_gpu`): a program run on the CPU has none of these, a GPU run has all of them.
Each rule is re-derived from the PyTorch source it names, and checked against an H100's
own trace of a transformer's training (`fixtures/torch-snapshots/default.pickle`: every
allocation of its four backward passes, sizes and order).

- Reductions (aten/src/ATen/native/cuda/Reduce.cuh: `setReduceConfig`,
  `ReduceConfig::global_memory_size`, `semaphore_size`; the iterator's layout from
  aten/src/ATen/TensorIterator.cpp: `reorder_dimensions`, `coalesce_dimensions`): a sum
  over many rows (a bias gradient, `grad.sum(0)` over the batch's tokens) is split over
  several blocks per output, which meet in a staging buffer and a semaphore array,
  allocated after the output and freed before the op returns. An H100 summing 4096 × 8000
  floats over the rows stages 139 264 000 bytes: more than its input.
- cuBLAS (aten/src/ATen/cuda/CublasHandlePool.cpp: `getChosenWorkspaceSize`,
  `getCUDABlasLtWorkspaceSize`): each thread's handle gets its workspace at its first GEMM
  and keeps it, 32 MiB from compute capability 9 on (4 MiB × 2 + 16 KiB × 8 before). The
  forward runs on the program's thread and the backward on the autograd engine's: two.
  cuBLASLt's own 1 MiB comes with the first GEMM with a bias.
- Embedding's backward (aten/src/ATen/native/cuda/Embedding.cu:
  `embedding_dense_backward_cuda`; EmbeddingBackwardKernel.cu): above 3072 indices it
  sorts them and sums by segment, in buffers of the indices' size, the segments' and the
  partial sums' (CUB's temporary storage sized as measured on the H100).

The card's figures (`OOMSCOPE_EMULATE_SMS`, `OOMSCOPE_EMULATE_CC`, which `oomscope fit`
sets from `--device`) decide the reductions' split and cuBLAS's workspace; without them,
an H100's (132 multiprocessors, compute capability 9.0).
"""

import math
import os


def card():
    """(multiprocessors, max threads per multiprocessor, compute capability major)."""
    try:
        sms = int(os.environ.get("OOMSCOPE_EMULATE_SMS", "132"))
        cc = os.environ.get("OOMSCOPE_EMULATE_CC", "9.0").split(".")
        major, minor = int(cc[0]), int(cc[1]) if len(cc) > 1 else 0
    except ValueError:
        sms, major, minor = 132, 9, 0
    # Turing has 1024 threads per multiprocessor, consumer Ampere and Ada 1536.
    threads = 1024 if (major, minor) == (7, 5) else 1536 if major == 8 and minor > 0 else 2048
    return sms, threads, major


def _div_up(a, b):
    return -(-a // b)


def _last_pow2(n):
    return 1 << (max(1, n).bit_length() - 1)


def _layout(shape, strides, dims):
    """The reduction's iterator as TensorIterator orders it (fastest first): shape, the
    input's strides, and how many leading dimensions are reduced. Reduced dimensions go
    first; within each group the smaller input stride first; neighbours merge when both
    are reduced or both kept and contiguous in the input."""
    n = len(shape)
    dims = {d % n for d in dims} if dims else set(range(n))
    order = sorted(range(n), key=lambda d: (d not in dims, strides[d], shape[d]))
    sh = [shape[d] for d in order]
    st = [strides[d] for d in order]
    red = [d in dims for d in order]
    i = 0
    while i + 1 < len(sh):
        if red[i] == red[i + 1] and (sh[i] == 1 or sh[i + 1] == 1 or st[i] * sh[i] == st[i + 1]):
            if sh[i] == 1:
                st[i] = st[i + 1]
            sh[i] *= sh[i + 1]
            del sh[i + 1], st[i + 1], red[i + 1]
        else:
            i += 1
    return sh, st, sum(red)


def reduce_scratch(shape, strides, dims, elem_size, sms, threads_per_sm):
    """(staging bytes, semaphore bytes) of a sum's global reduction; (0, 0) without one.
    `strides` in elements. Accumulates in float32 (float64 for doubles)."""
    acc = max(elem_size, 4)
    sh, st, nred = _layout(shape, strides, dims)
    if not sh or nred == 0 or nred == len(sh):
        # All kept (a copy) or all reduced: one output, reduced on the fastest dimension.
        if nred == 0:
            return 0, 0
    numel = math.prod(sh)
    outputs = math.prod(sh[nred:]) if nred < len(sh) else 1
    per_output = numel // max(outputs, 1)
    on_fastest = nred == len(sh) or st[0] < st[nred]
    if on_fastest:
        dim0, dim1, fastest = per_output, outputs, st[0]
    else:
        dim0, dim1, fastest = outputs, per_output, st[nred]
    out_vec = 1
    if fastest == 1:
        if on_fastest and dim0 > 128 and nred == 1:
            dim0 //= 4  # vectorized input
        elif not on_fastest:
            out_vec = 4
            for v in [sh[nred]] + [s for j, s in enumerate(st) if j != nred]:
                while v % out_vec:
                    out_vec //= 2
            dim0 //= out_vec
    most = 512 // out_vec
    d0 = _last_pow2(dim0) if dim0 < most else most
    d1 = _last_pow2(dim1) if dim1 < most else most
    bw = min(d0, 32)
    bh = min(d1, most // bw)
    bw = min(d0, most // bh)
    step_in = step_out = 1
    block_x_reduces = on_fastest
    if block_x_reduces:
        step_in *= bw
    else:
        step_out *= bw
    block_y_reduces = False
    if _div_up(per_output, step_in) >= bh * 16 or _div_up(per_output, step_in) >= 256:
        block_y_reduces = True
        step_in *= bh
    else:
        step_out *= bh
    target = sms * (threads_per_sm // (bw * bh))
    grid_x = _div_up(outputs // out_vec, step_out)
    values = _div_up(per_output, step_in)
    ctas = 1
    if block_y_reduces and values >= 256 and grid_x <= target:
        ctas = max(min(_div_up(target, grid_x), _div_up(values, 16)), _div_up(values, 256))
    if ctas <= 1:
        return 0, 0
    staging = acc * outputs * ctas
    if not block_x_reduces:
        staging *= bw * out_vec
    return staging, 4 * grid_x


def cublas_workspace(major):
    return 32 << 20 if major >= 9 else (4096 << 10) * 2 + (16 << 10) * 8


CUBLASLT_WORKSPACE = 1 << 20


def _cub_sort_scratch(n):
    # CUB's radix sort of n (64-bit key, 64-bit value) pairs: its passes' counters, a
    # look-back row per 4096 items, the alternate key and value buffers; each piece
    # 256-aligned, plus the alignment slack (measured: 83 455 bytes at 4096, 100 863 at 5120).
    a = lambda x: _div_up(x, 256) * 256
    return 255 + a(8 * 256 * 8) + a(8 * 4) + a(_div_up(n, 4096) * 256 * 4) + a(n * 8) + a(n * 8)


_CUB_SCAN = 1279


def embedding_backward(n, num_weights, dim, acc):
    """(before, after): the transient buffers embedding_dense_backward allocates before its
    output (grad_weight) and after it; none up to 3072 indices (the atomic kernel)."""
    if n <= 3072:
        return [], []
    segments = min(n, num_weights)
    partial = n // 10 + segments
    before = [n * 8, n * 8, n * 8, _cub_sort_scratch(n)]
    after = [n * 8, 8, n * 8, _CUB_SCAN, segments * 8, segments * 8, _CUB_SCAN, 8, partial * 8, partial * dim * acc]
    return before, after
