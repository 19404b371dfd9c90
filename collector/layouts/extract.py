#!/usr/bin/env python3
"""Extracts, from each CUPTI release's own headers, the layout of every
record and parameter the collector reads, and writes:

- collector/layouts/cupti.json: per CUPTI version, its API version, which
  record version each activity kind emits (the newest its cupti_activity.h
  declares) with its size and the offsets of the fields we read, and the
  callback structures' offsets;
- collector/src/cuda/cupti_layouts.rs: the same as Rust constants, which the
  collector selects by the API version CUPTI reports.

The headers come from the registry's wheels (`nvidia-cuda-cupti-cu12`,
`nvidia-cuda-cupti`, and `cuda.h` from `nvidia-cuda-runtime(-cu12)`), the
offsets from the C compiler (offsetof/sizeof on the real declarations).
It also writes the CUPTI table of docs/compatibility.md. Run it when a CUPTI
release appears (add it to VERSIONS); CI runs `--check`, which proves the
Rust table and the documented one are what the committed JSON gives,
without downloading anything (tests/e2e/docs.rs), and a unit test holds the
collector's table to the JSON (collector/src/cuda/layouts.rs).

usage: collector/layouts/extract.py [CACHE_DIR]   (needs pip and gcc)
       collector/layouts/extract.py --check       (offline: the Rust table and
                                                   the documented one are the JSON's)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (wheel, version): every CUDA 12 and 13 release of CUPTI on the registry
# (12.7 was never published there).
VERSIONS = [
    ("nvidia-cuda-cupti-cu12", v)
    for v in ["12.0.146", "12.1.105", "12.2.142", "12.3.101", "12.4.127", "12.5.82",
              "12.6.80", "12.8.90", "12.9.79"]
] + [
    ("nvidia-cuda-cupti", v)
    for v in ["13.0.85", "13.1.115", "13.2.86", "13.3.75", "13.4.92", "13.5.25"]
]
# cuda.h for each major: the newest, which declares every type an older
# CUPTI of that major names (the record structs use its plain types only).
CUDA_H = {12: ("nvidia-cuda-runtime-cu12", "12.9.79"), 13: ("nvidia-cuda-runtime", "13.5.37")}

# Activity kinds: (our name, the struct family, the fields we read).
RECORDS = [
    ("memory", "CUpti_ActivityMemory", [
        "timestamp", "memoryOperationType", "memoryKind", "address", "bytes", "deviceId",
        "contextId", "streamId", "correlationId", "PC", "isAsync",
        "memoryPoolConfig.memoryPoolType", "memoryPoolConfig.address",
        "memoryPoolConfig.releaseThreshold", "memoryPoolConfig.pool.size",
        "memoryPoolConfig.utilizedSize",
    ]),
    ("pool", "CUpti_ActivityMemoryPool", [
        "timestamp", "memoryPoolOperationType", "memoryPoolType", "address", "size",
        "releaseThreshold", "minBytesToKeep", "utilizedSize", "deviceId", "correlationId",
    ]),
    ("kernel", "CUpti_ActivityKernel", [
        "name", "start", "end", "deviceId", "contextId", "streamId", "correlationId",
        "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory",
        "dynamicSharedMemory", "registersPerThread",
    ]),
    ("device", "CUpti_ActivityDevice", [
        "id", "name", "globalMemorySize", "uuid", "computeCapabilityMajor",
        "computeCapabilityMinor", "numMultiprocessors",
    ]),
]
# The memory kind's record: version 2 and later (version 1 is another kind).
FIRST_VERSION = {"memory": 2}

# Structures whose layout must be the same in every version (the collector
# reads them with one layout): the callback's data and the parameters of
# every driver call it reads.
FIXED = {
    "CUpti_CallbackData": ["callbackSite", "functionName", "functionParams",
                           "functionReturnValue", "symbolName", "context", "contextUid",
                           "correlationData", "correlationId"],
    "cuMemAlloc_v2_params": ["dptr", "bytesize"],
    "cuMemAllocPitch_v2_params": ["dptr", "pPitch", "WidthInBytes", "Height",
                                  "ElementSizeBytes"],
    "cuMemAllocManaged_params": ["dptr", "bytesize", "flags"],
    "cuMemAllocHost_v2_params": ["pp", "bytesize"],
    "cuMemHostAlloc_params": ["pp", "bytesize", "Flags"],
    "cuMemAllocAsync_params": ["dptr", "bytesize", "hStream"],
    "cuMemAllocFromPoolAsync_params": ["dptr", "bytesize", "pool", "hStream"],
    "cuMemFree_v2_params": ["dptr"],
    "cuMemFreeHost_params": ["p"],
    "cuMemFreeAsync_params": ["dptr", "hStream"],
    "cuMemCreate_params": ["handle", "size", "prop", "flags"],
    "cuMemMap_params": ["ptr", "size", "offset", "handle", "flags"],
    "cuMemUnmap_params": ["ptr", "size"],
    "cuMemRelease_params": ["handle"],
    "cuMemAddressReserve_params": ["ptr", "size", "alignment", "addr", "flags"],
    "cuMemAddressFree_params": ["ptr", "size"],
    "cuLaunchKernel_params": ["f", "gridDimX", "gridDimY", "gridDimZ", "blockDimX",
                              "blockDimY", "blockDimZ", "sharedMemBytes", "hStream",
                              "kernelParams", "extra"],
}

# Driver callback ids the collector enables (cupti_driver_cbid.h): the same
# number in every version.
CBIDS = ["cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocHost_v2",
         "cuMemHostAlloc", "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemFree_v2",
         "cuMemFreeHost", "cuMemFreeAsync", "cuMemCreate", "cuMemMap", "cuMemUnmap",
         "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree", "cuArrayCreate_v2",
         "cuArray3DCreate_v2", "cuArrayDestroy", "cuLaunchKernel", "cuLaunchKernelEx",
         "cuLaunchCooperativeKernel", "cuMemGetInfo_v2", "cuIpcOpenMemHandle_v2",
         "cuIpcCloseMemHandle", "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolTrimTo",
         "cuGraphAddMemAllocNode", "cuGraphAddMemFreeNode", "cuMemHostRegister_v2",
         "cuMemHostUnregister"]


def wheel_headers(cache, package, version):
    """The include/ folder of a wheel, unpacked under cache."""
    dest = os.path.join(cache, f"{package}-{version}")
    marker = os.path.join(dest, ".done")
    if not os.path.exists(marker):
        wheels = os.path.join(cache, "wheels")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        f"{package}=={version}", "-d", wheels], check=True)
        name = package.replace("-", "_")
        whl = next(os.path.join(wheels, f) for f in sorted(os.listdir(wheels))
                   if f.startswith(f"{name}-{version}-"))
        with zipfile.ZipFile(whl) as z:
            for m in z.namelist():
                if "/include/" in m:
                    z.extract(m, dest)
        open(marker, "w").close()
    for dirpath, _, files in os.walk(dest):
        if "cupti_activity.h" in files or "cuda.h" in files:
            return dirpath
    raise SystemExit(f"no headers in {package} {version}")


def emitted(header_text, family, first):
    """The newest version of a record family the header declares."""
    found = [int(n or "1") for n in re.findall(r"\}\s*" + family + r"(\d*)\s*;", header_text)]
    found = [n for n in found if n >= first]
    return max(found) if found else None


def struct_name(family, n):
    return family if n == 1 else f"{family}{n}"


# The runtime's headers that cupti_callbacks.h reaches (builtin_types.h)
# include crt/host_defines.h, which ships with nvcc, not with the runtime's
# wheel: what it defines for a host compiler, none of which changes a
# layout we read.
HOST_DEFINES = """
#define __no_return__ __attribute__((noreturn))
#define __noinline__ __attribute__((noinline))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define __annotate__(a) __attribute__((a))
#define __location__(a) __annotate__(a)
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define __specialization_static
#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __builtin_align__(a) __align__(a)
#define __grid_constant__
#define __cudart_builtin__
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __nv_pure__
#define __CUDA_ALIGN__(n) __align__(n)
"""


def measure(include, cuda_include, queries):
    """offsetof/sizeof by the C compiler: queries is a list of
    (key, C expression); returns {key: value}."""
    # The internal API version exposes the _v1 types generated_cuda_meta.h
    # names.
    lines = ["#define __CUDA_API_VERSION_INTERNAL 1", "#include <stdio.h>",
             "#include <stddef.h>", "#include <cuda.h>",
             "#include <cupti_activity.h>", "#include <cupti_callbacks.h>",
             "#include <cupti_driver_cbid.h>", "#include <generated_cuda_meta.h>",
             "int main(void) {"]
    for key, expr in queries:
        lines.append(f'  printf("%s %zu\\n", "{key}", (size_t)({expr}));')
    lines.append("  return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "m.c"), os.path.join(d, "m")
        open(src, "w").write("\n".join(lines))
        os.makedirs(os.path.join(d, "crt"))
        open(os.path.join(d, "crt", "host_defines.h"), "w").write(HOST_DEFINES)
        subprocess.run(["gcc", "-w", "-I", include, "-I", cuda_include, "-I", d, src,
                        "-o", exe], check=True, stderr=None if os.environ.get("VERBOSE") else subprocess.DEVNULL)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (l.split() for l in out.splitlines())}


def optional_field(include, cuda_include, struct, field):
    """offsetof(struct, field), or None where the header does not have it."""
    try:
        return measure(include, cuda_include, [("x", f"offsetof({struct}, {field})")])["x"]
    except subprocess.CalledProcessError:
        return None


def extract(cache):
    cuda = {major: wheel_headers(cache, *w) for major, w in CUDA_H.items()}
    out = []
    for package, version in VERSIONS:
        inc = wheel_headers(cache, package, version)
        major = int(version.split(".")[0])
        text = open(os.path.join(inc, "cupti_activity.h")).read()
        api = int(re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)",
                            open(os.path.join(inc, "cupti_version.h")).read()).group(1))
        entry = {"cupti": version, "api_version": api, "records": {}, "fixed": {}}
        queries = []
        for name, family, fields in RECORDS:
            n = emitted(text, family, FIRST_VERSION.get(name, 1))
            struct = struct_name(family, n)
            entry["records"][name] = {"struct": struct}
            queries.append((f"{name}.:size", f"sizeof({struct})"))
            queries += [(f"{name}.{f}", f"offsetof({struct}, {f})") for f in fields]
        for struct, fields in FIXED.items():
            queries.append((f"{struct}.:size", f"sizeof({struct})"))
            queries += [(f"{struct}.{f}", f"offsetof({struct}, {f})") for f in fields]
        queries += [(f"cbid.{c}", f"CUPTI_DRIVER_TRACE_CBID_{c}") for c in CBIDS]
        m = measure(inc, cuda[major], queries)
        for name, _, fields in RECORDS:
            r = entry["records"][name]
            r["size"] = m[f"{name}.:size"]
            r["fields"] = {f: m[f"{name}.{f}"] for f in fields}
        for struct, fields in FIXED.items():
            entry["fixed"][struct] = {f: m[f"{struct}.{f}"] for f in fields}
            entry["fixed"][struct][":size"] = m[f"{struct}.:size"]
        entry["cbids"] = {c: m[f"cbid.{c}"] for c in CBIDS}
        # cuptiSubscribe_v2 (13.0 and later) and the field that asks to
        # share CUPTI with other subscribers (where the header has it).
        sub = "cuptiSubscribe_v2" in open(os.path.join(inc, "cupti_callbacks.h")).read()
        entry["subscribe_v2"] = sub
        entry["allow_multiple_subscribers"] = (
            optional_field(inc, cuda[major], "CUpti_SubscriberParams", "allowMultipleSubscribers")
            if sub else None)
        if sub:
            entry["subscriber_params"] = measure(inc, cuda[major], [
                ("size", "sizeof(CUpti_SubscriberParams)"),
                ("structSize", "offsetof(CUpti_SubscriberParams, structSize)"),
                ("subscriberName", "offsetof(CUpti_SubscriberParams, subscriberName)"),
                ("oldSubscriberName", "offsetof(CUpti_SubscriberParams, oldSubscriberName)"),
                ("oldSubscriberSize", "offsetof(CUpti_SubscriberParams, oldSubscriberSize)"),
            ])
        out.append(entry)
        print(f"{version}: API {api}, " + ", ".join(
            f"{k} {v['struct']} ({v['size']} B)" for k, v in entry["records"].items()),
            file=sys.stderr)
    return out


def check_fixed(entries):
    """The structures read with one layout must have it in every version."""
    first = entries[0]
    for e in entries[1:]:
        for struct, layout in first["fixed"].items():
            if e["fixed"][struct] != layout:
                raise SystemExit(f"{struct} differs in CUPTI {e['cupti']}: the collector "
                                 f"reads it with one layout")
        if e["cbids"] != first["cbids"]:
            raise SystemExit(f"driver callback ids differ in CUPTI {e['cupti']}")


def rust(entries):
    lines = ["// Generated by collector/layouts/extract.py from each CUPTI release's",
             "// own headers (collector/layouts/cupti.json): do not edit.", "",
             "use crate::cuda::layouts::{CuptiLayout, DeviceLayout, KernelLayout, MemoryLayout, "
             "PoolLayout, SubscribeLayout};", "",
             "/// Every CUPTI release known, oldest first.",
             "pub const KNOWN: &[CuptiLayout] = &["]
    camel = {"memory": "MemoryLayout", "pool": "PoolLayout", "kernel": "KernelLayout",
             "device": "DeviceLayout"}

    def ident(f):
        f = f.replace("memoryPoolConfig.pool.size", "pool_size").replace("memoryPoolConfig.",
                                                                          "pool_")
        f = {"PC": "pc"}.get(f, f)
        return re.sub(r"(?<!^)(?=[A-Z])", "_", f).lower().replace("__", "_")

    for e in entries:
        lines.append("    CuptiLayout {")
        lines.append(f'        cupti: "{e["cupti"]}",')
        lines.append(f"        api_version: {e['api_version']},")
        for name, _, fields in RECORDS:
            r = e["records"][name]
            lines.append(f"        {name}: {camel[name]} {{")
            lines.append(f'            record: "{r["struct"]}",')
            lines.append(f"            size: {r['size']},")
            for f in fields:
                # The pool's `size` field, apart from the record's size.
                name_ = "size_field" if (name, f) == ("pool", "size") else ident(f)
                lines.append(f"            {name_}: {r['fields'][f]},")
            lines.append("        },")
        if e["subscribe_v2"]:
            p = e["subscriber_params"]
            allow = e["allow_multiple_subscribers"]
            lines.append("        subscribe_v2: Some(SubscribeLayout {")
            lines.append(f"            size: {p['size']},")
            lines.append(f"            subscriber_name: {p['subscriberName']},")
            lines.append(f"            old_subscriber_name: {p['oldSubscriberName']},")
            lines.append(f"            old_subscriber_size: {p['oldSubscriberSize']},")
            lines.append(f"            allow_multiple_subscribers: "
                         f"{'None' if allow is None else f'Some({allow})'},")
            lines.append("        }),")
        else:
            lines.append("        subscribe_v2: None,")
        lines.append("    },")
    lines.append("];")
    return "\n".join(lines) + "\n"


# Releases run on the GPU machine, with what (docs/compatibility.md), by
# release: only those run are called verified, though releases of one API
# version share their layouts. `tests/gpu/run.sh cupti` on 2026-12-05.
_RUN = ("verified on the GPU (H100, driver 580: kinds, oom, threads, children as "
        "their programs say; leaks equal compute-sanitizer's")
VERIFIED_ON_GPU = {
    "12.0.146": _RUN + ")",
    "12.4.127": _RUN + ")",
    "12.8.90": _RUN + ")",
    "12.9.79": _RUN + ")",
    "13.0.85": "verified on the GPU (torch 2.11's CUPTI 13.0, driver 580, H200 and H100)",
    "13.1.115": _RUN + ")",
    "13.4.92": _RUN + "; it would not share CUPTI on this driver: held alone)",
    "13.5.25": _RUN + "; it would not share CUPTI on this driver: held alone)",
}


def compatibility_rows(entries):
    """The CUPTI table of docs/compatibility.md, one row per release."""
    rows = ["| CUPTI | API version | records read (memory, kernel, device, pool) | "
            "shares CUPTI with another client | status |",
            "| --- | --- | --- | --- | --- |"]
    for e in entries:
        r = e["records"]
        records = ", ".join(r[k]["struct"].replace("CUpti_Activity", "")
                            for k in ["memory", "kernel", "device", "pool"])
        share = ("yes, where the other allows it (cuptiSubscribe_v2)"
                 if e["allow_multiple_subscribers"] is not None
                 else "no (names the client holding it)" if e["subscribe_v2"] else "no")
        status = VERIFIED_ON_GPU.get(e["cupti"], "checked offline")
        rows.append(f"| {e['cupti']} | {e['api_version']} | {records} | {share} | {status} |")
    return "\n".join(rows)


COMPATIBILITY = os.path.join(ROOT, "docs", "compatibility.md")
LAYOUTS_RS = os.path.join(ROOT, "collector", "src", "cuda", "cupti_layouts.rs")
LAYOUTS_JSON = os.path.join(HERE, "cupti.json")


def compatibility_text(entries):
    """docs/compatibility.md with its CUPTI table made from `entries`."""
    text = open(COMPATIBILITY).read()
    start, end = "<!-- cupti table: extract.py -->", "<!-- end of cupti table -->"
    a, b = text.index(start) + len(start), text.index(end)
    return text[:a] + "\n" + compatibility_rows(entries) + "\n" + text[b:]


def check():
    """Offline: the Rust table and the documented table are what the
    committed extract (cupti.json) gives; exits 1 naming what differs."""
    entries = json.load(open(LAYOUTS_JSON))
    check_fixed(entries)
    stale = [path for path, want in [(LAYOUTS_RS, rust(entries)),
                                     (COMPATIBILITY, compatibility_text(entries))]
             if open(path).read() != want]
    if stale:
        raise SystemExit("not what collector/layouts/cupti.json gives (run "
                         "collector/layouts/extract.py): " + ", ".join(stale))


def main():
    if sys.argv[1:2] == ["--check"]:
        check()
        return
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "cupti-headers")
    os.makedirs(cache, exist_ok=True)
    entries = extract(cache)
    check_fixed(entries)
    with open(LAYOUTS_JSON, "w") as f:
        json.dump(entries, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(LAYOUTS_RS, "w") as f:
        f.write(rust(entries))
    text = compatibility_text(entries)
    with open(COMPATIBILITY, "w") as f:
        f.write(text)
    print("wrote collector/layouts/cupti.json, collector/src/cuda/cupti_layouts.rs and "
          "docs/compatibility.md's CUPTI table", file=sys.stderr)


if __name__ == "__main__":
    main()
