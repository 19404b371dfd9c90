"""A training loop whose memory grows step after step, for recording with
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (tensor-level events).

With --leak, every step keeps one extra 1 MiB tensor made by torch.randn
(a site the loop uses nowhere else) in a list that is never cleared: the
growth a report must name. Without it, the same loop holds steady. Writes the
figures to the JSON file named by argv[1].
usage: torch_growth.py STATS_JSON STEPS [--leak]
"""
import json
import sys

import torch


def main():
    steps = int(sys.argv[2])
    leak = "--leak" in sys.argv[3:]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for _ in range(steps):
        x = torch.rand(128, 512, device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        if leak:
            kept.append(torch.randn(256 * 1024, device="cuda"))  # 1 MiB per step  # line:kept
    torch.cuda.synchronize()
    out = {
        "steps": steps,
        "leak": leak,
        "kept_tensors": len(kept),
        "kept_bytes": sum(t.numel() * t.element_size() for t in kept),
        "allocated_at_end": torch.cuda.memory_allocated(),
    }
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    print("torch_growth:", json.dumps(out))


if __name__ == "__main__":
    main()
