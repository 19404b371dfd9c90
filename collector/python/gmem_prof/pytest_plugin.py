"""gmem-prof's pytest plugin (registered by the pip package).

    pytest --gmem-prof

records the session's GPU memory with gmem-prof: each test is a range
(domain "pytest", named by its node id), so the report gives each test's
rise (the most it took above what was live when it began) and what it left
live. Markers judge a test as it ends:

    @pytest.mark.limit_gpu_memory("2 GiB")   # its rise
    @pytest.mark.limit_gpu_leaks("0 B")      # what it left live
    @pytest.mark.limit_gpu_growth("1 MiB")   # kept per step, after its first

(tensors' figures where the trace sees a framework allocator from the
inside, else CUDA's); a failure names the sites that kept most, with their
Python lines. The trace (and a report, when a test failed) go to
--gmem-prof-dir (.gmem-prof). CUDA must start after pytest does: the
collector attaches as CUDA initialises in the process. Under `gmem-prof
record -- pytest --gmem-prof` the plugin uses record's collector.
"""

import os
import re
import subprocess

import pytest

import gmem_prof

DOMAIN = "pytest"
LIMITS = ("limit_gpu_memory", "limit_gpu_leaks", "limit_gpu_growth")
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


def pytest_addoption(parser):
    group = parser.getgroup("gmem-prof", "GPU memory (gmem-prof)")
    group.addoption("--gmem-prof", action="store_true",
                    help="record the session's GPU memory: each test's rise and what it left live; "
                         "the limit_gpu_memory, limit_gpu_leaks and limit_gpu_growth markers judge tests")
    group.addoption("--gmem-prof-dir", default=".gmem-prof", metavar="DIR",
                    help="where the session's trace and report go (default .gmem-prof)")


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_gpu_memory(size): fail the test when it takes more GPU "
                                       "memory than size above what was live when it began (--gmem-prof)")
    config.addinivalue_line("markers", "limit_gpu_leaks(size): fail the test when it leaves more than "
                                       "size of GPU memory live (--gmem-prof)")
    config.addinivalue_line("markers", "limit_gpu_growth(size): fail the test when its steps (optimizer "
                                       "steps, gmem_prof.step()) after its first keep more than size each "
                                       "on average (--gmem-prof)")
    if config.getoption("--gmem-prof"):
        config.pluginmanager.register(Session(config), "gmem-prof-session")


class Session:
    """One recorded pytest session."""

    def __init__(self, config):
        self.out = os.path.abspath(config.getoption("--gmem-prof-dir"))
        os.makedirs(self.out, exist_ok=True)
        self.binary = gmem_prof._binary()
        self.figures = {}
        self.trace = None
        self.report = None
        self.merge = not (gmem_prof._collector_path() and os.environ.get("GMEM_PROF_DIR"))
        _, self.parts, self.problem = gmem_prof._attach(self.out)

    def _analyze(self, path, flush=True):
        if flush and not gmem_prof._flush():
            return None
        try:
            return gmem_prof.analyze(path)
        except (OSError, RuntimeError):
            return None

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
                  for m in item.iter_markers() if m.name in LIMITS]
        if not limits:
            return
        analysis = self._analyze(gmem_prof._own_trace())
        test = gmem_prof._range_figures(analysis, DOMAIN, item.nodeid) if analysis else None
        if test is None:
            pytest.fail(f"gmem-prof could not judge {item.nodeid}: "
                        f"{self.problem or 'its GPU memory was not recorded (did it use CUDA?)'}",
                        pytrace=False)
        for name, limit in limits:
            sites, whose = test["sites"], "the sites that kept most:"
            if name == "limit_gpu_growth":
                took, sites = _growth(analysis, test)
                what = "kept per step"
            elif name == "limit_gpu_memory":
                took, what = test["rise"], "took"
                sites, whose = test["rise_sites"], "the sites that held most at its highest:"
            else:
                took, what = test["kept"], "left live"
            if took is None:
                pytest.fail(f"{item.nodeid} has {name} but fewer than 2 steps to judge (optimizer steps "
                            f"or gmem_prof.step())", pytrace=False)
            if took > limit:
                kept = [(label, b) for label, b in sites if b > 0][:5]
                if kept:
                    where = whose + "".join(
                        f"\n    {gmem_prof._size_words(b):>10}  {label}" for label, b in kept)
                else:
                    where = f"no site is named: its range in the report of {self.out} shows when"
                pytest.fail(f"{item.nodeid} {what} {gmem_prof._size_words(took)} of GPU memory ({test['view']}), over its "
                            f"limit of {gmem_prof._size_words(limit)} ({name}); {where}", pytrace=False)

    def pytest_sessionfinish(self, session):
        lib = gmem_prof._library()
        if lib is None:
            return
        if not self.merge:
            lib.gmem_prof_flush()
            analysis = self._analyze(gmem_prof._own_trace(), flush=False)
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
                    self.figures[r["name"]] = gmem_prof._range_figures(analysis, DOMAIN, r["name"])

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("gmem-prof: GPU memory per test")
        if self.problem:
            tr.write_line(f"gmem-prof: {self.problem}")
        most = sorted(self.figures.items(), key=lambda t: -t[1]["rise"])[:10]
        for name, f in most:
            tr.write_line(f"{gmem_prof._size_words(f['rise']):>10} taken, {gmem_prof._size_words(f['kept']):>10} left live ({f['view']})  {name}")
        if not most and not self.problem:
            tr.write_line("no test used GPU memory")
        if self.trace:
            tr.write_line(f"trace: {self.trace}" + (f"; report: {self.report}" if self.report else ""))



def _growth(analysis, test):
    """What the test's steps after its first kept each, on average, and the
    sites that kept it (label, bytes per step); (None, []) with fewer than
    two steps in the test."""
    tensors = test["view"] == "tensors"
    steps = [s for p in analysis.get("steps", []) for s in p["steps"]
             if test["start"] <= s["start_ns"] and s["end_ns"] <= test["end"]][1:]
    if not steps:
        return None, []
    per_site = {}
    for s in steps:
        rows = (s.get("tensors") or {}).get("kept_by_site", []) if tensors else s["kept_by_site"]
        for k in rows:
            per_site[k["site"]] = per_site.get(k["site"], 0) + k["bytes"]
    table = "tensor_sites" if tensors else "sites"
    sites = sorted(((analysis[table][i]["label"], b // len(steps)) for i, b in per_site.items()),
                   key=lambda x: -x[1])
    kept = sum(((s.get("tensors") or {}).get("kept_bytes", 0) if tensors else s["kept_bytes"])
               for s in steps)
    return kept // len(steps), sites
