"""Stand-in for `torch`: only `torch.optim.optimizer`'s global step hooks
(see optim/optimizer.py)."""
