"""gmem-prof's PEP 517 build backend: `pip install .` and `pip wheel .` on
the repository build the Rust workspace in release mode and pack a wheel
that holds the `gmem-prof` command, the collector library and the Python
module, so that a machine with no Rust toolchain installs it with pip.

The wheel (`gmem_prof-VERSION-py3-none-manylinux_2_N_x86_64.whl`):

    gmem_prof/__init__.py             the module programs call, its pytest
    gmem_prof/pytest_plugin.py        plugin and its notebook magics
    gmem_prof/notebook.py             (collector/python/gmem_prof)
    gmem_prof/__main__.py             `python -m gmem_prof` (python/__main__.py)
    gmem_prof/bin/gmem-prof           the CLI, which finds the collector beside it
    gmem_prof/bin/libgmem_prof_collector.so
    gmem_prof-VERSION.dist-info/      METADATA, WHEEL, entry_points.txt (the
                                      `gmem-prof` command, the pytest plugin), RECORD

Its platform tag names the newest glibc symbol version the two binaries
use (manylinux_2_N: runs on every Linux with glibc 2.N or later); CI checks
it with auditwheel. `GMEM_PROF_PREBUILT=DIR` packs the binaries already in
DIR (target/release, or target/debug in the tests) instead of building.
No dependency: the standard library only.
"""

import base64
import hashlib
import io
import os
import re
import subprocess
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = ("gmem-prof", "libgmem_prof_collector.so")


def _version():
    """The root package's version, from Cargo.toml."""
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        text = f.read()
    package = text.split("[package]", 1)[1]
    return re.search(r'^version\s*=\s*"([^"]+)"', package, re.M).group(1)


def _binaries():
    """The folder holding the two binaries: GMEM_PROF_PREBUILT's, or a
    release build made now."""
    prebuilt = os.environ.get("GMEM_PROF_PREBUILT")
    if prebuilt:
        folder = os.path.abspath(prebuilt)
    else:
        subprocess.run(
            ["cargo", "build", "--release", "--locked", "-p", "gmem-prof", "-p", "gmem-prof-collector"],
            cwd=ROOT,
            check=True,
        )
        folder = os.path.join(ROOT, "target", "release")
    for name in BINARIES:
        if not os.path.isfile(os.path.join(folder, name)):
            raise RuntimeError(f"{name} is not in {folder}: build the workspace first")
    return folder


def platform_tag(paths):
    """manylinux_2_N_x86_64 for the newest GLIBC_2.N the files name."""
    newest = 17
    for path in paths:
        with open(path, "rb") as f:
            for minor in re.findall(rb"GLIBC_2\.(\d+)", f.read()):
                newest = max(newest, int(minor))
    return f"manylinux_2_{newest}_x86_64"


def _metadata(version):
    return (
        "Metadata-Version: 2.1\n"
        "Name: gmem-prof\n"
        f"Version: {version}\n"
        "Summary: GPU memory profiler for CUDA programs: what was live at the peak, "
        "who allocated it, what leaks, how fragmented it is\n"
        "Requires-Python: >=3.8\n"
        "License: MIT OR Apache-2.0\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
    )


class _Wheel:
    """A wheel being written: its files and their RECORD lines."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data, executable=False):
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        # Regular file bits too: pip keeps the executable bit only then.
        info.external_attr = (0o100755 if executable else 0o100644) << 16
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{name},sha256={digest},{len(data)}")

    def close(self, record_name):
        self.record.append(f"{record_name},,")
        self.zip.writestr(record_name, "\n".join(self.record) + "\n")
        self.zip.close()


def _read(*parts):
    with open(os.path.join(ROOT, *parts), "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    folder = _binaries()
    paths = [os.path.join(folder, name) for name in BINARIES]
    tag = f"py3-none-{platform_tag(paths)}"
    name = f"gmem_prof-{version}-{tag}.whl"
    dist_info = f"gmem_prof-{version}.dist-info"
    wheel = _Wheel(os.path.join(wheel_directory, name))
    module = os.path.join(ROOT, "collector", "python", "gmem_prof")
    for file in sorted(os.listdir(module)):
        if file.endswith(".py"):
            wheel.add(f"gmem_prof/{file}", _read(module, file))
    wheel.add("gmem_prof/__main__.py", _read("python", "__main__.py"))
    for path in paths:
        with open(path, "rb") as f:
            wheel.add(f"gmem_prof/bin/{os.path.basename(path)}", f.read(), executable=True)
    wheel.add(f"{dist_info}/METADATA", _metadata(version).encode())
    wheel.add(
        f"{dist_info}/WHEEL",
        f"Wheel-Version: 1.0\nGenerator: gmem_prof_build\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    )
    wheel.add(
        f"{dist_info}/entry_points.txt",
        b"[console_scripts]\ngmem-prof = gmem_prof.__main__:main\n\n"
        b"[pytest11]\ngmem_prof = gmem_prof.pytest_plugin\n",
    )
    wheel.close(f"{dist_info}/RECORD")
    return name


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("gmem-prof has no source distribution: install from the repository (pip install .)")
