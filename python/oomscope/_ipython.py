"""`%load_ext oomscope` in IPython or Jupyter, then `%oomscope`: the current state, ranked
by node and kind, with the verdict; `%oomscope PATH` reads a dump, a snapshot, a log or a
pasted message."""

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    def oomscope(line: str) -> None:
        from . import load, report

        path = line.strip()
        print(load(path) if path else report())

    ipython.register_magic_function(oomscope, "line", "oomscope")
