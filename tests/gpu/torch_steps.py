"""Training steps recorded with no code change: a small MLP trained with SGD
and momentum for STEPS steps, each iteration keeping a 3 MiB tensor in a
list after its optimizer step (a leak that grows step after step); a second
optimizer steps too and must add no step. PyTorch's own figures at each
step's end come from a global post-step hook of the program's, which runs
right after gmem-prof's (registered first, by its bootstrap): the tensors
allocated then (memory_allocated) and the highest allocated since the step
before (max_memory_allocated, reset there).

    python3 torch_steps.py TRUTH.json
"""
import json
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from truth import marked_lines

STEPS = 30
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()  # line:model
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
other = torch.optim.SGD([torch.zeros(1, device="cuda", requires_grad=True)], lr=0.1)
allocated, peaks = [], []


def truth(stepped, args, kwargs):
    if stepped is optimizer:
        allocated.append(torch.cuda.memory_allocated())
        peaks.append(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()


register_optimizer_step_post_hook(truth)
kept = []
for step in range(STEPS):
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # line:step
    other.step()
    kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))  # line:kept
json.dump(
    {
        "steps": STEPS,
        "allocated": allocated,
        "peaks": peaks,
        "lines": marked_lines(__file__),
        "params": sum(p.numel() * p.element_size() for p in model.parameters()),
    },
    open(sys.argv[1], "w"),
)
