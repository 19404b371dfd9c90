"""Programs whose memory is taken apart by role, on the GPU: run once under
`gmem-prof record` (no profiler: CUPTI has one subscriber) and once under
PyTorch's memory profiler, whose memory timeline categories at its peak are
the oracle (issue "What the memory is").

    python3 torch_roles.py PROGRAM OUT.json [--profile]

PROGRAM: resnet50 (SGD with momentum), gpt2 (a GPT-2-size model from
transformers' config, AdamW, bf16 autocast), gpt2_ckpt (the same with
activation checkpointing), generate (GPT-2's generation loop with its KV
cache). OUT.json gets the program's own figures (memory_stats, parameter,
gradient and optimizer-state bytes) and, with --profile, torch.profiler's
categories at its allocated peak.
"""

import json
import os
import sys

import torch

STEPS = 3
# Tokens the generation loop makes (the profiler's analysis of it takes
# minutes at 64).
TOKENS = int(os.environ.get("ROLES_TOKENS", "64"))


def resnet50():
    import torchvision

    model = torchvision.models.resnet50().to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return model, opt, step


def gpt2(checkpointing=False):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
    model = GPT2LMHeadModel(config).to("cuda")
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (8, 512), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    return model, opt, step


def generate():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
    model = GPT2LMHeadModel(config).to("cuda").eval()
    ids = torch.randint(0, config.vocab_size, (16, 128), device="cuda")

    def step():
        with torch.no_grad():
            model.generate(
                ids,
                max_new_tokens=TOKENS,
                min_new_tokens=TOKENS,
                do_sample=False,
                use_cache=True,
                pad_token_id=0,
            )

    return model, None, step


PROGRAMS = {
    "resnet50": resnet50,
    "gpt2": gpt2,
    "gpt2_ckpt": lambda: gpt2(checkpointing=True),
    "generate": generate,
}


def tensor_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.is_cuda and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.untyped_storage().nbytes()
    return total


def own_figures(model, opt):
    params = list(model.parameters()) + list(model.buffers())
    state = [v for s in (opt.state.values() if opt else []) for v in s.values()]
    return {
        "parameters": tensor_bytes(params),
        "gradients": tensor_bytes(p.grad for p in model.parameters() if p.grad is not None),
        "optimizer_state": tensor_bytes(state),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
    }


def profiled_categories(prof):
    """torch.profiler's memory timeline at its highest: bytes per category."""
    from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

    timeline = MemoryProfileTimeline(prof._memory_profile())
    times, sizes = timeline._coalesce_timeline("cuda:0")
    peak = max(range(len(sizes)), key=lambda i: sum(sizes[i]))
    names = {i + 1: (c.name.lower() if c is not None else "none") for c, i in _CATEGORY_TO_INDEX.items()}
    return {
        "peak_bytes": sum(sizes[peak]),
        "peak_time_us": times[peak] - times[0],
        "categories": {names[i]: b for i, b in enumerate(sizes[peak]) if i in names and b},
    }


def main():
    name, out = sys.argv[1], sys.argv[2]
    profile = "--profile" in sys.argv[3:]
    torch.manual_seed(0)
    model, opt, step = PROGRAMS[name]()
    truth = {"program": name}
    if profile:
        from torch.profiler import ProfilerActivity, profile as profiler

        with profiler(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        ) as prof:
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
        truth["profiler"] = profiled_categories(prof)
    else:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    truth.update(own_figures(model, opt))
    json.dump(truth, open(out, "w"), indent=1)
    print(name, json.dumps(truth))


if __name__ == "__main__":
    main()
