"""oomscope: why the GPU ran out of memory, and what to change.

In a notebook, or a script that cannot be wrapped with `oomscope run`::

    import oomscope
    oomscope.install(dump_dir="oom-dumps")   # before anything touches the GPU
    ...                                       # train; an OOM prints oomscope's report
    print(oomscope.report())                  # the state now: ranked by node and kind
    r = oomscope.load("oom-dumps/oomscope-1234-gpu0-oom1.dump.json")
    r.kind, r.fix, r.breakdown                # the verdict as data

`oomscope run -- python train.py` does the same for a whole program, and the `oomscope`
command (also `python -m oomscope`) reads dumps, logs, snapshots and pasted messages.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from ._ipython import load_ipython_extension  # noqa: F401  (`%load_ext oomscope`)

__version__ = "0.1.0"
__all__ = ["install", "report", "load", "Report", "load_ipython_extension"]

_installed_at: Optional[float] = None


def install(
    device: Optional[str] = None,
    limit: Optional[Union[int, str]] = None,
    limit_fraction: Optional[float] = None,
    dump_dir: Union[str, "os.PathLike[str]"] = "oomscope-dumps",
    allocator: str = "caching",
    no_ops: bool = False,
    aten_ops: bool = False,
    dump_at_step: Iterable[int] = (),
    dump_at_exit: bool = False,
    live: bool = False,
    emulate: bool = False,
) -> None:
    """Puts oomscope's allocator under PyTorch in this process, as `oomscope run` does for a
    program it starts: every allocation named by module and op with its kind, and at an
    OOM the report here (in a notebook, in the cell's output), a dump in `dump_dir`, and
    PyTorch's own `torch.cuda.OutOfMemoryError` for the program.

    The keywords are `oomscope run`'s flags: `device` (`"cuda"`, the default, or
    `"sim:16GiB"`, a simulated GPU), `limit` (bytes, or `"12GiB"`), `limit_fraction`,
    `dump_dir`, `allocator` (`"caching"`, PyTorch's, or `"bfc"`, TensorFlow's), `no_ops`,
    `aten_ops`, `dump_at_step`, `dump_at_exit`, `live`. `emulate=True` records the CPU
    tensors of a machine without a GPU as if they were on one (to try it anywhere).

    It must come before CUDA is first used: PyTorch cannot change the allocator of a
    process whose GPU memory it already holds, and this says so (restart and call it first).
    """
    global _installed_at
    device, limit, limit_fraction, dump_dir, steps = _checked(
        device, limit, limit_fraction, dump_dir, allocator, dump_at_step,
        no_ops=no_ops, aten_ops=aten_ops, dump_at_exit=dump_at_exit, live=live, emulate=emulate,
    )
    torch = sys.modules.get("torch")
    if torch is not None and _cuda_in_use(torch):
        raise RuntimeError(
            "oomscope.install() comes too late: this process already uses the GPU through PyTorch's own "
            "allocator, which cannot be swapped while it holds memory. Restart the kernel (or the program) and "
            "call oomscope.install() first, before anything touches the GPU."
        )
    from . import _paths, _torch

    if _installed_at is not None:
        raise RuntimeError("oomscope.install() was called already in this process; restart it to change the settings")
    if _torch._state.installed:
        return  # under `oomscope run`: installed already, as asked on its command line
    settings = {
        "OOMSCOPE_LIB": _paths.library(),
        "OOMSCOPE_BIN": _paths.binary(),
        "OOMSCOPE_DEVICE": device,
        "OOMSCOPE_DUMP_DIR": dump_dir,
        "OOMSCOPE_ALLOCATOR": allocator,
        # The report is printed from here, where a notebook shows it; the library says one line.
        "OOMSCOPE_QUIET": "1",
    }
    if limit is not None:
        settings["OOMSCOPE_LIMIT"] = str(limit)
    if limit_fraction is not None:
        settings["OOMSCOPE_LIMIT_FRACTION"] = str(limit_fraction)
    if no_ops:
        settings["OOMSCOPE_NO_OPS"] = "1"
    if aten_ops:
        settings["OOMSCOPE_OPS"] = "aten"
    if steps:
        settings["OOMSCOPE_DUMP_AT_STEPS"] = ",".join(steps)
    if dump_at_exit:
        settings["OOMSCOPE_DUMP_AT_EXIT"] = "1"
    if live:
        settings["OOMSCOPE_LIVE"] = "1"
    if emulate:
        settings["OOMSCOPE_TORCH_EMULATE"] = "1"
    # Refused settings are refused here, as `oomscope run` refuses them, not at the first tensor.
    _check(settings)
    os.makedirs(settings["OOMSCOPE_DUMP_DIR"], exist_ok=True)
    os.environ.update(settings)
    _installed_at = time.time()
    _torch._state.report_at_oom = True
    _torch.watch_for_torch()


def _cuda_in_use(torch: Any) -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # a torch without CUDA support: nothing in use
        return False


def _checked(
    device: Any, limit: Any, limit_fraction: Any, dump_dir: Any, allocator: Any, dump_at_step: Any, **flags: Any
) -> Tuple[str, Optional[str], Optional[float], str, List[str]]:
    """install()'s keywords as the settings they become, or ValueError naming the keyword:
    what oomscope cannot honour is refused, never read as something else."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r}: give True or False")
    if flags["no_ops"] and flags["aten_ops"]:
        raise ValueError("no_ops and aten_ops name allocations differently: give one")
    if allocator not in ("caching", "bfc"):
        raise ValueError(f"allocator={allocator!r}: oomscope has 'caching' (PyTorch's) and 'bfc' (TensorFlow's)")
    if device is None:
        device = "cuda"
    if not isinstance(device, str) or not device.strip():
        raise ValueError(f"device={device!r}: give 'cuda' (the real GPUs) or a simulated one, 'sim:16GiB' or 'sim:a100-80'")
    device = device.strip()
    if device.startswith("cuda"):
        if device != "cuda":
            raise ValueError(
                f"device={device!r}: oomscope watches every GPU the program uses; give 'cuda' and choose the GPU in "
                "the program (or with CUDA_VISIBLE_DEVICES)"
            )
    elif not device.startswith("sim:"):
        device = f"sim:{device}"  # a bare size or card is the simulated one, as on the command line
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, str)) or (isinstance(limit, int) and limit <= 0):
            raise ValueError(f"limit={limit!r}: give bytes as a positive int, or a size such as '12GiB'")
        limit = str(limit)
    if limit_fraction is not None:
        if isinstance(limit_fraction, bool) or not isinstance(limit_fraction, (int, float)):
            raise ValueError(f"limit_fraction={limit_fraction!r}: give a fraction in (0, 1], such as 0.8")
        limit_fraction = float(limit_fraction)
    if not isinstance(dump_dir, (str, os.PathLike)) or not os.fspath(dump_dir):
        raise ValueError(f"dump_dir={dump_dir!r}: give a directory's path")
    if isinstance(dump_at_step, (str, bytes)) or not isinstance(dump_at_step, Iterable):
        raise ValueError(f"dump_at_step={dump_at_step!r}: give the steps as a list of whole numbers, such as [10, 20]")
    steps = list(dump_at_step)
    for step in steps:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"dump_at_step={dump_at_step!r}: {step!r} is not a step (a whole number from 0)")
    return device, limit, limit_fraction, os.path.abspath(os.fspath(dump_dir)), [str(s) for s in steps]


def _check(settings: Dict[str, str]) -> None:
    """The settings checked by the command itself (`oomscope check-settings`, which starts
    nothing): its refusal, word for word, as a ValueError."""
    env = dict(os.environ, **settings)
    p = subprocess.run([settings["OOMSCOPE_BIN"], "check-settings"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(p.stderr.strip().removeprefix("oomscope: error: "))


@dataclass
class Report:
    """A verdict and its figures, as data: from `report()` (this process now) or `load()`."""

    kind: str
    headline: str
    evidence: List[str]
    fix: str
    #: Live bytes by kind (`weight`, `gradient`, `optimizer`, `input`, `activation`, ...).
    breakdown: List[Tuple[str, int]]
    #: The request that failed, in bytes (None when nothing failed).
    requested: Optional[int]
    #: The whole dump, as oomscope's JSON (docs/dump-format.md).
    dump: Dict[str, Any] = field(repr=False)
    #: The report in words, as `oomscope report` prints it.
    text: str = field(repr=False)

    def __str__(self) -> str:
        return self.text


def _run(args: List[str]) -> str:
    from . import _paths

    p = subprocess.run([_paths.binary(), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(p.stderr.strip().removeprefix("oomscope: error: "))
    return p.stdout


def _report_of(path: str) -> Report:
    """The command reads the file by what it is (a dump, a log, a snapshot, a message) and
    gives the dump with its verdict and its summary, in one call."""
    loaded = json.loads(_run(["load", path]))
    d, text = loaded["dump"], loaded["text"]
    v = d.get("verdict") or {}
    return Report(
        kind=v.get("kind", "undetermined"),
        headline=v.get("headline", ""),
        evidence=list(v.get("evidence", [])),
        fix=v.get("fix", ""),
        breakdown=[(k["kind"], k["bytes"]) for k in v.get("breakdown", [])],
        requested=(d.get("oom") or {}).get("requested"),
        dump=d,
        text=text,
    )


def load(path: Union[str, "os.PathLike[str]"]) -> Report:
    """Reads a dump, a PyTorch snapshot, a TensorFlow log or a pasted out-of-memory message,
    as `oomscope report` or `oomscope import` does: the verdict and figures as data. A file
    that is none of them raises ValueError with what it is and what reads it."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"load({path!r}): give a file's path")
    # Absolute, so that no path ("-", "--help") reaches the command as an option or as its
    # standard input.
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise ValueError(f"load({path!r}): not a file")
    return _report_of(path)


def report() -> Report:
    """The state of this process's GPU memory now (`install()` first): ranked by node and
    kind, with the verdict."""
    from . import _torch

    lib = _torch._state.lib
    if lib is None:
        raise RuntimeError("oomscope is not watching this process: call oomscope.install() first")
    with tempfile.TemporaryDirectory(prefix="oomscope-") as tmp:
        path = os.path.join(tmp, "now.dump.json")
        if lib.oomscope_dump(path.encode()) != 0:
            from . import _abi

            raise RuntimeError(f"no dump of the state now: {_abi.last_error(lib)}")
        written = sorted(os.path.join(tmp, n) for n in os.listdir(tmp) if n.endswith(".json"))
        if not written:
            raise RuntimeError("no dump of the state now: nothing was allocated on a GPU yet")
        return _report_of(written[0])


#: What the library's OOM message says of this OOM's dump: `(dump: PATH; the report is on
#: stderr)`, or `(OOM #N, not dumped: ...)` past OOMSCOPE_MAX_DUMPS.
_DUMPED = "; the report is on stderr)"


def _report_at_oom(message: str) -> None:
    """Prints the report of the OOM just met on stderr, where a notebook shows it in the
    cell's output: the dump its message names (never the newest in the directory, which
    may be another OOM's or another process's); an OOM that got no dump says so."""
    try:
        end = message.rfind(_DUMPED)
        start = message.rfind("(dump: ", 0, end) if end >= 0 else -1
        if start < 0:
            counted = message[message.rfind("(OOM #"):].strip() if "(OOM #" in message else ""
            print(
                f"oomscope: this OOM got no dump, so no report {counted}".rstrip()
                + "; the reports above are of earlier OOMs",
                file=sys.stderr,
                flush=True,
            )
            return
        path = message[start + len("(dump: "):end]
        print(_run(["report", os.path.abspath(path)]) + f"(the dump: {path})", file=sys.stderr, flush=True)
    except Exception as e:  # the program's own error comes next; never hide it
        from ._log import swallowed

        swallowed("the report at the OOM", e)
