pre = []
post = []


def register_optimizer_step_pre_hook(hook):
    pre.append(hook)


def register_optimizer_step_post_hook(hook):
    post.append(hook)


def step(optimizer, body):
    for h in pre:
        h(optimizer, (), {})
    body()
    for h in post:
        h(optimizer, (), {})
