"""Activations dominating the peak: a 24-layer MLP (4096 wide, batch 16384,
float32) trained with plain SGD for three steps. The tensors the forward
pass keeps for the backward pass (each ReLU's output, 256 MiB) are most of
what is allocated at the peak, which comes as the backward pass starts.
cuBLAS is warmed up outside the model, so that its workspace is not counted
as the model's. The program writes, per step, the bytes the forward pass
left allocated (memory_allocated after − before) and PyTorch's allocated
peak: the ground truth, in argv[1], with what stays allocated once the
program has dropped its tensors (cuBLAS's workspaces: torch's, not the
program's).
usage: torch_activations.py TRUTH_JSON
"""
import sys

import torch
from torch import nn

from truth import left_allocated, marked_lines, write

LAYERS = 24
WIDTH = 4096
BATCH = 16384


def main():
    torch.manual_seed(0)
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()  # cuBLAS's workspace, outside the model
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(LAYERS)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(BATCH, WIDTH, device="cuda")
    steps = []
    for _ in range(3):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = model(x)  # line:forward
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated()
        loss = out.pow(2).mean()  # line:loss
        loss.backward()  # line:backward
        opt.step()
        opt.zero_grad()
        del out, loss
        torch.cuda.synchronize()
        steps.append({"forward_kept": after - before})
    truth = {
        "file": __file__,
        "lines": marked_lines(__file__),
        "steps": steps,
        "allocated_peak": torch.cuda.max_memory_allocated(),
        "parameters": sum(p.numel() * p.element_size() for p in model.parameters()),
    }
    del model, opt, x, a
    truth["left_allocated"] = left_allocated(torch)
    write(sys.argv[1], truth)


if __name__ == "__main__":
    main()
