"""Waiting for a framework's import: a finder that finds nothing itself and, when one of the
watched modules is found, runs a function once that module has loaded (and another just
before it loads). It takes itself off the import path when nothing is left to watch."""

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable, Iterable, Optional


class _Watcher(importlib.abc.MetaPathFinder):
    def __init__(self, names: Iterable[str], loaded: Callable[[str, Any], None], before: Optional[Callable[[], None]]):
        self._names = set(names)
        self._loaded = loaded
        self._before = before
        self._busy = False

    def find_spec(self, name, path, target=None):
        if name not in self._names or self._busy:
            return None
        if self._before is not None:
            self._before()
        self._busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            self._names.discard(name)
            if not self._names:
                try:
                    sys.meta_path.remove(self)
                except ValueError:
                    pass
            self._loaded(name, module)

        loader.exec_module = exec_module
        return spec


def when_imported(
    names: Iterable[str], loaded: Callable[[str, Any], None], before: Optional[Callable[[], None]] = None
) -> None:
    """`loaded(name, module)` for each of `names` once it is imported: now for those imported
    already, else when the program imports them."""
    pending = []
    for name in names:
        if name in sys.modules:
            loaded(name, sys.modules[name])
        else:
            pending.append(name)
    if pending:
        sys.meta_path.insert(0, _Watcher(pending, loaded, before))
