"""gmem-prof's pytest plugin (registered by the pip package).

    pytest --gmem-prof

records the session's GPU memory with gmem-prof: each test is a range
(domain "pytest", named by its node id), so the report gives each test's
rise (the most it took above what was live when it began) and what it left
live. Markers judge a test as it ends:

    @pytest.mark.limit_gpu_memory("2 GiB")   # its rise
    @pytest.mark.limit_gpu_leaks("0 B")      # what it left live

(tensors' figures where the trace sees a framework allocator from the
inside, else CUDA's); a failure names the sites that kept most, with their
Python lines. The trace (and a report, when a test failed) go to
--gmem-prof-dir (.gmem-prof). CUDA must start after pytest does: the
collector attaches as CUDA initialises in the process. Under `gmem-prof
record -- pytest --gmem-prof` the plugin uses record's collector.
"""

import ctypes
import json
import os
import re
import subprocess
import tempfile

import pytest

import gmem_prof

DOMAIN = "pytest"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def parse_size(text):
    """Bytes of "2 GiB", "512MB", "0 B" or a number."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise pytest.UsageError(f"gmem-prof: {text!r} is not a size (as in '2 GiB', '512 MB', '0 B')")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def words(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def pytest_addoption(parser):
    group = parser.getgroup("gmem-prof", "GPU memory (gmem-prof)")
    group.addoption("--gmem-prof", action="store_true",
                    help="record the session's GPU memory: each test's rise and what it left live; "
                         "the limit_gpu_memory and limit_gpu_leaks markers judge tests")
    group.addoption("--gmem-prof-dir", default=".gmem-prof", metavar="DIR",
                    help="where the session's trace and report go (default .gmem-prof)")


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_gpu_memory(size): fail the test when it takes more GPU "
                                       "memory than size above what was live when it began (--gmem-prof)")
    config.addinivalue_line("markers", "limit_gpu_leaks(size): fail the test when it leaves more than "
                                       "size of GPU memory live (--gmem-prof)")
    if config.getoption("--gmem-prof"):
        config.pluginmanager.register(Session(config), "gmem-prof-session")


def _cuda_loaded():
    """Whether the CUDA driver is already in this process."""
    try:
        with open("/proc/self/maps") as f:
            return "libcuda.so" in f.read()
    except OSError:
        return False


class Session:
    """One recorded pytest session."""

    def __init__(self, config):
        self.out = os.path.abspath(config.getoption("--gmem-prof-dir"))
        os.makedirs(self.out, exist_ok=True)
        self.binary = gmem_prof._binary()
        self.problem = None
        self.figures = {}
        self.trace = None
        self.report = None
        under_record = os.environ.get("CUDA_INJECTION64_PATH") and os.environ.get("GMEM_PROF_DIR")
        if under_record:
            self.collector = os.environ["CUDA_INJECTION64_PATH"]
            self.parts = os.environ["GMEM_PROF_DIR"]
            self.merge = False
            return
        self.collector = os.path.join(os.path.dirname(self.binary), "libgmem_prof_collector.so")
        self.parts = tempfile.mkdtemp(prefix="parts-", dir=self.out)
        self.merge = True
        if _cuda_loaded():
            self.problem = ("CUDA was initialised before gmem-prof could attach (a conftest or plugin "
                            "started it): nothing is recorded; run `gmem-prof record -- pytest "
                            "--gmem-prof` instead")
        os.environ["CUDA_INJECTION64_PATH"] = self.collector
        os.environ["GMEM_PROF_DIR"] = self.parts
        os.environ.setdefault("NVTX_INJECTION64_PATH", self.collector)

    def _library(self):
        try:
            return ctypes.CDLL(self.collector, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            return None

    def _analyze(self, path, flush=True):
        lib = self._library()
        if lib is None:
            return None
        if flush:
            lib.gmem_prof_flush()
        try:
            return gmem_prof.analyze(path)
        except (OSError, RuntimeError):
            return None

    def _own_part(self):
        return os.path.join(self.parts, f"gmem-prof-{os.getpid()}.bin")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        id = gmem_prof._range_begin(item.nodeid, DOMAIN)
        try:
            result = yield
        finally:
            gmem_prof._range_end(id)
        self._judge(item)
        return result

    def _judge(self, item):
        """Fails `item` when it went over a limit its markers set."""
        limits = [(m.name, parse_size(m.args[0] if m.args else m.kwargs.get("size", 0)))
                  for m in item.iter_markers() if m.name in ("limit_gpu_memory", "limit_gpu_leaks")]
        if not limits:
            return
        analysis = self._analyze(self._own_part())
        test = _test_figures(analysis, item.nodeid) if analysis else None
        if test is None:
            pytest.fail(f"gmem-prof could not judge {item.nodeid}: "
                        f"{self.problem or 'its GPU memory was not recorded (did it use CUDA?)'}",
                        pytrace=False)
        for name, limit in limits:
            took = test["rise"] if name == "limit_gpu_memory" else test["kept"]
            if took > limit:
                what = "took" if name == "limit_gpu_memory" else "left live"
                kept = [(label, b) for label, b in test["sites"] if b > 0][:5]
                if kept:
                    where = "the sites that kept most:" + "".join(
                        f"\n    {words(b):>10}  {label}" for label, b in kept)
                else:
                    where = (f"it freed it all before it ended: its range in the report of "
                             f"{self.out} shows when")
                pytest.fail(f"{item.nodeid} {what} {words(took)} of GPU memory ({test['view']}), over its "
                            f"limit of {words(limit)} ({name}); {where}", pytrace=False)

    def pytest_sessionfinish(self, session):
        lib = self._library()
        if lib is None:
            return
        if not self.merge:
            lib.gmem_prof_flush()
            analysis = self._analyze(self._own_part(), flush=False)
        else:
            lib.gmem_prof_finish()
            self.trace = os.path.join(self.out, "pytest.bin")
            done = subprocess.run([self.binary, "symbolize", self.parts, "-o", self.trace, "--force"],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                self.problem = f"the trace could not be written: {done.stderr.strip()}"
                return
            analysis = self._analyze(self.trace, flush=False)
            if session.testsfailed:
                self.report = os.path.join(self.out, "report")
                subprocess.run([self.binary, "report", "-q", self.trace, "-o", self.report],
                               capture_output=True)
        for p in (analysis or {}).get("ranges", []):
            for r in p["ranges"]:
                if r["domain"] == DOMAIN:
                    self.figures[r["name"]] = _figures(analysis, r)

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("gmem-prof: GPU memory per test")
        if self.problem:
            tr.write_line(f"gmem-prof: {self.problem}")
        most = sorted(self.figures.items(), key=lambda t: -t[1]["rise"])[:10]
        for name, f in most:
            tr.write_line(f"{words(f['rise']):>10} taken, {words(f['kept']):>10} left live ({f['view']})  {name}")
        if not most and not self.problem:
            tr.write_line("no test used GPU memory")
        if self.trace:
            tr.write_line(f"trace: {self.trace}" + (f"; report: {self.report}" if self.report else ""))


def _figures(analysis, r):
    """A test's figures from its range: the tensors' where seen, else CUDA's."""
    view, m, table = ("tensors", r["tensors"], "tensor_sites") if r.get("tensors") else \
        ("CUDA allocations", r["driver"], "sites")
    sites = [(analysis[table][k["site"]]["label"], k["bytes"]) for k in m.get("kept_by_site", [])]
    return {"rise": m["rise_bytes"], "kept": m["kept_bytes"], "view": view, "sites": sites}


def _test_figures(analysis, nodeid):
    for p in analysis.get("ranges", []):
        for r in p["ranges"]:
            if r["domain"] == DOMAIN and r["name"] == nodeid:
                return _figures(analysis, r)
    return None
