"""Data-parallel training in NumPy with pycoll.GradientBuckets: every rank computes the gradients of its share
of the batch, and each layer's gradients start travelling while backward is still computing the layers below
(the buckets fill in reverse order, as gradients become ready).

    pycoll run -n 4 examples/data_parallel_numpy.py      # 4 ranks, a quarter of each batch each
    python examples/data_parallel_numpy.py               # one process on the whole batch: the same weights

Averaging the ranks' mean gradients over equal shares is the mean gradient of the whole batch, so every world
size trains the same model up to rounding (tests/integrations/test_examples.py checks it against one process).
"""

import json
import sys

import numpy as np

import pycoll

LAYERS = (8, 32, 32, 16, 1)  # a small MLP: 4 weight matrices and 4 bias vectors
BATCH, STEPS, LEARNING_RATE = 96, 30, 0.05


def init_params(seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in), np.zeros(fan_out)]
    return params


def batch(step):
    """The whole batch of a step: the same on every rank (each then takes its share)."""
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((BATCH, LAYERS[0]))
    y = np.sin(x.sum(axis=1, keepdims=True))
    return x, y


def forward(params, x):
    activations = [x]
    for k in range(0, len(params), 2):
        z = activations[-1] @ params[k] + params[k + 1]
        activations.append(np.tanh(z) if k + 2 < len(params) else z)
    return activations


def backward(params, activations, y, grads, ready):
    """Mean-squared-error gradients, last layer first, into grads[i] (views into the buckets); ready(i) as each
    one is final, so its bucket can start while the layers below are computed."""
    delta = 2 * (activations[-1] - y) / len(y)
    for k in reversed(range(0, len(params), 2)):
        grads[k + 1][...] = delta.sum(axis=0)
        ready(k + 1)
        grads[k][...] = activations[k // 2].T @ delta
        ready(k)
        if k:
            delta = (delta @ params[k].T) * (1 - activations[k // 2] ** 2)


def train(comm):
    params = init_params()
    buckets = pycoll.GradientBuckets(comm, [np.zeros_like(p) for p in params], op="avg",
                                     bucket_bytes=4096)  # small buckets for a small model
    grads = [buckets.view(i) for i in range(len(params))]  # written in place: no copies at all
    share = BATCH // comm.size
    for step in range(STEPS):
        x, y = batch(step)
        rows = slice(comm.rank * share, (comm.rank + 1) * share)
        activations = forward(params, x[rows])
        backward(params, activations, y[rows], grads, buckets.ready)
        buckets.wait()  # every bucket all-reduced: grads hold the whole batch's mean gradient
        for p, g in zip(params, grads):
            p -= LEARNING_RATE * g
    x, y = batch(STEPS)
    loss = float(np.mean((forward(params, x)[-1] - y) ** 2))
    return params, loss


def main():
    with pycoll.init() as comm:
        if BATCH % comm.size:
            raise SystemExit(f"the batch of {BATCH} must split evenly over {comm.size} ranks")
        params, loss = train(comm)
        if "--json" in sys.argv:
            print(json.dumps({"rank": comm.rank, "loss": loss, "params": [p.tolist() for p in params]}))
        elif comm.rank == 0:
            print(f"{comm.size} rank(s), {STEPS} steps: loss {loss:.6f}")


if __name__ == "__main__":
    main()
