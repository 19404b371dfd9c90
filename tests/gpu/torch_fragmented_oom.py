"""An out-of-memory error with the free memory cut into pieces: under a
memory fraction of 1 GiB, 240 tensors of 3 MiB fill 40 segments of 20 MiB
(six each); every other one is freed, leaving 3 MiB holes between live
tensors (no segment empty, so none can be given back); then a 256 MiB
request finds no block large enough and no room under the fraction for a
new segment, though the segments hold far more than 256 MiB free. PyTorch
raises OutOfMemoryError, which this program catches and lets exit 1.
Before exiting it writes the ground truth to argv[1]: the request, the
error's message, and the snapshot's pools then (free bytes, largest free
block). With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the same
program reports whether the request then succeeded (exit 0).
usage: torch_fragmented_oom.py TRUTH_JSON
"""
import sys

import torch

from truth import marked_lines, torch_state, write

MIB = 1 << 20
LIMIT = 1 << 30


def main():
    _, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(LIMIT / total)
    small = [torch.empty(3 * MIB, dtype=torch.uint8, device="cuda") for _ in range(240)]  # line:small
    for i in range(0, len(small), 2):
        small[i] = None
    torch.cuda.synchronize()
    truth = {"file": __file__, "lines": marked_lines(__file__), "request": 256 * MIB,
             "limit": int(LIMIT / total * total)}
    try:
        big = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")  # line:big
        truth["succeeded"] = True
        truth["torch"] = torch_state(torch)
        write(sys.argv[1], truth)
        del big
        return 0
    except torch.OutOfMemoryError as e:
        truth["succeeded"] = False
        truth["message"] = str(e)
        truth["torch"] = torch_state(torch)
        write(sys.argv[1], truth)
        return 1


if __name__ == "__main__":
    sys.exit(main())
