"""oomscope inside a TensorFlow or JAX process (loaded by oomscope's sitecustomize under
`oomscope run`).

TensorFlow and XLA print their allocator's state at an OOM on stderr, and `oomscope run`
reads it there: nothing here touches an allocator. This only samples what the framework
says about its memory while the program runs, for the live view: when `tensorflow` or
`jax` is imported, a daemon thread reads `tf.config.experimental.get_memory_info` (or JAX's
`Device.memory_stats`) every half second and writes one JSON line per device to the file
descriptor in OOMSCOPE_FEED_FD:

    {"framework": "tensorflow", "device": "GPU:0", "current": 123, "peak": 456, "limit": 0}

A closed or missing descriptor ends the sampling quietly; the program never sees an error.

TF's allocator dump lists its chunks by address and size only. When Keras trains
(`Model.fit`), a callback sends the model's weights and the optimizer's variables (its slots,
made in the first step) on the same descriptor, with their bytes:

    {"pid": 4242, "variables": [{"name": "sequential/dense/kernel", "bytes": 128000, "kind": "weight"}]}

and `oomscope run` names the chunks of a later OOM's dump that they fit.

TF and XLA print their allocator's dump at INFO level. A program that silences TF's logs
(`os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"` before `import tensorflow`, or in the
environment) would print no dump at all: just before TensorFlow or JAX loads, this sends
the level the program asked for to `oomscope run` (`{"min_log_level": 2}`), which hides
those lines from the user as TF would have, and sets it to 0 so that TF prints them.
"""

import json
import os
import sys
import threading
import time

from . import _watch
from ._log import swallowed

_PERIOD = 0.5


class _State:
    """What the sampler holds in a process, in one place."""

    def __init__(self) -> None:
        # The frameworks whose sampling started.
        self.started: set = set()
        # The program's own log level was sent to `oomscope run`.
        self.level_sent = False


_state = _State()


def _feed():
    """oomscope run's pipe, while the descriptor is still that pipe: a launcher may have
    closed it, and a file opened since may have its number."""
    try:
        fd = int(os.environ["OOMSCOPE_FEED_FD"])
        if os.fstat(fd).st_ino != int(os.environ["OOMSCOPE_FEED_INODE"]):
            return None
        return fd
    except (KeyError, ValueError, OSError):
        return None


def _log_level_to_oomscope():
    """Before TF or XLA reads TF_CPP_MIN_LOG_LEVEL: oomscope hides what the program asked to
    hide, and TF prints everything, its allocator's dump included."""
    if _state.level_sent:
        return
    _state.level_sent = True
    fd = _feed()
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip()
    if fd is None or not level.isdigit():
        return
    if "OOMSCOPE_TF_MIN_LOG_LEVEL" in os.environ and level == "0":
        # oomscope set 0 in place of the user's level and already knows that one.
        return
    try:
        os.write(fd, (json.dumps({"min_log_level": int(level)}, separators=(",", ":")) + "\n").encode())
    except OSError:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"


def _tensorflow_devices(tf):
    names = []
    for d in tf.config.list_logical_devices():
        kind = d.device_type
        # The CPU allocator is a BFC allocator (and has statistics) only when asked for.
        if kind == "GPU" or (kind == "CPU" and os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") == "true"):
            names.append(d.name.split("device:")[-1])
    return names


def _sample_tensorflow(tf):
    out = []
    for name in _tensorflow_devices(tf):
        try:
            info = tf.config.experimental.get_memory_info(name)
        except Exception as e:
            swallowed("sampling", e)
            continue
        out.append({"framework": "tensorflow", "device": name, "current": info.get("current", 0),
                    "peak": info.get("peak", 0), "limit": 0})
    return out


def _sample_jax(jax):
    out = []
    for d in jax.local_devices():
        try:
            stats = d.memory_stats() or {}
        except Exception as e:
            swallowed("sampling", e)
            continue
        if stats:
            out.append({"framework": "jax", "device": f"{d.platform.upper()}:{d.id}",
                        "current": stats.get("bytes_in_use", 0), "peak": stats.get("peak_bytes_in_use", 0),
                        "limit": stats.get("bytes_limit", 0)})
    return out


def _loop(name, module, fd):
    sample = _sample_tensorflow if name == "tensorflow" else _sample_jax
    start = time.monotonic()
    while True:
        time.sleep(_PERIOD)
        try:
            rows = sample(module)
        except Exception as e:
            swallowed("sampling", e)
            rows = []
        t_ns = int((time.monotonic() - start) * 1e9)
        for row in rows:
            row["t_ns"] = t_ns
            row["pid"] = os.getpid()
            try:
                os.write(fd, (json.dumps(row) + "\n").encode())
            except OSError:
                return


def _peak_in_use():
    """TF's own peak of bytes in use on the device fit answers for (its BFC allocator's
    `peak_bytes_in_use`): GPU 0 when TF has one, else the CPU's BFC allocator."""
    try:
        import tensorflow as tf

        device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
        return int(tf.config.experimental.get_memory_info(device)["peak"])
    except Exception as e:
        swallowed("peak_in_use", e)
        return None


def _fit_steps():
    """`oomscope fit`'s probe of a Keras program: each training step marked on stderr, where
    TF's allocator log is (`oomscope-fit: step N`), and the process ended (exit 0) after
    OOMSCOPE_FIT_STEPS of them, as the library ends a PyTorch probe."""
    try:
        steps = int(os.environ.get("OOMSCOPE_FIT_STEPS", ""))
        import keras
    except Exception as e:
        swallowed("fit_steps", e)
        return
    fit = keras.Model.fit

    class _Steps(keras.callbacks.Callback):
        done = 0

        def on_train_batch_begin(self, batch, logs=None):
            sys.stderr.write(f"oomscope-fit: step {_Steps.done}\n")
            sys.stderr.flush()

        def on_train_batch_end(self, batch, logs=None):
            _Steps.done += 1
            if _Steps.done >= steps:
                peak = _peak_in_use()
                if peak is not None:
                    sys.stderr.write(f"oomscope-fit: peak {peak}\n")
                sys.stderr.write(f"oomscope-fit: stop at step {_Steps.done}\n")
                sys.stderr.flush()
                os._exit(0)

    def fit_with_steps(self, *args, **kwargs):
        callbacks = list(kwargs.get("callbacks") or [])
        kwargs["callbacks"] = callbacks + [_Steps()]
        return fit(self, *args, **kwargs)

    keras.Model.fit = fit_with_steps


def _variables_of(model):
    """The model's weights and its optimizer's variables, for the feed: name, bytes, kind."""
    import numpy as np
    import tensorflow as tf

    out = []
    optimizer = getattr(model, "optimizer", None)
    groups = (("weight", list(getattr(model, "weights", []) or [])),
              ("optimizer", list(getattr(optimizer, "variables", []) or [])))
    for kind, variables in groups:
        for v in variables:
            try:
                n = int(np.prod(tuple(v.shape))) * tf.as_dtype(v.dtype).size
            except Exception as e:
                swallowed("variables", e)
                continue
            out.append({"name": str(getattr(v, "path", None) or v.name), "bytes": n, "kind": kind})
    return out


def _send_variables():
    """Under `oomscope run`: Keras's `fit` tells oomscope the model's variables (TF's
    allocator log names no chunk; their sizes find theirs in its dump), when training starts
    and again after the first steps, once the optimizer made its slots."""
    try:
        import keras
    except Exception as e:
        swallowed("send_variables", e)
        return
    fit = keras.Model.fit

    class _Variables(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.sent = None
            self.batches = 0

        def _send(self):
            fd = _feed()
            model = self.model
            if fd is None or model is None:
                return
            variables = _variables_of(model)
            if variables == self.sent:
                return
            self.sent = variables
            line = json.dumps({"pid": os.getpid(), "variables": variables}, separators=(",", ":"))
            try:
                os.write(fd, (line + "\n").encode())
            except OSError:
                return

        def on_train_begin(self, logs=None):
            self._send()

        def on_train_batch_end(self, batch, logs=None):
            # The optimizer makes its slots in its first step.
            if self.batches < 2:
                self.batches += 1
                self._send()

    def fit_telling_variables(self, *args, **kwargs):
        try:
            callbacks = list(kwargs.get("callbacks") or [])
            kwargs["callbacks"] = callbacks + [_Variables()]
        except Exception as e:
            swallowed("fit_telling_variables", e)
        return fit(self, *args, **kwargs)

    keras.Model.fit = fit_telling_variables


def _start(name, module):
    if name in _state.started:
        return
    _state.started.add(name)
    if name == "tensorflow" and os.environ.get("OOMSCOPE_FIT_STEPS"):
        _fit_steps()
    fd = _feed()
    if fd is None:
        return
    if name == "tensorflow":
        _send_variables()
    threading.Thread(target=_loop, args=(name, module, fd), name=f"oomscope-{name}-memory", daemon=True).start()


def watch_for_frameworks():
    """Samples TensorFlow's or JAX's memory when (and only if) the program imports it; the
    program's own log level is sent just before either loads."""
    _watch.when_imported(("tensorflow", "jax"), _start, before=_log_level_to_oomscope)
