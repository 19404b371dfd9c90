"""Tests for the pytest plugin's own test (tests/e2e/pytest.rs), over the
fake driver (FAKE_CUPTI: the fake libcupti, which holds the fake CUDA
driver): one within its GPU memory limit, one over it (that frees what it took
before it ends), one that leaks past
its leak limit, one with no limit, and one whose steps (gmem_prof.step())
keep 1 MiB each past its growth limit. Sizes are known by construction.
CUDA starts inside the first test, as a test's first torch call starts it."""

import ctypes
import os

import pytest

cuda = ctypes.CDLL(os.environ["FAKE_CUPTI"])
cuda.fake_cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.fake_cuMemFree.argtypes = [ctypes.c_uint64, ctypes.c_size_t]
kept = []
started = []


def allocate(n):
    # CUDA starts at the first test's first allocation, inside the test, as
    # with torch: the collector attaches then, after the test's range
    # began.
    if not started:
        assert cuda.fake_cuInit() >= 0
        started.append(True)
    p = ctypes.c_uint64()
    assert cuda.fake_cuMemAlloc(ctypes.byref(p), n) == 0
    return p.value


def temporary(n):
    cuda.fake_cuMemFree(allocate(n), n)


@pytest.mark.limit_gpu_memory("8 MiB")
def test_within_its_limit():
    temporary(4 << 20)


@pytest.mark.limit_gpu_memory("8 MiB")
def test_over_its_limit():
    temporary(16 << 20)  # line:over


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks():
    kept.append(allocate(2 << 20))  # line:leak


def test_without_limit():
    temporary(1 << 20)


@pytest.mark.limit_gpu_growth("512 KiB")
def test_grows_each_step():
    import gmem_prof

    for _ in range(5):
        kept.append(allocate(1 << 20))  # line:growth
        temporary(1 << 20)
        gmem_prof.step()
