"""What oomscope's Python side says on stderr, and the errors it goes on after: it must never
break the program it watches, so an error in a hook is not raised, and is not hidden either
(OOMSCOPE_DEBUG=1 prints each)."""

import os
import sys

DEBUG = os.environ.get("OOMSCOPE_DEBUG") == "1"


def say(message: str) -> None:
    print(f"oomscope: {message}", file=sys.stderr, flush=True)


def swallowed(where: str, e: BaseException) -> None:
    """An error a hook went on after: said with OOMSCOPE_DEBUG=1."""
    if DEBUG:
        say(f"debug: {where}: {type(e).__name__}: {e}")
