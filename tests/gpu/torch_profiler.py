"""torch.profiler inside a recorded run: Kineto wants CUPTI too, and on CUDA
13.0 only one client may subscribe. The program must finish normally."""
import torch


def main():
    x = torch.randn(1024, 1024, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()
    events = prof.key_averages()
    print("torch_profiler: done,", len(events), "event kinds")


if __name__ == "__main__":
    main()
