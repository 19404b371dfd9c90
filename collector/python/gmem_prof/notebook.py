"""gmem-prof in Jupyter and IPython:

    %load_ext gmem_prof          # first, before the notebook starts CUDA

records the kernel's GPU memory from then on (`%gmem_prof_start DIR`
does the same, into DIR: .gmem-prof by default). A cell run with

    %%gmem_prof
    model = build(); loss = model(batch); loss.backward()

is a range of the domain "notebook" ("cell 1", "cell 2", …): after it
runs, its output shows what the cell took above what was live when it
began, what it left live and the lines that kept it, then the report of
the kernel so far (the same page `gmem-prof report` writes, in a frame:
its scripts work inside the output).
"""

import html
import os
import subprocess
import tempfile

import gmem_prof

DOMAIN = "notebook"


class _State:
    out = None
    problem = None
    cells = 0


_state = _State()


def load(ipython):
    """Registers the magics and starts recording (`%load_ext gmem_prof`)."""
    ipython.register_magic_function(start, "line", "gmem_prof_start")
    ipython.register_magic_function(cell, "cell", "gmem_prof")
    start("")


def start(line):
    """%gmem_prof_start [DIR]: record this kernel's GPU memory from here
    on, its files in DIR (default .gmem-prof). CUDA must not have started
    in the kernel yet."""
    if _state.out is not None:
        return
    _state.out = os.path.abspath(line.strip() or ".gmem-prof")
    _, parts, _state.problem = gmem_prof._attach(_state.out)
    if _state.problem:
        print(f"gmem-prof: {_state.problem}")
    else:
        print(f"gmem-prof: recording this kernel's GPU memory from its first CUDA call ({parts})")


def cell(line, body):
    """%%gmem_prof: runs the cell, then shows what it took and kept, by
    line, and the report of the kernel so far."""
    from IPython import get_ipython
    from IPython.display import HTML, display

    if _state.out is None:
        start("")
    _state.cells += 1
    name = f"cell {_state.cells}"
    id = gmem_prof._range_begin(name, DOMAIN)
    try:
        get_ipython().run_cell(body)
    finally:
        gmem_prof._range_end(id)
    if not gmem_prof._flush():
        print(f"gmem-prof: {_state.problem or 'nothing recorded yet: the kernel has not started CUDA'}")
        return
    trace = gmem_prof._own_trace()
    try:
        figures = gmem_prof._range_figures(gmem_prof.analyze(trace), DOMAIN, name)
    except (OSError, RuntimeError) as e:
        print(f"gmem-prof: {e}")
        return
    display(HTML(_figures_html(name, figures) + _report_frame(trace)))


def _figures_html(name, f):
    if f is None:
        return f"<p>gmem-prof: {html.escape(name)} made no GPU memory change the trace saw.</p>"
    rows = "".join(
        f"<tr><td style='text-align:right'>{gmem_prof._size_words(b)}</td><td><code>{html.escape(label)}</code></td></tr>"
        for label, b in f["sites"][:10]
    )
    return (
        f"<p><b>gmem-prof, {html.escape(name)}</b>: took {gmem_prof._size_words(f['rise'])} above what was live "
        f"when it began, left {gmem_prof._size_words(f['kept'])} live ({html.escape(f['view'])}).</p>"
        + (f"<table><tr><th>kept</th><th>where</th></tr>{rows}</table>" if rows else "")
    )


def _report_frame(trace):
    """The report of the trace so far, as a frame holding the page."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [gmem_prof._binary(), "report", "-q", trace, "-o", folder],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        pages = [p for p in os.listdir(folder) if p.endswith(".html")]
        if done.returncode != 0 or not pages:
            return f"<p>gmem-prof: no report: {html.escape(done.stderr.strip())}</p>"
        with open(os.path.join(folder, pages[0]), encoding="utf-8") as f:
            page = f.read()
    return (
        "<iframe style='width:100%;height:640px;border:1px solid #ccc' "
        f"srcdoc=\"{html.escape(page, quote=True)}\"></iframe>"
    )
