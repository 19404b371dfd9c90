"""Several CUDA processes from one PyTorch program: the parent, two
torch.multiprocessing.spawn workers, and a DataLoader worker (spawn context)
that touches CUDA. A trace of it must hold four processes.
"""
import torch
import torch.multiprocessing as mp


def spawn_worker(rank):
    x = torch.ones(1 << 20, device="cuda") * rank  # 4 MiB per worker
    torch.cuda.synchronize()
    print(f"torch_spawn: worker {rank} sum {x.sum().item()}")


class CudaTouchingDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        t = torch.full((16,), float(i), device="cuda")
        return t.sum().item()


def main():
    a = torch.zeros(1 << 20, device="cuda")
    mp.spawn(spawn_worker, nprocs=2, join=True)
    loader = torch.utils.data.DataLoader(CudaTouchingDataset(), num_workers=1,
                                         multiprocessing_context="spawn")
    print("torch_spawn: loader", [float(v) for v in loader])
    print("torch_spawn: done", a.sum().item())


if __name__ == "__main__":
    main()
