"""Recorded and unrecorded steps alternated inside one process (overhead.sh
variant `inprocess`): run under `gmem-prof record` with
BENCH_PAUSE_EVERY=K, a benchmark pauses and resumes recording every K steps
through the collector's `gmem_prof_set_recording`. Both halves then run in
the same process on the same host moments apart, so the host's speed,
which moved plain runs by up to 2x between runs on the H200, drops out of
their ratio. Paused, the program runs with CUPTI loaded and PyTorch's
trace tracker attached but no callback recording: the ratio is what the
collector's callbacks and recording cost, less that floor (the run-level
variants `plain` and `full` measure all of it). The same alternation runs
CUPTI alone (bare_cupti.c, everything off when paused) and PyTorch's own
recorder, for comparison."""
import ctypes
import os
import statistics


def timed_steps(step, steps):
    """The benchmark's timed steps (`step()` returns a step's ms): `steps`
    of them, or with BENCH_PAUSE_EVERY and a `recording_switch` twice as
    many, recorded and paused in turn (`alternate`). Returns their times and the
    fields the alternation adds to the benchmark's result."""
    switch = recording_switch()
    if not switch:
        return [step() for _ in range(steps)], {}
    times, ratios = alternate(step, 2 * steps, switch)
    return times, {"inprocess_ratio": statistics.median(ratios), "pair_ratios": ratios}


def recording_switch():
    """When the run asks for alternation (BENCH_PAUSE_EVERY), the switch of
    what records it: the collector's, bare_cupti.c's (CUPTI alone, the
    same way), or with BENCH_TORCH_HISTORY=1 PyTorch's own recorder turned
    on and off. Else None."""
    if not os.environ.get("BENCH_PAUSE_EVERY"):
        return None
    if os.environ.get("BENCH_TORCH_HISTORY"):
        return torch_history_switch()
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path:
        return None
    library = ctypes.CDLL(path)
    for name in ("gmem_prof_set_recording", "bare_cupti_set_recording"):
        if hasattr(library, name):
            switch = getattr(library, name)
            switch.argtypes = [ctypes.c_int]
            return switch
    raise SystemExit(f"{path} has no recording switch")


def torch_history(on):
    """PyTorch's own recorder on or off, as BENCH_TORCH_HISTORY asks: "1",
    allocation history with Python stacks (`_record_memory_history(
    stacks="python")`); "nostacks", the history without any stack (what
    PyTorch does for each event once a trace tracker is attached, and a
    little more: a bound on the floor a paused collector leaves). Returns
    whether it asked for anything. BENCH_TORCH_HISTORY_ENTRIES sets the
    history's length (default 100,000; 1 keeps the one slot written in
    cache, leaving little more than the cost of building each entry)."""
    import torch

    kind = os.environ.get("BENCH_TORCH_HISTORY")
    if not kind:
        return False
    if kind not in ("1", "nostacks"):
        # A plain run would pass for PyTorch's recorder.
        raise SystemExit(f"BENCH_TORCH_HISTORY={kind}: expected 1 or nostacks")
    entries = int(os.environ.get("BENCH_TORCH_HISTORY_ENTRIES", "100000"))
    if not on:
        torch.cuda.memory._record_memory_history(enabled=None)
    elif kind == "1":
        torch.cuda.memory._record_memory_history(max_entries=entries, stacks="python")
    else:
        torch.cuda.memory._record_memory_history(max_entries=entries, context=None)
    return True


def torch_history_switch():
    """`torch_history` as a switch (the benchmark turned it on at its start)."""
    state = {"on": True}

    def switch(on):
        if bool(on) == state["on"]:
            return 0
        torch_history(on)
        state["on"] = bool(on)
        return 1

    return switch


def alternate(step, steps, switch):
    """Runs `steps` timed steps (`step()` returns a step's ms) in phases of
    BENCH_PAUSE_EVERY, recorded and paused in turn; each pair of phases runs
    in one order then the other (recorded first, then paused first), so a
    drift within a pair does not lean every pair the same way. Returns the
    steps' times and the ratio of each pair's recorded median over its
    paused median."""
    every = int(os.environ["BENCH_PAUSE_EVERY"])
    times, ratios = [], []
    switched = 0
    for pair in range(steps // (2 * every)):
        order = [True, False] if pair % 2 == 0 else [False, True]
        medians = {}
        for recorded in order:
            # 1 when it switched, 0 when already so (each pair starts as
            # the one before ended).
            switched += switch(1 if recorded else 0)
            phase = [step() for _ in range(every)]
            times += phase
            medians[recorded] = statistics.median(phase)
        ratios.append(medians[True] / medians[False])
    switch(1)
    if switched == 0:
        raise SystemExit("gmem_prof_set_recording never switched: is the collector profiling?")
    return times, ratios
