"""Stand-in for `torch`: `torch.autograd.backward` (autograd/) and
`torch.optim.optimizer`'s global step hooks (optim/optimizer.py), imported
in the order PyTorch's own __init__ imports them."""
from torch import autograd  # noqa: F401
from torch.optim import optimizer  # noqa: F401  (as torch/optim/__init__.py imports it)
