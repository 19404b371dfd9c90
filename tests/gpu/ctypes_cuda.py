"""Python frames with no framework: CUDA's runtime called through ctypes
from lines marked with a `line:` comment. One buffer is freed, one kept to the end
(a leak compute-sanitizer would report). Writes the truth to argv[1].
usage: ctypes_cuda.py TRUTH_JSON
"""
import ctypes
import ctypes.util
import glob
import sys

from truth import marked_lines, write


def runtime():
    for path in ["libcudart.so"] + sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*")):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise SystemExit("no libcudart")


cuda = runtime()


def device_buffer(n):
    p = ctypes.c_void_p()
    rc = cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # line:malloc
    assert rc == 0, rc
    return p


class Workspace:
    def __init__(self):
        self.scratch = device_buffer(8 << 20)  # line:scratch
        self.kept = device_buffer(16 << 20)  # line:kept

    def release_scratch(self):
        cuda.cudaFree(self.scratch)


def main():
    w = Workspace()
    w.release_scratch()
    cuda.cudaDeviceSynchronize()
    write(sys.argv[1], {"file": __file__, "lines": marked_lines(__file__),
                        "freed_bytes": 8 << 20, "leaked_bytes": 16 << 20})


if __name__ == "__main__":
    main()
