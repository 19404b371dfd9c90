"""Several CUDA processes from one PyTorch program: two workers started by
fork before the parent touches CUDA (multiprocessing ends each with
os._exit, which skips exit handlers), the parent, two
torch.multiprocessing.spawn workers, and a DataLoader worker (spawn context)
that touches CUDA. A trace of it must hold six processes, each ended
cleanly. With argv[1], each worker writes its truth to argv[1].RANK (spawn)
or argv[1].forkRANK: its pid, the line of its tensor (the `line:` comment
named by "marker") and what PyTorch says it allocated.
"""
import os
import sys

import torch
import torch.multiprocessing as mp


def write_truth(path, marker):
    from truth import marked_lines, write
    write(path, {
        "pid": os.getpid(), "file": __file__, "lines": marked_lines(__file__),
        "marker": marker,
        "allocated": torch.cuda.memory_allocated(),
        "max_allocated": torch.cuda.max_memory_allocated()})


def spawn_worker(rank, truth_path):
    x = torch.ones(1 << 20, device="cuda") * rank  # line:worker
    torch.cuda.synchronize()
    print(f"torch_spawn: worker {rank} sum {x.sum().item()}")
    if truth_path:
        write_truth(f"{truth_path}.{rank}", "worker")


def fork_worker(rank, truth_path):
    x = torch.ones(1 << 19, device="cuda") * (rank + 1)  # line:fork_worker
    torch.cuda.synchronize()
    print(f"torch_spawn: fork worker {rank} sum {x.sum().item()}")
    if truth_path:
        write_truth(f"{truth_path}.fork{rank}", "fork_worker")


class CudaTouchingDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        t = torch.full((16,), float(i), device="cuda")
        return t.sum().item()


def main():
    truth_path = sys.argv[1] if len(sys.argv) > 1 else ""
    # Forked before this process starts CUDA (a fork child cannot use a
    # CUDA its parent started).
    forked = [mp.get_context("fork").Process(target=fork_worker, args=(r, truth_path))
              for r in range(2)]
    for w in forked:
        w.start()
    for w in forked:
        w.join()
    if any(w.exitcode != 0 for w in forked):
        sys.exit(f"a fork worker failed: {[w.exitcode for w in forked]}")
    a = torch.zeros(1 << 20, device="cuda")
    mp.spawn(spawn_worker, args=(truth_path,), nprocs=2, join=True)
    loader = torch.utils.data.DataLoader(CudaTouchingDataset(), num_workers=1,
                                         multiprocessing_context="spawn")
    print("torch_spawn: loader", [float(v) for v in loader])
    print("torch_spawn: done", a.sum().item())


if __name__ == "__main__":
    main()
