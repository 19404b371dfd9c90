"""Stand-in for `torch.nn.modules.module`: a `Module` whose `to()` goes
through `_apply`, as PyTorch's does; `_apply(fn)` calls `fn` once per
parameter, and `fn` makes that parameter's tensor on the device."""


class Module:
    def __init__(self, parameters):
        self._parameters = list(parameters)
        self.placed = []

    def _apply(self, fn):
        self.placed = [fn(p) for p in self._parameters]
        return self

    def to(self, fn):
        return self._apply(fn)
