"""pytest --gmem-prof on real CUDA (tests/gpu/run.sh's `pytest` phase): a
test within its GPU memory limit, one over it that keeps what it took in
a module-level cache (as a test that loads a model into a global does),
and one that leaks a tensor past its leak limit. The failures must name
the lines marked `line:`."""
import pytest
import torch

cache = []
kept = []


@pytest.mark.limit_gpu_memory("64 MiB")
def test_within_its_limit():
    # (Not x.sum(): a uint8 sum promotes to int64 and takes a 128 MiB copy,
    # which this limit rightly refused once the first test was judged.)
    x = torch.ones(16 << 20, dtype=torch.uint8, device="cuda")
    assert int(x[-1]) == 1


@pytest.mark.limit_gpu_memory("64 MiB")
def test_over_its_limit():
    cache.append(torch.ones(256 << 20, dtype=torch.uint8, device="cuda"))  # line:over


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks():
    kept.append(torch.zeros(8 << 20, dtype=torch.uint8, device="cuda"))  # line:leak


def test_without_limit():
    assert torch.cuda.is_available()
