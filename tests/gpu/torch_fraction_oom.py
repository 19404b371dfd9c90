"""An out-of-memory error raised by PyTorch's allocator against a memory
fraction, not a full device: torch.cuda.set_per_process_memory_fraction(0.05)
then 256 MiB tensors until torch.OutOfMemoryError, which this program lets
kill it (exit code 1), as a training job would die. Before dying it writes
the ground truth to argv[1]: the request, the limit, the error message, the
line marked marked `oom`, and PyTorch's figures.
usage: torch_fraction_oom.py TRUTH_JSON
"""
import sys

import torch

from truth import marked_lines, torch_state, write

FRACTION = 0.05


def main():
    torch.cuda.set_per_process_memory_fraction(FRACTION)
    _, total = torch.cuda.mem_get_info()
    held = []
    try:
        while True:
            held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))  # line:oom
    except torch.OutOfMemoryError as e:
        write(sys.argv[1], {
            "file": __file__,
            "lines": marked_lines(__file__),
            "request": 256 << 20,
            "limit": int(FRACTION * total),
            "device_total": total,
            "held": len(held),
            "message": str(e),
            "torch": torch_state(torch),
        })
        raise


if __name__ == "__main__":
    main()
