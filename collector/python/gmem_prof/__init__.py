"""gmem-prof's calls for the program it profiles.

    import gmem_prof
    for batch in data:
        with gmem_prof.range("load"):   # a range, as NVTX's
            batch = batch.cuda()
        train(batch)
        gmem_prof.step()    # the end of one step (a training iteration)

Every call does nothing when the program is not recorded by
`gmem-prof record` (or before CUDA has started in this process), so the
calls can stay in the program. PyTorch programs need no call: the bootstrap
`record` puts on the path marks a step each time the first optimizer
steps, and their phases (forward, backward, optimizer step) as ranges.

Installed with pip, the module also reads traces:

    analysis = gmem_prof.analyze("trace.bin")
    analysis["devices"][0]["peak_bytes"]
"""

import contextlib
import os

__all__ = ["step", "range", "analyze", "load_ipython_extension"]

# `gmem_prof_step`'s sources (traces/FORMAT.md, the Step record).
OPTIMIZER = 1
PROGRAM = 2

_step_function = None


def _collector_path():
    """The collector CUDA would load ("" when none: a process started
    without it is never recorded, so its calls return at once). Read at
    each call until found: the pytest plugin sets it after this module is
    imported."""
    path = os.environ.get("CUDA_INJECTION64_PATH", "")
    return path if os.path.isabs(path) else ""


def _library():
    """The collector CUDA loaded in this process, or None before it did (and
    when not recorded): RTLD_NOLOAD finds that copy, and never loads one."""
    if not _collector_path():
        return None
    try:
        import ctypes

        return ctypes.CDLL(_collector_path(), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


def _collector_step():
    """The collector's `gmem_prof_step`, once CUDA has loaded the collector
    in this process; None before (and when not recorded)."""
    global _step_function
    if _step_function is not None:
        return _step_function
    import ctypes

    try:
        f = _library().gmem_prof_step
    except AttributeError:
        return None
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_uint8]
    _step_function = f
    return f


def step(_source=PROGRAM):
    """Marks the end of one step of the program (a training iteration):
    the report gives each step's peak and what it kept, by site. Returns
    the step's number (1, 2, ...), or 0 when nothing was recorded."""
    if not _collector_path():
        return 0
    try:
        f = _collector_step()
        return int(f(_source)) if f is not None else 0
    except Exception:
        return 0


_range_functions = None


def _collector_ranges():
    """The collector's `gmem_prof_range_begin` and `_end`; None when this
    process is not recorded."""
    global _range_functions
    if _range_functions is not None:
        return _range_functions
    import ctypes

    # Loaded here if CUDA has not loaded it yet: the collector does nothing
    # until CUDA starts it, and a range begun before then (the pytest test,
    # the notebook cell whose first torch call starts CUDA) waits for it.
    lib = _library()
    if lib is None and _collector_path():
        try:
            lib = ctypes.CDLL(_collector_path(), mode=os.RTLD_NOW)
        except OSError:
            return None
    try:
        begin, end = lib.gmem_prof_range_begin, lib.gmem_prof_range_end
    except AttributeError:
        return None
    begin.restype = ctypes.c_uint64
    begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    end.restype = None
    end.argtypes = [ctypes.c_uint64]
    _range_functions = (begin, end)
    return _range_functions


def _range_begin(name, domain=None):
    """Begins a range; returns its id (0: not recorded)."""
    if not _collector_path():
        return 0
    try:
        f = _collector_ranges()
        if f is None:
            return 0
        d = domain.encode() if domain else None
        return int(f[0](d, str(name).encode()))
    except Exception:
        return 0


def _range_end(id):
    """Ends the range `_range_begin` returned."""
    if not id:
        return
    try:
        f = _collector_ranges()
        if f is not None:
            f[1](id)
    except Exception:
        pass


@contextlib.contextmanager
def range(name, domain=None):
    """A range of the program's, as an NVTX range (recorded the same way,
    without NVTX): the report gives, per name, how high memory rose inside
    its instances and what each kept, by site.

        with gmem_prof.range("validation"):
            evaluate(model)
    """
    id = _range_begin(name, domain)
    try:
        yield
    finally:
        _range_end(id)


def _binary():
    """The gmem-prof binary: the one the pip package holds beside this
    module, else the one on PATH."""
    import shutil

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "gmem-prof")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("gmem-prof")
    if found is None:
        raise FileNotFoundError("no gmem-prof binary: pip install gmem-prof, or put gmem-prof on PATH")
    return found


def analyze(path, *options):
    """The analysis of a trace (or a folder of per-process trace files) as
    Python data: the JSON `gmem-prof export --format json` writes
    (docs/formats.md in the repository). `options` are more of export's
    options, as strings ("--step-range", "iteration")."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "analysis.json")
        done = subprocess.run(
            [_binary(), "export", "-q", "--format", "json", "-o", out, *options, os.fspath(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip() or f"gmem-prof export failed ({done.returncode})")
        with open(out) as f:
            return json.load(f)


def _attach(out):
    """Points CUDA's injection at the collector beside the gmem-prof binary
    (the pip package's) before this process starts CUDA, writing into a new
    folder under `out`. Returns (collector, parts folder, problem): problem
    says why nothing will be recorded (CUDA started already), or is None.
    Under `gmem-prof record` it returns record's collector and folder."""
    import tempfile

    if _collector_path() and os.environ.get("GMEM_PROF_DIR"):
        return _collector_path(), os.environ["GMEM_PROF_DIR"], None
    collector = os.path.join(os.path.dirname(_binary()), "libgmem_prof_collector.so")
    os.makedirs(out, exist_ok=True)
    parts = tempfile.mkdtemp(prefix="parts-", dir=out)
    problem = None
    try:
        with open("/proc/self/maps") as f:
            if "libcuda.so" in f.read():
                problem = ("CUDA was initialised in this process before gmem-prof could attach: "
                           "nothing is recorded; attach first (or run under `gmem-prof record`)")
    except OSError:
        pass
    os.environ["CUDA_INJECTION64_PATH"] = collector
    os.environ["GMEM_PROF_DIR"] = parts
    os.environ.setdefault("NVTX_INJECTION64_PATH", collector)
    return collector, parts, problem


def _flush():
    """Writes what the collector recorded so far into this process's trace
    file (`gmem_prof_flush`); False when nothing is recorded here."""
    try:
        return bool(_library().gmem_prof_flush())
    except AttributeError:
        return False


def _own_trace():
    """This process's trace file, as the collector names it."""
    return os.path.join(os.environ.get("GMEM_PROF_DIR", "."), f"gmem-prof-{os.getpid()}.bin")


def _range_figures(analysis, domain, name):
    """A range's figures in an analysis: what it took above where it began
    (`rise`) and the sites that held it at its highest (`rise_sites`), what
    it left live (`kept`) and the sites that kept most (`sites`), each a
    list of (label, bytes), the tensors' where the trace saw them, else
    CUDA's; and its first instance's span (`start`, `end`, ns); None when
    the analysis has no such range."""
    for p in analysis.get("ranges", []):
        for index, r in enumerate(p["ranges"]):
            if r["domain"] != domain or r["name"] != name:
                continue
            span = next((i for i in p["instances"] if i["range"] == index), {})
            if r.get("tensors"):
                view, m, table = "tensors", r["tensors"], "tensor_sites"
            else:
                view, m, table = "CUDA allocations", r["driver"], "sites"
            def labelled(rows):
                return [(analysis[table][k["site"]]["label"], k["bytes"]) for k in rows]
            return {"rise": m["rise_bytes"], "kept": m["kept_bytes"], "view": view,
                    "sites": labelled(m.get("kept_by_site", [])),
                    "rise_sites": labelled(m.get("rise_by_site", [])),
                    "start": span.get("start_ns", 0), "end": span.get("end_ns") or float("inf")}
    return None


def load_ipython_extension(ipython):
    """`%load_ext gmem_prof` (Jupyter, IPython): see gmem_prof.notebook."""
    from gmem_prof import notebook

    notebook.load(ipython)


def _size_words(n):
    """Bytes as people read them: "2.00 MiB", "512 B"."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
