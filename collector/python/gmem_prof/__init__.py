"""gmem-prof's calls for the program it profiles.

    import gmem_prof
    for batch in data:
        train(batch)
        gmem_prof.step()    # the end of one step (a training iteration)

Every call does nothing when the program is not recorded by
`gmem-prof record` (or before CUDA has started in this process), so the
calls can stay in the program. PyTorch programs need no call: the bootstrap
`record` puts on the path marks a step each time the first optimizer
steps.
"""

import os

__all__ = ["step"]

# `gmem_prof_step`'s sources (traces/FORMAT.md, the Step record).
OPTIMIZER = 1
PROGRAM = 2

_step_function = None
# The collector CUDA would load: a process started without it is never
# recorded, so its calls return at once.
_collector_path = os.environ.get("CUDA_INJECTION64_PATH", "")
if not os.path.isabs(_collector_path):
    _collector_path = ""


def _collector_step():
    """The collector's `gmem_prof_step`, once CUDA has loaded the collector
    in this process; None before (and when not recorded)."""
    global _step_function
    if _step_function is not None or not _collector_path:
        return _step_function
    try:
        import ctypes

        # RTLD_NOLOAD finds the copy CUDA loaded, and never loads one.
        lib = ctypes.CDLL(_collector_path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        f = lib.gmem_prof_step
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_uint8]
    _step_function = f
    return f


def step(_source=PROGRAM):
    """Marks the end of one step of the program (a training iteration):
    the report gives each step's peak and what it kept, by site. Returns
    the step's number (1, 2, ...), or 0 when nothing was recorded."""
    if not _collector_path:
        return 0
    try:
        f = _collector_step()
        return int(f(_source)) if f is not None else 0
    except Exception:
        return 0
