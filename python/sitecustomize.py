"""oomscope's hook into Python processes started by `oomscope run`.

`oomscope run` puts this directory first on PYTHONPATH. This file loads the next
`sitecustomize` on the path (the user's or the distribution's, if any), then asks to be
told when `torch`, `tensorflow` or `jax` is imported; nothing else happens in processes
that import none of them.
"""

import importlib
import os
import sys


def _chain_to_the_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    ours = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


try:
    _chain_to_the_next_sitecustomize()
except Exception as e:  # the user's own sitecustomize failed: say so, as Python would
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)

if os.environ.get("OOMSCOPE_LIB"):
    try:
        from oomscope import _torch

        _torch.watch_for_torch()
    except Exception as e:
        print(f"oomscope: warning: the torch hook is off: {e}", file=sys.stderr)

if os.environ.get("OOMSCOPE_FEED_FD"):
    try:
        from oomscope import _tf

        _tf.watch_for_frameworks()
    except Exception as e:
        print(f"oomscope: warning: the TensorFlow/JAX memory sampling is off: {e}", file=sys.stderr)
