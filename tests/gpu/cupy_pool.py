"""CuPy's default memory pool from the inside: arrays allocated and freed in
steps, each state held for several of gmem-prof's pool readings (50 ms).
The pool keeps what the program frees until free_all_blocks(). At each step
this program writes CuPy's own figures (used_bytes, total_bytes): the
ground truth, with the marked lines, in argv[1].
usage: cupy_pool.py TRUTH_JSON
"""
import sys
import time

import cupy as cp

from truth import marked_lines, write

MIB = 1 << 20


def main():
    pool = cp.get_default_memory_pool()
    steps = []

    def step(name):
        cp.cuda.Device().synchronize()
        steps.append({"step": name, "used": pool.used_bytes(), "total": pool.total_bytes()})
        time.sleep(0.3)

    xs = [cp.ones(64 * MIB // 4, dtype=cp.float32) for _ in range(4)]  # line:arrays
    step("four 64 MiB arrays")
    del xs[:2]
    step("two freed: the pool keeps them")
    y = cp.ones(32 * MIB // 4, dtype=cp.float32)  # line:reused
    step("a 32 MiB array inside a freed block")
    del xs, y
    step("all freed")
    pool.free_all_blocks()
    step("free_all_blocks")
    write(sys.argv[1], {"file": __file__, "lines": marked_lines(__file__), "steps": steps})


if __name__ == "__main__":
    main()
