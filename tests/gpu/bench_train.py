"""Timing workload: a training loop under bf16 autocast. BENCH_MODEL picks
it: `resnet50` (default; torchvision's, SGD with momentum, batch 64) or
`gpt2` (a GPT-2-size model from transformers' config, 12 layers of 768,
AdamW, batch 8 of 512 tokens). BENCH_BATCH: another batch size (a small
one leaves the GPU waiting on the host, so that the host sets every step's
pace, the case where recording's host time shows in full); BENCH_STEPS:
how many steps are timed (default 100).
Prints one JSON line: median step time (ms) over the timed steps."""
import json
import os
import statistics
import time

import torch

from host_probe import host_probe_ms
from recording_switch import timed_steps, torch_history


def resnet50(batch):
    import torchvision

    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return model, opt, lambda: torch.nn.functional.cross_entropy(model(x), y)


def gpt2(batch):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (batch, 512), device="cuda")
    return model, opt, lambda: model(input_ids=ids, labels=ids).loss


MODELS = {"resnet50": (resnet50, 64), "gpt2": (gpt2, 8)}


def main():
    name = os.environ.get("BENCH_MODEL", "resnet50")
    build, default_batch = MODELS[name]
    steps = int(os.environ.get("BENCH_STEPS", "100"))
    # cuDNN's autotuner picks its algorithms by timing them, and may pick
    # others in the next run: that alone moved the plain runs' step time by
    # up to 24% between runs, more than the overhead being measured. Its
    # heuristics pick the same ones every run. BENCH_CUDNN_AUTOTUNE=1 turns
    # the autotuner back on.
    torch.backends.cudnn.benchmark = os.environ.get("BENCH_CUDNN_AUTOTUNE") == "1"
    batch = int(os.environ.get("BENCH_BATCH", default_batch))
    model, opt, forward = build(batch)
    # BENCH_TORCH_HISTORY: PyTorch's own allocation history, the reference
    # `overhead.sh` variants `torchhistory` and `torchtrace` measure.
    torch_history(True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # Warm up for three seconds (cuDNN autotuning, clocks, caches).
    start = time.perf_counter()
    while time.perf_counter() - start < 3.0:
        step()
    # Where a step's time goes, to tell the spread between runs apart: the
    # host's time to issue the step (Python, autograd, launches, and the
    # collector's callbacks) against the whole step. When the two are close
    # the step is host-bound and every microsecond the collector spends on
    # the host shows in full.
    issue = []

    def timed_step():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        issue.append((t1 - t0) * 1e3)
        return (time.perf_counter() - t0) * 1e3

    probe_before = host_probe_ms()
    # BENCH_PAUSE_EVERY: recorded and paused steps alternated
    # (recording_switch.py).
    times, extra = timed_steps(timed_step, steps)
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    print(json.dumps({
        "bench": name,
        "batch": batch,
        "median_ms": statistics.median(times),
        "issue_ms": statistics.median(issue),
        "min_ms": min(times),
        "probe_ms": (probe_before + host_probe_ms()) / 2,
        "cpu": cpu,
        "cpus": len(os.sched_getaffinity(0)),
        "steps": len(times),
        **extra,
    }))


if __name__ == "__main__":
    main()
