from . import modules  # noqa: F401


class Module:
    def __init__(self, **children):
        self._children = children

    def named_children(self):
        return list(self._children.items())
