"""JAX with its defaults: XLA's BFC allocator preallocates most of the GPU
(XLA_PYTHON_CLIENT_MEM_FRACTION, 75% by default) in one allocation at start
and sub-allocates every array inside it. A small MLP trains for 50 steps.
The report must show that block as held by an allocator cache, not as a
leak. Writes JAX's own memory_stats() to STATS (ground truth).

    python3 jax_train.py STATS.json
"""
import json
import sys

import jax
import jax.numpy as jnp


def main(stats_path):
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {
        "w1": jax.random.normal(k1, (512, 1024)) * 0.02,
        "w2": jax.random.normal(k2, (1024, 512)) * 0.02,
    }
    x = jax.random.normal(k3, (256, 512))

    def loss(p, x):
        h = jax.nn.relu(x @ p["w1"])
        return jnp.mean((h @ p["w2"] - x) ** 2)

    @jax.jit
    def step(p, x):
        g = jax.grad(loss)(p, x)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)

    for _ in range(50):
        params = step(params, x)
    final = float(loss(params, x))
    stats = jax.devices()[0].memory_stats() or {}
    out = {k: int(v) for k, v in stats.items() if isinstance(v, (int, float))}
    out["loss"] = final
    with open(stats_path, "w") as f:
        json.dump(out, f)
    print("jax_train:", json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
