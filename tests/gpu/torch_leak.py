"""The classic training-loop leak: every fifth step keeps a copy of the
step's output (a 4 MiB tensor) in a Python list that is never cleared, with
PyTorch's default caching allocator. The report must name the line marked
marked `leak` as the site that keeps growing, with these tensors' bytes.
Writes the ground truth to argv[1]: that line, how many tensors were kept
and their bytes, and PyTorch's own figures at the end.
usage: torch_leak.py TRUTH_JSON [STEPS]
"""
import sys

import torch

from truth import marked_lines, torch_state, write


def main():
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(1024, 1024, device="cuda")
    history = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        out = model(x)  # line:forward
        out.square().mean().backward()
        opt.step()
        if step % 5 == 0:
            history.append(out.detach().clone())  # line:leak
    torch.cuda.synchronize()
    truth = {
        "file": __file__,
        "lines": marked_lines(__file__),
        "steps": steps,
        "kept": len(history),
        "kept_bytes": sum(t.numel() * t.element_size() for t in history),
        "tensor_bytes": history[0].numel() * history[0].element_size(),
        "torch": torch_state(torch),
    }
    write(sys.argv[1], truth)


if __name__ == "__main__":
    main()
