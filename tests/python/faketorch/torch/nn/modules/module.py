pre_hooks = []
post_hooks = []


def register_module_forward_pre_hook(hook):
    pre_hooks.append(hook)


def register_module_forward_hook(hook, *, always_call=False):
    assert always_call, "oomscope needs its post-hook even when forward raises"
    post_hooks.append(hook)


def call(module, body):
    """A module call as torch makes it: pre-hooks, forward, post-hooks."""
    for h in pre_hooks:
        h(module, ())
    try:
        out = body()
    finally:
        for h in post_hooks:
            h(module, (), None)
    return out
