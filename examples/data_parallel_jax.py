"""Data-parallel training in JAX with pycoll.reduce_tree: every rank computes jax.grad on its share of the
batch, and reduce_tree averages the gradient pytree over the ranks (packed into a few flat buckets, each
all-reduced as soon as it is packed). JAX arrays are immutable, so the reduced gradients come back as a new
pytree rather than being written in place as GradientBuckets does.

    pip install "pycoll-collectives[jax]"
    pycoll run -n 4 examples/data_parallel_jax.py      # 4 ranks, a quarter of each batch each
    python examples/data_parallel_jax.py               # one process on the whole batch: the same weights

Averaging the ranks' mean gradients over equal shares is the mean gradient of the whole batch, so every world
size trains the same model up to float32 rounding (tests/integrations/test_examples.py checks it against one process).
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import pycoll

LAYERS = (8, 32, 32, 16, 1)  # a small MLP: 4 weight matrices and 4 bias vectors
BATCH, STEPS, LEARNING_RATE = 96, 30, 0.05


def init_params(seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), len(LAYERS) - 1)
    return [{"w": jax.random.normal(k, (fan_in, fan_out)) / np.sqrt(fan_in), "b": jnp.zeros(fan_out)}
            for k, fan_in, fan_out in zip(keys, LAYERS[:-1], LAYERS[1:])]


def batch(step):
    """The whole batch of a step: the same on every rank (each then takes its share)."""
    x = jax.random.normal(jax.random.PRNGKey(1000 + step), (BATCH, LAYERS[0]))
    return x, jnp.sin(x.sum(axis=1, keepdims=True))


def forward(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


grad = jax.jit(jax.grad(loss))
update = jax.jit(lambda params, grads: jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads))


def train(comm):
    params = init_params()
    share = BATCH // comm.size
    for step in range(STEPS):
        x, y = batch(step)
        rows = slice(comm.rank * share, (comm.rank + 1) * share)
        grads = grad(params, x[rows], y[rows])             # this rank's share: its mean gradient
        grads = pycoll.reduce_tree(comm, grads, "avg")      # the whole batch's mean gradient, on every rank
        params = update(params, grads)
    x, y = batch(STEPS)
    return params, float(loss(params, x, y))


def main(train=train, steps_are=""):
    """Trains with `train` (examples/data_parallel_jax_jit.py passes its own) and reports the result."""
    with pycoll.init() as comm:
        if BATCH % comm.size:
            raise SystemExit(f"the batch of {BATCH} must split evenly over {comm.size} ranks")
        params, final_loss = train(comm)
        if "--json" in sys.argv:
            leaves = [np.asarray(p).tolist() for p in jax.tree_util.tree_leaves(params)]
            print(json.dumps({"rank": comm.rank, "loss": final_loss, "params": leaves}))
        elif comm.rank == 0:
            print(f"{comm.size} rank(s), {STEPS} steps{steps_are}: loss {final_loss:.6f}")


if __name__ == "__main__":
    main()
