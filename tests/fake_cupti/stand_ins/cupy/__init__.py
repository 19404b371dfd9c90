"""Stand-in for CuPy: a default memory pool whose figures the test sets,
or which takes chunks from CUDA itself (`malloc`)."""
from cupy import cuda


class SingleDeviceMemoryPool:
    """Named as CuPy's pool class is: a stack through it is the pool's."""

    used = 0
    total = 0

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.total

    def malloc(self, n, allocate, keep=True):
        """A new chunk of `n` bytes from CUDA (`allocate`), for an array the
        program keeps (`keep`) or frees at once, the pool keeping the chunk
        either way, as CuPy's does."""
        allocate(n)
        self.total += n
        if keep:
            self.used += n


_pool = SingleDeviceMemoryPool()


def get_default_memory_pool():
    return _pool
