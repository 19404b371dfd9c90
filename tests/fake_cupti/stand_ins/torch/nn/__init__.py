"""Stand-in for `torch.nn`: `Module` (modules/module.py), whose `_apply`
places parameters on the device, as `Module.to()` and `cuda()` do."""
from torch.nn.modules import Module  # noqa: F401
