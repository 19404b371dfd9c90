"""Inputs moved to the device with a plain .to("cuda"), no trainer: each
of 5 iterations moves a pageable CPU batch (64 x 1024 float32, 256 KiB)
and its pinned labels (non_blocking) to the device, then trains a linear
layer on them. No frame names them: the host-to-device copy into each
tensor is the evidence (docs/design.md, "Roles"). Writes the marked lines
and the bytes each moved per iteration, for inputs_check.py."""
import json
import os
import sys

import torch

from truth import marked_lines


def main(out):
    model = torch.nn.Linear(1024, 10).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(64, 1024)
    labels = torch.randint(0, 10, (64,)).pin_memory()
    for _ in range(5):
        x = batch.to("cuda")  # line:batch
        y = labels.to("cuda", non_blocking=True)  # line:labels
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    lines = marked_lines(os.path.abspath(__file__))
    with open(out, "w") as f:
        json.dump({
            "lines": {k: lines[k] for k in ("batch", "labels")},
            "bytes": {"batch": x.nbytes, "labels": y.nbytes},
            "iterations": 5,
        }, f)


if __name__ == "__main__":
    main(sys.argv[1])
