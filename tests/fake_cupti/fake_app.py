"""A Python "CUDA program" for the fake driver in fake_cupti.c: it starts the
fake CUDA (which injects the collector) and allocates through ctypes from
known lines, marked with a `line:` comment, which the trace's Python frames must
name. argv[1] is the fake libcupti.so.13; argv[2] the scenario: `frames`
(driver allocations from nested functions and a thread), `torch` (tensors
from the stand-in caching allocator of fake_torch.cpp, whose library is
argv[3]), `torch_direct_first` (the same after a CUDA allocation of its
own), `paused` (recording paused and resumed by the program),
`torch_threads` (a tensor from Python, two from a thread without
Python, and two from a thread evaluating an autograd node and then none,
as PyTorch's autograd threads allocate), `torch_workspace` (a cuBLASLt
workspace and tensors from the stand-in libtorch_cuda of fake_blas.cpp),
`torch_fragmented_oom` (an out-of-memory error with enough free in
the segment but in pieces), `torch_async_fraction_oom` (the
cudaMallocAsync backend refusing a tensor against the memory fraction), `shapes`
(allocations from generators, coroutines, deep recursion and other shapes of
code), `os_exit` (allocations, then os._exit), `fork_workers` (multiprocessing
workers started by fork that use CUDA), `pools` (JAX's and CuPy's pools, from the
stand-ins in stand_ins/, through the bootstrap `record` puts on the path) or
`cupy_kept` / `cupy_freed` (CuPy's pool growing with arrays kept, or with its
cache alone), `steps` (training steps marked by a stand-in optimizer, then
by the program; `steps_signalled`: the same, signalling itself with SIGUSR2
after steps 10 and 20), `phases` (a training loop's forward, backward and
optimizer step, marked by no one; `phases_closure`: the same in a closure
the optimizer's step calls) or `nvtx` (ranges of the `nvtx`
package) or `roles` (a training loop whose tensors' roles are known)."""

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
lib.fake_cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
lib.fake_cuMemAlloc.restype = ctypes.c_uint32
# (`fork_workers` starts CUDA in its workers only.)
if sys.argv[2:3] != ["fork_workers"] and lib.fake_cuInit() < 0:
    sys.exit("fake cuInit failed")


def allocate(n):
    p = ctypes.c_uint64()
    if lib.fake_cuMemAlloc(ctypes.byref(p), n) != 0:  # line:allocate
        raise MemoryError(n)
    return p.value


class Model:
    def layer(self):
        return allocate(1 << 20)  # line:layer


def main():
    Model().layer()  # line:main
    # A thread running Python has its own frames.
    t = threading.Thread(target=lambda: allocate(4096))  # line:thread
    t.start()
    t.join()


def load_c10(library):
    """The stand-in libc10_cuda, its caching allocator initialized."""
    c10 = ctypes.CDLL(library)
    c10.fake_torch_malloc.argtypes = [ctypes.c_size_t]
    c10.fake_torch_malloc.restype = ctypes.c_uint64
    c10.fake_torch_free.argtypes = [ctypes.c_uint64]
    c10.fake_torch_oom.argtypes = [ctypes.c_size_t] * 3
    c10.fake_torch_init()
    return c10


def torch(library, direct_first=False):
    c10 = load_c10(library)
    if direct_first:
        # A CUDA allocation that is not the caching allocator's: the
        # collector must not attach from it.
        allocate(4096)

    def tensor(n):
        return c10.fake_torch_malloc(n)  # line:tensor

    kept = [tensor(4 << 20) for _ in range(3)]  # line:kept
    c10.fake_torch_free(tensor(1 << 20))  # line:temporary
    c10.fake_torch_snapshot()
    c10.fake_torch_oom(1 << 30, 8 << 30, 100 << 20)  # line:oom
    c10.fake_torch_empty_cache()  # line:empty_cache
    return kept


def torch_threads(library):
    # PyTorch loads its autograd engine with its allocator (the stand-in
    # fake_autograd.cpp, beside the stand-in libc10_cuda).
    autograd = ctypes.CDLL(os.path.join(os.path.dirname(library), "libtorch_cpu.so"))
    autograd.fake_autograd_backward.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    autograd.fake_autograd_backward.restype = ctypes.c_long
    c10 = load_c10(library)
    c10.fake_torch_bench_native.argtypes = [ctypes.c_long, ctypes.c_uint, ctypes.c_int]
    c10.fake_torch_bench_native.restype = ctypes.c_double
    kept = c10.fake_torch_malloc(1 << 20)  # line:python_thread
    # One warm-up tensor and one timed, 3 frames below the thread's entry.
    c10.fake_torch_bench_native(1, 1, 3)
    # A backward node's tensor, then one outside any node, on a thread
    # without Python.
    malloc = ctypes.cast(c10.fake_torch_malloc, ctypes.c_void_p)
    print("node uses", autograd.fake_autograd_backward(malloc, 2 << 20))
    return kept


def torch_workspace(library):
    """Two matmuls of the stand-in libtorch_cuda (fake_blas.cpp): the first
    gives cuBLASLt its 1 MiB workspace, kept to the end, as torch's does;
    both keep their 2 MiB output."""
    blas = ctypes.CDLL(os.path.join(os.path.dirname(library), "libtorch_cuda.so"))
    blas.fake_blas_matmul.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    blas.fake_blas_matmul.restype = ctypes.c_uint64
    c10 = load_c10(library)
    malloc = ctypes.cast(c10.fake_torch_malloc, ctypes.c_void_p)
    return [blas.fake_blas_matmul(malloc, 2 << 20) for _ in range(2)]  # line:matmul


def torch_fragmented_oom(library):
    """Ten 2 MiB tensors fill a 20 MiB segment; every other one is freed
    (10 MiB free in 2 MiB holes); then a 4 MiB request fails: enough free
    in the segment, no block large enough."""
    c10 = load_c10(library)
    blocks = [c10.fake_torch_malloc(2 << 20) for _ in range(10)]  # line:blocks
    for b in blocks[::2]:
        c10.fake_torch_free(b)
    c10.fake_torch_oom(4 << 20, 80 << 30, 100 << 20)  # line:fragmented_oom
    return blocks


def torch_async_fraction_oom(library):
    """The stand-in's cudaMallocAsync backend (FAKE_TORCH_BACKEND, set by
    the test) under a 10 MiB memory fraction: 4 MiB tensors until one is
    refused (the third), as torch refuses it, before any CUDA allocation."""
    c10 = load_c10(library)
    c10.fake_torch_set_limit.argtypes = [ctypes.c_size_t]
    c10.fake_torch_set_limit(10 << 20)
    held = []
    while True:
        p = c10.fake_torch_malloc(4 << 20)  # line:async_oom
        if not p:
            break
        held.append(p)
    print("held", len(held))
    return held


def pools():
    """JAX's pool: not read before its backend starts; then 10 MiB in use,
    30 MiB, a 50 MiB spike no reading sees (JAX's own peak keeps it), and
    5 MiB at exit, in a 1 GiB pool. CuPy's: 3 MiB then 1 MiB used of 8 MiB.
    Each state is held for several reading intervals."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    import cupy
    import jax
    from jax._src import xla_bridge

    hold = 0.15
    time.sleep(hold)  # JAX imported, its backend not started
    xla_bridge._backends["cuda"] = object()
    gib = 1 << 30
    mib = 1 << 20
    for in_use, peak in [(10 * mib, 10 * mib), (30 * mib, 30 * mib), (5 * mib, 50 * mib)]:
        xla_bridge.stats = {"bytes_in_use": in_use, "peak_bytes_in_use": peak,
                            "pool_bytes": gib, "bytes_limit": gib}
        time.sleep(hold)
    pool = cupy.get_default_memory_pool()
    for used in [3 * mib, 1 * mib]:
        pool.used, pool.total = used, 8 * mib
        time.sleep(hold)
    if xla_bridge.started_by_someone_else:
        sys.exit("JAX's backend was started by the bootstrap")


STEPS = 50


def steps(library, signal_after=()):
    """STEPS training steps of the stand-in caching allocator, marked by the
    stand-in optimizer's global post-step hooks (which the bootstrap
    registers): each step makes a 4 MiB activation it frees and keeps a
    2 MiB tensor; the first step also makes the optimizer's 16 MiB state
    (sizes in even MiB, so that the allocator splits every block it
    reuses: each tensor's block is its own size). A
    second optimizer steps in every iteration too and must not add steps.
    Then 5 steps marked by the program (gmem_prof.step()), each keeping
    1 MiB of driver memory, and an out-of-memory error in the step under
    way (the 56th). After each optimizer step numbered in `signal_after`
    the program sends itself SIGUSR2 (`record --window-signal`) and waits
    half a second, for the collector's writer to see it between steps."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    from torch.optim import optimizer

    c10 = load_c10(library)
    state = []
    kept = []

    def update():
        if not state:
            state.append(c10.fake_torch_malloc(16 << 20))  # line:optimizer_state

    main_optimizer = optimizer.Optimizer(update)
    other_optimizer = optimizer.Optimizer(lambda: None)
    for n in range(1, STEPS + 1):
        activation = c10.fake_torch_malloc(4 << 20)  # line:activation
        kept.append(c10.fake_torch_malloc(2 << 20))  # line:kept_tensor
        c10.fake_torch_free(activation)
        main_optimizer.step()
        other_optimizer.step()
        if n in signal_after:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.5)
    import gmem_prof

    numbers = []
    for _ in range(5):
        kept.append(allocate(1 << 20))  # line:kept_driver
        numbers.append(gmem_prof.step())
    print("program steps", *numbers)
    c10.fake_torch_oom(1 << 30, 8 << 30, 100 << 20)  # line:step_oom


PHASE_ITERATIONS = 8


def phases(library, closure=False):
    """PHASE_ITERATIONS iterations of a training loop in PyTorch's three
    phases, none marked by the program: a forward that makes a 4 MiB
    activation it keeps for the backward; a backward
    (torch.autograd.backward, which loss.backward() calls) that makes the
    1 MiB gradient in its first iteration (kept from then on) and frees the
    activation; the optimizer's step, whose 2 MiB temporary is freed inside
    it and whose 16 MiB state comes in its first step. Then a range of the
    program's own (`gmem_prof.range`) holding an 8 MiB temporary and an
    out-of-memory error. With `closure`, each iteration's forward and
    backward run in a closure the optimizer's step calls, as Lightning's
    training step does."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    import torch
    from torch.optim import optimizer

    c10 = load_c10(library)
    grads, state = [], []

    def update():
        if not state:
            state.append(c10.fake_torch_malloc(16 << 20))  # line:phase_state
        c10.fake_torch_free(c10.fake_torch_malloc(2 << 20))  # line:phase_temporary

    main_optimizer = optimizer.Optimizer(update)

    def iteration():
        activation = c10.fake_torch_malloc(4 << 20)  # line:phase_activation

        def backward():
            if not grads:
                grads.append(c10.fake_torch_malloc(1 << 20))  # line:phase_grad
            c10.fake_torch_free(activation)

        torch.autograd.backward(backward)

    for _ in range(PHASE_ITERATIONS):
        if closure:
            main_optimizer.step(iteration)
        else:
            iteration()
            main_optimizer.step()
    import gmem_prof

    with gmem_prof.range("validation"):
        c10.fake_torch_free(c10.fake_torch_malloc(8 << 20))  # line:validation
        c10.fake_torch_oom(1 << 30, 8 << 30, 100 << 20)  # line:validation_oom


ROLES_ITERATIONS = 3


class KVCache:
    """A generation cache, grown by replacing it with a larger copy as a
    cat of past keys does."""

    def __init__(self, c10):
        self.c10 = c10
        self.tensor = 0

    def update(self, size):
        grown = self.c10.fake_torch_malloc(size)  # line:role_kv_cache
        if self.tensor:
            self.c10.fake_torch_free(self.tensor)
        self.tensor = grown


def roles(library, closure=False):
    """A training loop over the stand-in torch whose tensors' roles are
    known by construction (MiB): an 8 MiB model placed by Module.to() (two
    4 MiB parameters); per iteration, zero_grad freeing the 8 MiB of
    gradients, a 2 MiB batch from Trainer._prepare_input (the last one
    freed), a forward keeping a 4 MiB activation, freeing a 2 MiB
    temporary, running a checkpointed block (a 6 MiB intermediate freed
    inside it, a 2 MiB output kept) and making a 2 MiB loss the program
    keeps until the next one; a backward recomputing the block (6 MiB,
    freed), making the two 4 MiB gradients and a 2 MiB temporary, and
    freeing the activations; the optimizer's step, making its 16 MiB state
    (two 8 MiB) in the first step and a 2 MiB temporary. Then the
    training state is freed and a generation loop moves a 1 MiB prompt and
    a 1 MiB mask to the device (inputs), copies the prompt on the device (a
    temporary) and grows a KV cache from 2 to 8 MiB. The allocated peak is
    the second iteration's backward temporary: 46 MiB. With `closure`, each
    iteration's forward and backward run in a closure the optimizer's step
    calls, as Lightning's training step does: the same roles. Before the
    loop, a sanity check's forward frees its two temporaries (2 and 1 MiB)
    before any phase began. FAKE_ROLES_ACTIVATION_MIB (even) changes the
    4 MiB activation, for a second run to compare; FAKE_ROLES_ITERATIONS
    the number of iterations (a benchmark's trace)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    import torch
    import torch.nn
    from torch.optim import optimizer
    from transformers.trainer import Trainer

    c10 = load_c10(library)
    malloc, free = c10.fake_torch_malloc, c10.fake_torch_free
    activation_mib = int(os.environ.get("FAKE_ROLES_ACTIVATION_MIB", "4"))
    model = torch.nn.Module([4 << 20, 4 << 20]).to(malloc)  # line:role_parameters
    trainer = Trainer(malloc)
    grads, state, batch, loss = [], [], [0], [0]

    def update():
        if not state:
            state.extend(malloc(8 << 20) for _ in range(2))  # line:role_optimizer_state
        free(malloc(2 << 20))  # line:role_update_temporary

    def block():
        free(malloc(6 << 20))  # line:role_checkpointed
        return malloc(2 << 20)  # line:role_block_output

    main_optimizer = optimizer.Optimizer(update)
    # A sanity check before training (Lightning runs validation steps
    # first): a forward whose 2 MiB hidden state and 1 MiB output are freed
    # in it, the first not at once, before any phase began.
    hidden = malloc(2 << 20)  # line:role_sanity_hidden
    output = malloc(1 << 20)  # line:role_sanity_output
    free(hidden)
    free(output)

    def iteration():
        activation = malloc(activation_mib << 20)  # line:role_activation
        free(malloc(2 << 20))  # line:role_forward_temporary
        output = block()
        new_loss = malloc(2 << 20)  # line:role_loss
        if loss[0]:
            free(loss[0])
        loss[0] = new_loss

        def backward():
            block_again = block()
            grads.extend(malloc(4 << 20) for _ in range(2))  # line:role_gradients
            free(malloc(2 << 20))  # line:role_backward_temporary
            free(block_again)
            free(activation)
            free(output)

        torch.autograd.backward(backward)

    for _ in range(int(os.environ.get("FAKE_ROLES_ITERATIONS", ROLES_ITERATIONS))):
        for g in grads:
            free(g)
        grads.clear()
        new_batch = trainer._prepare_input(2 << 20)  # line:role_input
        if batch[0]:
            free(batch[0])
        batch[0] = new_batch
        if closure:
            main_optimizer.step(iteration)
        else:
            iteration()
            main_optimizer.step()
    for t in grads + state + batch + loss:
        free(t)
    # Generation: a prompt and its mask moved to the device with a plain
    # .to("cuda") (a copy from host memory, through cudaMemcpyAsync and
    # through cudaMemcpy), a copy of the prompt made on the device (not an
    # input), and a KV cache growing from 2 to 8 MiB.
    copy = c10.fake_torch_copy
    copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int]
    prompt = malloc(1 << 20)  # line:role_prompt
    copy(prompt, 0, 1 << 20, 0)
    mask = malloc(1 << 20)  # line:role_mask
    copy(mask, 0, 1 << 20, 1)
    clone = malloc(1 << 20)  # line:role_prompt_clone
    copy(clone, prompt, 1 << 20, 0)
    cache = KVCache(c10)
    for size in (2, 4, 6, 8):
        cache.update(size << 20)
    for t in (clone, mask, prompt):
        free(t)
    return model


def step_bench(library, n):
    """µs per step marked from Python: gmem_prof.step() n times, and n
    steps of the stand-in optimizer (its global hook, which the bootstrap
    registers, marks each), timed inside the program."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    from torch.optim import optimizer

    import gmem_prof

    load_c10(library)
    gmem_prof.step()  # the collector found once
    t = time.perf_counter()
    for _ in range(n):
        gmem_prof.step()
    print("%.2f us per gmem_prof.step()" % ((time.perf_counter() - t) / n * 1e6))
    o = optimizer.Optimizer(lambda: None)
    t = time.perf_counter()
    for _ in range(n):
        o.step()
    print("%.2f us per optimizer step, its hook included" % ((time.perf_counter() - t) / n * 1e6))


def nvtx_ranges(library):
    """NVTX ranges from the `nvtx` package: 6 iterations, each an
    `annotate("step", domain="train")` holding a pushed "forward" that
    keeps a 2 MiB tensor and frees a 4 MiB one, then a mark."""
    import nvtx

    c10 = load_c10(library)
    kept = []
    for _ in range(6):
        with nvtx.annotate("step", domain="train"):
            nvtx.push_range("forward")
            activation = c10.fake_torch_malloc(4 << 20)  # line:range_activation
            kept.append(c10.fake_torch_malloc(2 << 20))  # line:range_kept
            c10.fake_torch_free(activation)
            nvtx.pop_range()
        nvtx.mark("iteration")
    return kept


def cupy_loop(keep):
    """CuPy's pool taking a 1 MiB chunk from CUDA at each of 60 steps, for
    an array the loop keeps (`keep`: CuPy's own count of arrays in use
    grows with the chunks) or frees at once (only the pool's cache grows).
    Each step is held for two of the pool's readings."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
    import cupy

    pool = cupy.get_default_memory_pool()
    for _ in range(60):
        pool.malloc(1 << 20, allocate, keep)  # line:cupy_step
        time.sleep(0.02)


def paused(library):
    """Recording paused and resumed by the program (the hook benchmarks use
    to alternate recorded and unrecorded steps): a driver allocation and a
    tensor before, while paused, and after; sizes tell them apart. Prints
    what each call of the hook returned."""
    c10 = load_c10(library)
    collector = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
    switch = collector.gmem_prof_set_recording
    allocate(1 << 20)
    c10.fake_torch_malloc(1000)
    answers = [switch(0), switch(0)]
    allocate(2 << 20)
    c10.fake_torch_malloc(2000)
    answers += [switch(1), switch(1)]
    allocate(3 << 20)
    c10.fake_torch_malloc(3000)
    print("answers", *answers)


def generate(sizes):
    for n in sizes:
        yield allocate(n)  # line:generator


async def coroutine():
    await asyncio.sleep(0)
    return allocate(1003)  # line:coroutine


def comprehension():
    return [allocate(n) for n in (1004,)]  # line:comprehension


def traced(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)  # line:wrapper

    return wrapper


@traced
def decorated():
    return allocate(1005)  # line:decorated


def in_with():
    with contextlib.nullcontext():
        return allocate(1006)  # line:with


def recurse(depth):
    if depth == 0:
        return allocate(1007)  # line:recursed
    return recurse(depth - 1)  # line:recurse


def in_handler():
    try:
        raise ValueError
    except ValueError:
        return allocate(1008)  # line:except


def shapes():
    """Allocations from code other than plain calls, each of its own size:
    a generator consumed by a loop (1001) and resumed on another thread
    (1002; 1009 is its first step), a coroutine run by asyncio
    (1003), a comprehension (1004), a decorated function (1005), a `with`
    block (1006), a recursion deeper than the frames a stack keeps (1007),
    an exception handler (1008), a class body (1010) and code from
    `exec` (1011)."""
    list(generate([1001]))  # line:consumer
    resumed = generate([1009, 1002])
    next(resumed)
    t = threading.Thread(target=lambda: next(resumed))  # line:resumed
    t.start()
    t.join()
    asyncio.run(coroutine())  # line:asyncio
    comprehension()  # line:comprehend
    decorated()  # line:decorate
    in_with()  # line:call_with
    recurse(300)  # line:recursion
    in_handler()  # line:handle

    class Body:  # line:classdef
        buffer = allocate(1010)  # line:class

    exec(compile("allocate(1011)", "<generated>", "exec"))  # line:exec


def os_exit():
    """Three allocations, then os._exit(7): no exit handler runs."""
    for _ in range(3):
        allocate(1 << 20)
    os._exit(7)


def fork_worker(n):
    if lib.fake_cuInit() < 0:
        sys.exit("fake cuInit failed")
    for _ in range(n):
        allocate(1 << 20)  # line:worker


def fork_workers():
    """Two workers started by fork, as multiprocessing does by default on
    Linux, each starting CUDA (the parent never does) and allocating 1 and
    2 MiB; multiprocessing ends each with os._exit."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=fork_worker, args=(n,)) for n in (1, 2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print("exit codes", *[w.exitcode for w in workers])


if sys.argv[2:3] == ["pools"]:
    pools()
elif sys.argv[2:3] == ["cupy_kept"]:
    cupy_loop(keep=True)
elif sys.argv[2:3] == ["cupy_freed"]:
    cupy_loop(keep=False)
elif sys.argv[2:3] == ["torch"]:
    torch(sys.argv[3])
elif sys.argv[2:3] == ["torch_threads"]:
    torch_threads(sys.argv[3])
elif sys.argv[2:3] == ["torch_async_fraction_oom"]:
    torch_async_fraction_oom(sys.argv[3])
elif sys.argv[2:3] == ["torch_workspace"]:
    kept = torch_workspace(sys.argv[3])
elif sys.argv[2:3] == ["torch_fragmented_oom"]:
    torch_fragmented_oom(sys.argv[3])
elif sys.argv[2:3] == ["torch_direct_first"]:
    torch(sys.argv[3], direct_first=True)
elif sys.argv[2:3] == ["paused"]:
    paused(sys.argv[3])
elif sys.argv[2:3] == ["shapes"]:
    shapes()
elif sys.argv[2:3] == ["os_exit"]:
    os_exit()
elif sys.argv[2:3] == ["steps"]:
    steps(sys.argv[3])
elif sys.argv[2:3] == ["phases"]:
    phases(sys.argv[3])
elif sys.argv[2:3] == ["roles"]:
    kept = roles(sys.argv[3])
elif sys.argv[2:3] == ["roles_closure"]:
    kept = roles(sys.argv[3], closure=True)
elif sys.argv[2:3] == ["phases_closure"]:
    phases(sys.argv[3], closure=True)
elif sys.argv[2:3] == ["steps_signalled"]:
    steps(sys.argv[3], signal_after=(10, 20))
elif sys.argv[2:3] == ["nvtx"]:
    kept = nvtx_ranges(sys.argv[3])
elif sys.argv[2:3] == ["step_bench"]:
    step_bench(sys.argv[3], int(sys.argv[4]))
elif sys.argv[2:3] == ["fork_workers"]:
    fork_workers()
else:
    main()  # line:module
