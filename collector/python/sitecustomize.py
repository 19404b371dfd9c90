# gmem-prof's Python bootstrap. `gmem-prof record` puts this file's folder
# first on PYTHONPATH, so every Python process of the recorded program (its
# children and spawn workers too) runs it at start-up.
#
# It does three things:
# - It lets a process that ends with os._exit complete its part of the
#   trace. os._exit skips the exit handlers, the collector's among them, so
#   what the process did since the collector's last flush (200 ms by
#   default), and its end, would be missing: every fork-started
#   multiprocessing worker ends that way, and so do scripts that skip their
#   teardown. os._exit is wrapped to call the collector's gmem_prof_finish
#   first.
# - It reads the pools of JAX and CuPy.
# - It marks PyTorch's training steps: once the program imports
#   torch.optim, it registers a global optimizer post-step hook that calls
#   the collector's gmem_prof_step each time the first optimizer that
#   stepped steps again (a program with two optimizers, a GAN's, still makes
#   one step per iteration). Lightning, Hugging Face's Trainer and plain
#   loops all step through it. It marks the training loop's phases too, as
#   ranges of the domain "PyTorch": "backward" around each outermost
#   torch.autograd.backward (loss.backward() calls it), "optimizer step"
#   from each optimizer's global pre-step hook to its post-step hook, and
#   "forward" from an optimizer step's end to the next backward (the first
#   iteration's forward, before any step, is not marked; nor are the
#   micro-batches after the first of a gradient accumulation). An optimizer
#   step given a closure (Lightning's) holds the closure's forward and
#   backward; the backward is a range of its own inside it.
#
# Why the pools: JAX (XLA's BFC allocator) and CuPy keep their own memory pools. CUDA,
# and so the collector, sees only the pool; how much of it the program's
# arrays use is known only to the framework, through its own API. This
# module reads that API (JAX: Device.memory_stats(); CuPy: the default
# pool's used_bytes()/total_bytes()) every GMEM_PROF_POOL_MS (50 ms) and
# once as the interpreter exits, and hands each reading to the collector
# (gmem_prof_pool_usage, exported by the library CUDA loaded), which writes
# it into the trace as a PoolUsage record.
#
# Rules it keeps, because it runs inside someone else's program:
# - Until the program itself imports jax or cupy it starts nothing: no
#   thread, no import of either, no CUDA call. It never initialises JAX's
#   backend (that would take JAX's preallocation) and never loads the
#   collector (it only finds one CUDA already loaded).
# - os._exit still ends the process, whatever the collector does.
# - Any error turns it off quietly; the program goes on as it would have.
# - A sitecustomize of the program's own (or the system's) still runs: the
#   next one on the path is executed after this one, as Python would have.

import os
import sys


def _run_next_sitecustomize():
    """Runs the sitecustomize this one hides, if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


JAX = 1
CUPY = 2
SAMPLED = 0
EXIT = 1
UNKNOWN = (1 << 64) - 1


class _Sampler:
    def __init__(self, collector_path, interval):
        self.collector_path = collector_path
        self.interval = interval
        self.collector = None
        self.last = {}
        self.exit_hook = False
        self.started = False
        self.off = False
        self.failures = 0

    def start(self):
        if self.started:
            return
        self.started = True
        import threading

        t = threading.Thread(target=self._loop, name="gmem-prof pools", daemon=True)
        t.start()

    def _loop(self):
        import time

        while not self.off:
            time.sleep(self.interval)
            self.sample(SAMPLED)

    def _find_collector(self):
        if self.collector is None:
            import ctypes

            lib = _loaded_collector(ctypes, self.collector_path)
            if lib is None:
                return None  # CUDA has not started: nothing to read
            f = lib.gmem_prof_pool_usage
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                          ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint8]
            self.collector = f
        return self.collector

    def sample(self, reason):
        if self.off:
            return
        try:
            readings = list(_jax_pools()) + list(_cupy_pools())
            if not readings:
                return
            collector = self._find_collector()
            if collector is None:
                return
            if not self.exit_hook:
                # Registered now, after the framework's own exit handlers,
                # so that it runs before them (atexit runs last-in first).
                import atexit

                atexit.register(self.sample, EXIT)
                self.exit_hook = True
            for framework, device, in_use, peak, pool, limit in readings:
                key = (framework, device)
                figures = (in_use, peak, pool, limit)
                if key not in self.last and in_use == 0 and pool == 0:
                    continue  # a pool not used yet
                if reason == SAMPLED and self.last.get(key) == figures:
                    continue
                self.last[key] = figures
                collector(framework, device, in_use, peak, pool, limit, reason)
            self.failures = 0
        except Exception:
            # A framework still importing can fail a read; one that keeps
            # failing is one this module does not understand: stop.
            self.failures += 1
            if self.failures >= 20:
                self.off = True


def _jax_pools():
    jax = sys.modules.get("jax")
    if jax is None:
        return
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if initialized is None or not initialized():
        return
    for d in jax.local_devices():
        if getattr(d, "platform", "") != "gpu":
            continue
        stats = d.memory_stats() or {}
        if "bytes_in_use" not in stats:
            continue
        yield (
            JAX,
            int(getattr(d, "local_hardware_id", None) or d.id),
            int(stats["bytes_in_use"]),
            int(stats.get("peak_bytes_in_use", UNKNOWN)),
            int(stats.get("pool_bytes", stats.get("bytes_reserved", UNKNOWN))),
            int(stats.get("bytes_limit", UNKNOWN)),
        )


def _cupy_pools():
    cupy = sys.modules.get("cupy")
    if cupy is None or not hasattr(cupy, "get_default_memory_pool"):
        return
    pool = cupy.get_default_memory_pool()
    # The pool of this thread's current device: device 0 unless the
    # program's CUDA_VISIBLE_DEVICES says otherwise (CuPy keeps one pool per
    # device and answers for the current one).
    device = int(cupy.cuda.runtime.getDevice())
    yield (CUPY, device, int(pool.used_bytes()), UNKNOWN, int(pool.total_bytes()), UNKNOWN)


def _mark_optimizer_steps(optimizer_module):
    """Registers the hook that marks a step each time the first optimizer
    that stepped steps (PyTorch 2.0 and later have global step hooks)."""
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is None:
        return
    import weakref

    import gmem_prof

    first = [None]

    def hook(optimizer, args, kwargs):
        try:
            leader = first[0]() if first[0] is not None else None
            if leader is None:
                first[0] = weakref.ref(optimizer)
            elif leader is not optimizer:
                return
            gmem_prof.step(gmem_prof.OPTIMIZER)
        except Exception:
            pass

    register(hook)
    _mark_phases(optimizer_module, gmem_prof)


def _mark_phases(optimizer_module, gmem_prof):
    """Marks the training loop's phases as ranges (see the top of this
    file): wraps torch.autograd.backward, and registers a global pre-step
    and post-step hook of the optimizers."""
    autograd = sys.modules.get("torch.autograd")
    register_pre = getattr(optimizer_module, "register_optimizer_step_pre_hook", None)
    register_post = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    real_backward = getattr(autograd, "backward", None)
    if None in (register_pre, register_post, real_backward):
        return
    import functools
    import threading

    DOMAIN = "PyTorch"
    # The open ranges' ids: the loop's phase (forward or backward), and the
    # optimizer's step, which may hold a forward and backward of its own (a
    # closure, as Lightning's: the backward is then a range inside it).
    # Whether the thread is inside a backward already (a backward inside
    # one is not a phase of its own).
    loop, stepping = [0], [0]
    inside = threading.local()

    def begin(slot, name):
        gmem_prof._range_end(slot[0])
        slot[0] = gmem_prof._range_begin(name, DOMAIN) if name else 0

    def switch(name):
        begin(loop, name)

    @functools.wraps(real_backward)
    def backward(*args, **kwargs):
        outermost = not getattr(inside, "backward", False)
        if outermost:
            inside.backward = True
            try:
                switch("backward")
            except Exception:
                pass
        try:
            return real_backward(*args, **kwargs)
        finally:
            if outermost:
                inside.backward = False
                try:
                    switch(None)
                except Exception:
                    pass

    def before_step(optimizer, args, kwargs):
        try:
            switch(None)
            begin(stepping, "optimizer step")
        except Exception:
            pass

    def after_step(optimizer, args, kwargs):
        try:
            begin(stepping, None)
            switch("forward")
        except Exception:
            pass

    register_pre(before_step)
    register_post(after_step)
    autograd.backward = backward


class _AfterImport:
    """Runs `then(module)` right after the program imports module `name`
    (its own code runs first, as it would have); finds nothing itself."""

    def __init__(self, name, then):
        self.name = name
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        try:
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec(name)
            loader = getattr(spec, "loader", None)
            run = getattr(loader, "exec_module", None)
            if run is None:
                return None
            then = self.then

            def exec_module(module):
                run(module)
                try:
                    then(module)
                except Exception:
                    pass

            loader.exec_module = exec_module
            return spec
        except Exception:
            return None


class _WatchImports:
    """Starts the sampler when the program first imports jax or cupy; finds
    nothing itself (returns None: the real finders import the module)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def find_spec(self, name, path=None, target=None):
        if name in ("jax", "cupy"):
            try:
                self.sampler.start()
                sys.meta_path.remove(self)
            except Exception:
                pass
        return None


def _loaded_collector(ctypes, path):
    """The collector CUDA loaded in this process, or None: RTLD_NOLOAD finds
    only a copy already there, and never loads one."""
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


def _finish_before_os_exit(collector_path):
    """Wraps os._exit to complete this process's part of the trace first."""
    real_exit = os._exit
    started_as = os.getpid()

    def _exit(status):
        try:
            ctypes = sys.modules.get("ctypes")
            if ctypes is None and os.getpid() == started_as:
                # A fork child never imports it here: one that used CUDA
                # imported a framework, which imported ctypes, and one that
                # did not has nothing to finish.
                import ctypes
            lib = _loaded_collector(ctypes, collector_path) if ctypes else None
            if lib is not None:  # else CUDA never started in this process
                lib.gmem_prof_finish()
        except Exception:
            pass
        real_exit(status)

    _exit.__name__ = real_exit.__name__
    _exit.__qualname__ = real_exit.__qualname__
    _exit.__doc__ = real_exit.__doc__
    os._exit = _exit


def _install():
    collector = os.environ.get("CUDA_INJECTION64_PATH", "")
    if not collector or not os.path.isabs(collector):
        return
    _finish_before_os_exit(collector)
    if os.environ.get("GMEM_PROF_FRAMEWORKS", "1") == "0":
        return
    if "torch.optim.optimizer" in sys.modules:
        _mark_optimizer_steps(sys.modules["torch.optim.optimizer"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch.optim.optimizer", _mark_optimizer_steps))
    try:
        interval = max(1, int(os.environ.get("GMEM_PROF_POOL_MS", "50"))) / 1000.0
    except ValueError:
        interval = 0.05
    sampler = _Sampler(collector, interval)
    if "jax" in sys.modules or "cupy" in sys.modules:
        sampler.start()
    else:
        sys.meta_path.insert(0, _WatchImports(sampler))


try:
    _install()
except Exception:
    pass

try:
    _run_next_sitecustomize()
finally:
    del _run_next_sitecustomize
