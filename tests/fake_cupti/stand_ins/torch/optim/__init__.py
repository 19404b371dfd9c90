from torch.optim import optimizer  # noqa: F401  (as torch/optim/__init__.py imports it)
