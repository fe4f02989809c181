"""`oomscope` on the environment's PATH and `python -m oomscope`: the native command, run in
this process's place (its exit code and signals are the command's own)."""

import os
import sys
from typing import List, Optional

from . import _paths


def main(argv: Optional[List[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        binary = _paths.binary()
    except FileNotFoundError as e:
        print(f"oomscope: error: {e}", file=sys.stderr)
        sys.exit(2)
    # `oomscope run` finds liboomscope.so beside the command: both are in the package.
    os.execv(binary, ["oomscope", *args])
