#!/usr/bin/env python3
"""Extracts, from each PyTorch release on the registry, what the collector's
hook into its caching allocator relies on (collector/src/torch/allocator.rs):

- the names in libc10_cuda.so's symbol table under
  `c10::cuda::CUDACachingAllocator` (the hook finds the allocator object,
  its vtable and its methods by name): collector/layouts/torch/VERSION.symbols;
- the layout of `TraceEntry` as the release's own headers declare it (the
  C++ compiler's offsetof: action, device, address, stream, size, the
  memory pool's ids) and the values of its `Action`s:
  collector/layouts/torch.json.

A unit test (torch/allocator.rs) runs the hook's own symbol matching over
every release's names and holds the offsets it reads to the JSON; the
table of docs/compatibility.md's PyTorch section is written from the same
JSON (`--check` proves it offline, as extract.py does for CUPTI).

usage: collector/layouts/torch.py [CACHE_DIR]     (needs pip, g++, nm; downloads
                                                   each wheel, keeps a few MB of it)
       collector/layouts/torch.py --check
"""
import json
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from extract import HOST_DEFINES, wheel_headers  # noqa: E402

# The newest patch of every minor release from 2.4 on.
VERSIONS = ["2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0",
            "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
# Runtime headers for c10/cuda's includes (the layouts read do not depend
# on the CUDA version).
CUDA_RUNTIME = ("nvidia-cuda-runtime-cu12", "12.9.79")
PREFIXES = ("_ZN3c104cuda20CUDACachingAllocator", "_ZTVN3c104cuda20CUDACachingAllocator")
ACTIONS = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC", "SEGMENT_FREE",
           "SEGMENT_MAP", "SEGMENT_UNMAP", "SNAPSHOT", "OOM"]
VERIFIED_ON_GPU = {"2.11.0": "verified on the GPU (H200): allocated, reserved, snapshots and "
                             "OOMs equal to its own `memory_stats` and `_snapshot`"}
TORCH_JSON = os.path.join(HERE, "torch.json")
SYMBOLS_DIR = os.path.join(HERE, "torch")
COMPATIBILITY = os.path.join(ROOT, "docs", "compatibility.md")

PROGRAM = r"""
#include <cstdio>
#include <cstddef>
#if NEW
#include <c10/core/CachingDeviceAllocator.h>
using TE = c10::CachingDeviceAllocator::TraceEntry;
#else
#include <c10/cuda/CUDACachingAllocator.h>
using TE = c10::cuda::CUDACachingAllocator::TraceEntry;
#endif
int main() {
  printf("action %zu\ndevice %zu\ndevice_bytes %zu\naddress %zu\nstream %zu\nsize %zu\n",
         offsetof(TE, action_), offsetof(TE, device_), sizeof(((TE*)0)->device_),
         offsetof(TE, addr_), offsetof(TE, stream_), offsetof(TE, size_));
#if MEMPOOL
  printf("mempool %zu\nmempool_bytes %zu\n", offsetof(TE, mempool_), sizeof(((TE*)0)->mempool_));
#endif
%ACTIONS%
}
"""


def torch_files(cache, version):
    """libc10_cuda.so and the headers of a torch wheel, unpacked."""
    dest = os.path.join(cache, version)
    marker = os.path.join(dest, ".done")
    if not os.path.exists(marker):
        wheels = os.path.join(cache, "w")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        f"torch=={version}", "-d", wheels], check=True)
        whl = next(os.path.join(wheels, f) for f in sorted(os.listdir(wheels))
                   if f.startswith(f"torch-{version}-"))
        with zipfile.ZipFile(whl) as z:
            for m in z.namelist():
                if (m.endswith("lib/libc10_cuda.so") or m.startswith("torch/include/c10/")
                        or m.startswith("torch/include/torch/headeronly/")):
                    z.extract(m, dest)
        os.remove(whl)
        open(marker, "w").close()
    return (os.path.join(dest, "torch", "lib", "libc10_cuda.so"),
            os.path.join(dest, "torch", "include"))


def symbols(library):
    out = subprocess.run(["nm", library], check=True, capture_output=True, text=True).stdout
    names = sorted({l.split()[-1] for l in out.splitlines()
                    if l.split() and l.split()[-1].startswith(PREFIXES)})
    return names


def trace_entry(include, cuda_include):
    new = os.path.exists(os.path.join(include, "c10/core/CachingDeviceAllocator.h")) and \
        "struct TraceEntry" in open(os.path.join(include, "c10/core/CachingDeviceAllocator.h")).read()
    actions = "\n".join(f'  printf("{a} %d\\n", (int)TE::{a});' for a in ACTIONS)
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "crt"))
        open(os.path.join(d, "crt", "host_defines.h"), "w").write(HOST_DEFINES)
        # cuda_runtime.h's check of the host compiler (nvcc's), which has
        # nothing to check here.
        open(os.path.join(d, "crt", "host_config.h"), "w").write("")
        src, exe = os.path.join(d, "t.cpp"), os.path.join(d, "t")
        open(src, "w").write(PROGRAM.replace("%ACTIONS%", actions))
        # With the memory pool's ids where the release's TraceEntry has
        # them (2.11 and later), else without.
        for mempool in (1, 0):
            built = subprocess.run(["g++", "-std=c++17", "-w", f"-DNEW={int(new)}",
                                    f"-DMEMPOOL={mempool}", "-I", include, "-I", cuda_include,
                                    "-I", d, src, "-o", exe], capture_output=True)
            if built.returncode == 0:
                break
        else:
            raise SystemExit(built.stderr.decode())
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    values = {k: int(v) for k, v in (l.split() for l in out.splitlines())}
    return {
        "namespace": "c10::CachingDeviceAllocator" if new
        else "c10::cuda::CUDACachingAllocator",
        "offsets": {k: values[k] for k in ["action", "device", "device_bytes", "address",
                                           "stream", "size", "mempool", "mempool_bytes"]
                    if k in values},
        "actions": {a: values[a] for a in ACTIONS},
    }


def rows(entries):
    lines = ["| torch | the hook's symbols | `TraceEntry` read | status |",
             "| --- | --- | --- | --- |"]
    for e in entries:
        o = e["trace_entry"]["offsets"]
        layout = (f"action {o['action']}, device {o['device']}, address {o['address']}, "
                  f"stream {o['stream']}, size {o['size']}"
                  + (f", pool ids {o['mempool']}" if "mempool" in o else ""))
        status = VERIFIED_ON_GPU.get(e["torch"], "checked offline")
        lines.append(f"| {e['torch']} | allocator, vtable, trace tracker, OOM observer "
                     f"(of {len(e['symbols'])} names) | {layout} | {status} |")
    return "\n".join(lines)


def compatibility_text(entries):
    text = open(COMPATIBILITY).read()
    start, end = "<!-- torch table: torch.py -->", "<!-- end of torch table -->"
    a, b = text.index(start) + len(start), text.index(end)
    return text[:a] + "\n" + rows(entries) + "\n" + text[b:]


def load():
    entries = json.load(open(TORCH_JSON))
    for e in entries:
        e["symbols"] = open(os.path.join(SYMBOLS_DIR, f"{e['torch']}.symbols")).read().split()
    return entries


def check():
    if open(COMPATIBILITY).read() != compatibility_text(load()):
        raise SystemExit("docs/compatibility.md's PyTorch table is not what "
                         "collector/layouts/torch.json gives (run collector/layouts/torch.py)")


def main():
    if sys.argv[1:2] == ["--check"]:
        check()
        return
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "torch-extracts")
    os.makedirs(cache, exist_ok=True)
    cuda = wheel_headers(os.path.join(ROOT, "target", "cupti-headers"), *CUDA_RUNTIME)
    os.makedirs(SYMBOLS_DIR, exist_ok=True)
    entries = []
    for v in VERSIONS:
        library, include = torch_files(cache, v)
        names = symbols(library)
        with open(os.path.join(SYMBOLS_DIR, f"{v}.symbols"), "w") as f:
            f.write("\n".join(names) + "\n")
        entry = {"torch": v, "trace_entry": trace_entry(include, cuda)}
        entries.append(entry)
        print(f"{v}: {len(names)} names, {entry['trace_entry']}", file=sys.stderr)
    with open(TORCH_JSON, "w") as f:
        json.dump(entries, f, indent=1, sort_keys=True)
        f.write("\n")
    text = compatibility_text(load())
    with open(COMPATIBILITY, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
