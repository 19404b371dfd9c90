"""Several CUDA processes from one PyTorch program: the parent, two
torch.multiprocessing.spawn workers, and a DataLoader worker (spawn context)
that touches CUDA. A trace of it must hold four processes. With argv[1],
each worker writes its truth to argv[1].RANK: its pid, the line of its
tensor (its `line:` comment) and what PyTorch says it allocated.
"""
import os
import sys

import torch
import torch.multiprocessing as mp


def spawn_worker(rank, truth_path):
    x = torch.ones(1 << 20, device="cuda") * rank  # line:worker
    torch.cuda.synchronize()
    print(f"torch_spawn: worker {rank} sum {x.sum().item()}")
    if truth_path:
        from truth import marked_lines, write
        write(f"{truth_path}.{rank}", {
            "pid": os.getpid(), "file": __file__, "lines": marked_lines(__file__),
            "allocated": torch.cuda.memory_allocated(),
            "max_allocated": torch.cuda.max_memory_allocated()})


class CudaTouchingDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        t = torch.full((16,), float(i), device="cuda")
        return t.sum().item()


def main():
    a = torch.zeros(1 << 20, device="cuda")
    mp.spawn(spawn_worker, args=(sys.argv[1] if len(sys.argv) > 1 else "",), nprocs=2, join=True)
    loader = torch.utils.data.DataLoader(CudaTouchingDataset(), num_workers=1,
                                         multiprocessing_context="spawn")
    print("torch_spawn: loader", [float(v) for v in loader])
    print("torch_spawn: done", a.sum().item())


if __name__ == "__main__":
    main()
