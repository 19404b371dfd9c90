"""Stand-in for `torch.optim.optimizer`: an optimizer whose `step()` runs
the global pre-step hooks before its own update and the post-step hooks
after it, as PyTorch 2's does (`register_optimizer_step_pre_hook`,
`register_optimizer_step_post_hook`; hooks are called with the optimizer,
the step's args and kwargs)."""

from collections import OrderedDict

_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    key = len(_global_optimizer_pre_hooks)
    _global_optimizer_pre_hooks[key] = hook
    return key


def register_optimizer_step_post_hook(hook):
    key = len(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[key] = hook
    return key


class Optimizer:
    def __init__(self, update):
        self._update = update

    def step(self, closure=None, *args, **kwargs):
        for hook in list(_global_optimizer_pre_hooks.values()):
            hook(self, args, kwargs)
        if closure is not None:
            # As PyTorch's optimizers do: the closure computes the loss
            # and its gradients first (Lightning's training step).
            closure()
        out = self._update()
        for hook in list(_global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
        return out
