"""torch.profiler (with profile_memory=True) inside a recorded run: Kineto
wants CUPTI too, and before CUPTI 13.2 only one client may subscribe. The
program must finish normally; it prints what the profiler saw, one JSON line:
the CUDA kernels it timed, the memory events it kept, and the matmuls it
counted on the host (the program ran 3), so that a profiler left without CUPTI
shows as kernels 0 while its host side stays whole."""
import json

import torch


def main():
    x = torch.randn(1024, 1024, device="cuda")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        for _ in range(3):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()
    events = prof.events()
    kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    memory = sum(1 for e in events if e.name == "[memory]")
    matmuls = sum(1 for e in events if e.name == "aten::mm")
    print(json.dumps({"torch_profiler": "done", "cuda_kernels": kernels,
                      "memory_events": memory, "matmuls": matmuls}))


if __name__ == "__main__":
    main()
