"""A small PyTorch training run (MLP on random data) for recording.

Writes torch.cuda.memory_stats() at the end to the JSON file named by argv[1]
(ground truth for torch_check.py): with the default caching allocator, every
segment PyTorch reserves is one cudaMalloc the trace must show.
usage: torch_train.py STATS_JSON [STEPS]
"""
import json
import sys

import torch


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024),
    ).cuda()


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.Adam(model.parameters())
    for i in range(steps):
        # Batch size varies so the allocator sees new sizes.
        b = 256 + 64 * (i % 4)
        x = torch.randn(b, 1024, device="cuda")
        y = torch.randn(b, 1024, device="cuda")
        train_step(model, opt, x, y)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    stats["allocator_backend"] = torch.cuda.get_allocator_backend()
    stats["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    with open(sys.argv[1], "w") as f:
        json.dump(stats, f)
    print("torch_train: done", torch.cuda.get_allocator_backend())


if __name__ == "__main__":
    main()
