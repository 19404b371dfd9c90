"""Runs cells in a real Jupyter kernel (ipykernel, through jupyter_client)
and prints, as JSON, each cell's outputs: [{"status", "stdout", "html",
"error"}], for the notebook magics' test (tests/e2e/notebook.rs).

    python3 run_in_kernel.py CELLS.json

The kernel inherits this process's environment (PYTHONPATH, PATH, the
fake driver's variables)."""

import json
import sys

from jupyter_client.manager import start_new_kernel

cells = json.load(open(sys.argv[1]))
km, kc = start_new_kernel(kernel_name="python3")
results = []
try:
    for code in cells:
        out = {"status": None, "stdout": "", "html": "", "error": ""}

        def collect(msg, out=out):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out["stdout"] += content["text"]
            elif kind in ("display_data", "execute_result"):
                out["html"] += content["data"].get("text/html", "")
            elif kind == "error":
                out["error"] += "\n".join(content["traceback"])

        reply = kc.execute_interactive(code, timeout=120, output_hook=collect)
        out["status"] = reply["content"]["status"]
        results.append(out)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps(results))
