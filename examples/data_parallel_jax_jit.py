"""Data-parallel training in JAX with the whole step inside one jax.jit: the gradient, its average over the
ranks (pycoll.jax.all_reduce, an XLA custom call into libpycoll) and the update compile into one program, so a
step makes no trip through Python between the backward pass and the all-reduce. The model, data and schedule are
examples/data_parallel_jax.py's; there the gradients leave jit and pycoll.reduce_tree averages them.

    pip install "pycoll-collectives[jax]"
    pycoll run -n 4 examples/data_parallel_jax_jit.py   # 4 ranks, a quarter of each batch each
    python examples/data_parallel_jax_jit.py            # one process on the whole batch: the same weights

The gradient pytree is flattened into one vector (jax.flatten_util.ravel_pytree), so each step runs a single
all-reduce however many parameter arrays the model has.
"""

import jax
from data_parallel_jax import BATCH, LEARNING_RATE, STEPS, batch, init_params, loss, main
from jax.flatten_util import ravel_pytree

import pycoll.jax as pj


def make_step(comm):
    @jax.jit
    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)                  # this rank's share: its mean gradient
        flat, unravel = ravel_pytree(grads)
        grads = unravel(pj.all_reduce(flat, comm, op="avg"))  # the whole batch's mean gradient, inside jit
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return step


def train(comm):
    step = make_step(comm)
    params = init_params()
    share = BATCH // comm.size
    rows = slice(comm.rank * share, (comm.rank + 1) * share)
    for i in range(STEPS):
        x, y = batch(i)
        params = step(params, x[rows], y[rows])
    x, y = batch(STEPS)
    return params, float(loss(params, x, y))


if __name__ == "__main__":
    main(train, ", one jitted step each")
