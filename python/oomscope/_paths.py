"""Where the oomscope command and liboomscope.so are: inside the installed package
(`oomscope/bin/`), or where `oomscope run` says (OOMSCOPE_BIN, OOMSCOPE_LIB)."""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _inside(name: str) -> str:
    return os.path.join(_HERE, "bin", name)


def binary() -> str:
    """The oomscope command (the native one, never this package's own launcher)."""
    path = os.environ.get("OOMSCOPE_BIN") or _inside("oomscope")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"the oomscope command is not at {path}: reinstall the package (pip install oomscope), "
            "or set OOMSCOPE_BIN to the command built from a checkout (target/release/oomscope)"
        )
    return path


def library() -> str:
    """liboomscope.so, the allocator loaded into the training process."""
    path = os.environ.get("OOMSCOPE_LIB") or _inside("liboomscope.so")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"liboomscope.so is not at {path}: reinstall the package (pip install oomscope), "
            "or set OOMSCOPE_LIB to the library built from a checkout (target/release/liboomscope.so)"
        )
    return path
