"""Checks the tests of pycoll's schedules on simulated ranks share (test_algorithms_sim.py,
test_hierarchical_sim.py): integer-valued inputs whose exact reduction every dtype holds, that exact reduction,
and data with heavy cancellation for the accuracy modes."""

import numpy as np


def integer_inputs(size, count, dtype, op, seed=0):
    """Integer-valued data whose exact result every dtype can hold (integers may wrap, like numpy)."""
    rng = np.random.default_rng(seed)
    if op == "prod":
        values = rng.choice([-1, 1, 2], size=(size, count)) if np.dtype(dtype).kind != "u" else \
            rng.choice([1, 2], size=(size, count))
    elif op == "avg" and np.dtype(dtype).kind == "f":
        values = rng.integers(-3, 4, size=(size, count)) * size  # the sum divides exactly by size
    else:
        values = rng.integers(-8 if np.dtype(dtype).kind != "u" else 0, 9, size=(size, count))
    return [values[r].astype(dtype) for r in range(size)]


def expected(inputs, dtype, op):
    stack = np.stack([x.astype(np.int64) for x in inputs]) if inputs[0].size else np.zeros((len(inputs), 0),
                                                                                          np.int64)
    n = len(inputs)
    if op in ("sum", "avg"):
        total = stack.sum(axis=0)
    elif op == "prod":
        total = stack.prod(axis=0)
    elif op == "min":
        total = stack.min(axis=0)
    else:
        total = stack.max(axis=0)
    if np.dtype(dtype).kind in "iu":
        total = total.astype(dtype)  # wraps like the kernels
        if op == "avg":
            wide = total.astype(np.int64)
            total = (np.sign(wide) * (np.abs(wide) // n)).astype(dtype)  # truncation toward zero
        return total
    return (total / n if op == "avg" else total).astype(dtype)


def assert_exact(outs, inputs, dtype, op, message):
    """Every rank's result is the exact reduction of integer-valued inputs, in the dtype, bitwise alike."""
    want = expected(inputs, dtype, op)
    for out in outs:
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out.astype(np.float64), want.astype(np.float64), err_msg=message)
    assert_identical(outs)


def assert_identical(outs):
    first = outs[0].view(np.uint8)
    for r, out in enumerate(outs):
        assert out.view(np.uint8).tobytes() == first.tobytes(), f"rank {r} differs from rank 0"


def ill_conditioned(size, count, seed):
    """float32 data with heavy cancellation: large values of both signs around small ones."""
    rng = np.random.default_rng(seed)
    big = rng.choice([-1.0, 1.0], size=(size, count)) * 10.0 ** rng.uniform(2, 4, size=(size, count))
    small = rng.standard_normal((size, count))
    return [(big[r] + small[r]).astype(np.float32) for r in range(size)]
