"""Hybrid parallel training with pycoll alone: pipeline (PP) x data (DP) x tensor (TP) parallelism and ZeRO-1
optimizer sharding, on a small transformer-style model (a stack of residual MLP blocks), in NumPy.

    pycoll run -n 8 examples/hybrid_parallel.py     # pp=2 x dp=2 x tp=2
    pycoll run -n 4 examples/hybrid_parallel.py     # pp=2 x dp=1 x tp=2
    python examples/hybrid_parallel.py              # one process: the same model, the same weights

- comm.mesh(pp=..., dp=..., tp=...) gives each rank its three groups, over the job's connections.
- TP (Megatron-style): each block's first matrix is split by rows (output features), its second by columns; each
  rank computes a partial block output and the tp group all-reduces it (and the input gradient in backward).
- PP: the blocks are split between stages; activations go forward and gradients back with send/recv over the pp
  group, micro-batch by micro-batch (all forwards, then all backwards: GPipe's schedule).
- DP + ZeRO-1: each rank owns 1/dp of its parameters' Adam state. Gradients are reduce-scattered over the dp
  group (each rank gets the sum for its shard), each rank updates its shard, and the shards are all-gathered.

The loss is the mean over the whole batch, so the gradient summed over dp ranks is the whole batch's, and every
layout trains the same model up to the order of floating-point sums (tests/integrations/test_examples.py checks 8 ranks
against one process).
"""

import json
import sys

import numpy as np

import pycoll

D, D_FF, BLOCKS = 16, 32, 4           # model width, hidden width, residual blocks (split between stages)
BATCH, MICRO, STEPS = 32, 2, 8        # global batch, micro-batches per step, optimizer steps
LR, BETAS, EPS = 1e-2, (0.9, 0.999), 1e-8


def layout(size):
    """pp x dp x tp for a world size: 2 pipeline stages and 2-way tensor parallelism where the ranks allow."""
    pp = 2 if size % 2 == 0 else 1
    tp = 2 if size % (pp * 2) == 0 else 1
    return {"pp": pp, "dp": size // (pp * tp), "tp": tp}


def full_model(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((D_FF, D)) / np.sqrt(D), rng.standard_normal((D, D_FF)) / np.sqrt(D_FF))
            for _ in range(BLOCKS)]


def data(seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, D))
    return x, np.sin(x) + 0.1 * x[:, ::-1]


class Block:
    """One residual MLP block, h = x + W2 tanh(W1 x), holding this tp rank's slice of W1's rows and W2's
    columns; partial outputs and input gradients are summed over the tp group."""

    def __init__(self, w1, w2, tp):
        k = D_FF // tp.size
        rows = slice(tp.rank * k, (tp.rank + 1) * k)
        self.tp, self.w1, self.w2 = tp, w1[rows].copy(), w2[:, rows].copy()

    def forward(self, x):
        a = np.tanh(x @ self.w1.T)
        out = a @ self.w2.T
        self.tp.all_reduce(out)
        return x + out, (x, a)

    def backward(self, grad, saved, grads):
        x, a = saved
        g_w2 = grad.T @ a
        g_pre = (grad @ self.w2) * (1 - a * a)
        g_w1 = g_pre.T @ x
        g_x = g_pre @ self.w1
        self.tp.all_reduce(g_x)
        grads[id(self.w1)] += g_w1
        grads[id(self.w2)] += g_w2
        return grad + g_x


class ShardedAdam:
    """ZeRO-1: Adam state for this dp rank's 1/dp of the flat parameters only."""

    def __init__(self, params, dp):
        self.params, self.dp = params, dp
        total = sum(p.size for p in params)
        self.shard = -(-total // dp.size)                 # padded so that every rank's shard is equal
        self.flat = np.zeros(self.shard * dp.size)
        self.m, self.v, self.t = np.zeros(self.shard), np.zeros(self.shard), 0

    def step(self, grads):
        flat_grad = np.zeros_like(self.flat)
        np.concatenate([grads[id(p)].ravel() for p in self.params], out=flat_grad[:self.flat.size - self.pad])
        grad = np.empty(self.shard)
        self.dp.reduce_scatter(flat_grad, grad)           # this rank's shard of the whole batch's gradient
        np.concatenate([p.ravel() for p in self.params], out=self.flat[:self.flat.size - self.pad])
        mine = self.flat[self.dp.rank * self.shard:(self.dp.rank + 1) * self.shard].copy()
        self.t += 1
        self.m = BETAS[0] * self.m + (1 - BETAS[0]) * grad
        self.v = BETAS[1] * self.v + (1 - BETAS[1]) * grad * grad
        m_hat, v_hat = self.m / (1 - BETAS[0] ** self.t), self.v / (1 - BETAS[1] ** self.t)
        mine -= LR * m_hat / (np.sqrt(v_hat) + EPS)
        self.dp.all_gather(mine, self.flat)               # every dp rank gets every shard back
        offset = 0
        for p in self.params:
            p[...] = self.flat[offset:offset + p.size].reshape(p.shape)
            offset += p.size

    @property
    def pad(self):
        return self.flat.size - sum(p.size for p in self.params)


def train(comm):
    shape = layout(comm.size)
    mesh = comm.mesh(**shape)
    pp, dp, tp = mesh["pp"], mesh["dp"], mesh["tp"]
    stage, per_stage = pp.rank, BLOCKS // pp.size
    model = full_model()
    blocks = [Block(*model[i], tp) for i in range(stage * per_stage, (stage + 1) * per_stage)]
    params = [w for b in blocks for w in (b.w1, b.w2)]
    optimizer = ShardedAdam(params, dp)
    x_all, y_all = data()
    rows = BATCH // dp.size
    x_mine, y_mine = x_all[dp.rank * rows:(dp.rank + 1) * rows], y_all[dp.rank * rows:(dp.rank + 1) * rows]
    micro = rows // MICRO
    first, last = stage == 0, stage == pp.size - 1
    losses = []
    for _ in range(STEPS):
        grads = {id(p): np.zeros_like(p) for p in params}
        saved, loss = [], 0.0
        for m in range(MICRO):                           # forwards, micro-batch by micro-batch
            h = x_mine[m * micro:(m + 1) * micro].copy() if first else pp.recv(np.empty((micro, D)), stage - 1)
            acts = []
            for b in blocks:
                h, act = b.forward(h)
                acts.append(act)
            if last:
                err = h - y_mine[m * micro:(m + 1) * micro]
                loss += float(np.sum(err * err)) / (BATCH * D)
                saved.append((acts, 2 * err / (BATCH * D)))
            else:
                pp.send(h, stage + 1)
                saved.append((acts, None))
        for m in reversed(range(MICRO)):                 # then backwards, last micro-batch first
            acts, grad = saved[m]
            if not last:
                grad = pp.recv(np.empty((micro, D)), stage + 1)
            for b, act in zip(reversed(blocks), reversed(acts)):
                grad = b.backward(grad, act, grads)
            if not first:
                pp.send(grad, stage - 1)
        optimizer.step(grads)
        total = np.array([loss if last and tp.rank == 0 else 0.0])
        comm.all_reduce(total)                           # the whole batch's loss: the last stage's dp ranks
        losses.append(float(total[0]))
    weights = {}
    for i, b in zip(range(stage * per_stage, (stage + 1) * per_stage), blocks):
        w1 = np.empty((tp.size,) + b.w1.shape)
        w2 = np.empty((tp.size,) + b.w2.shape)
        tp.all_gather(b.w1, w1)
        tp.all_gather(np.ascontiguousarray(b.w2), w2)
        weights[i] = [np.concatenate(list(w1), axis=0).tolist(), np.concatenate(list(w2), axis=1).tolist()]
    return shape, mesh.coords, weights, losses


def main():
    with pycoll.init() as comm:
        shape, coords, weights, losses = train(comm)
        if "--json" in sys.argv:
            print(json.dumps({"rank": comm.rank, "shape": shape, "coords": coords, "weights": weights,
                              "losses": losses}))
        elif comm.rank == 0:
            print(f"pp x dp x tp = {shape['pp']} x {shape['dp']} x {shape['tp']}: loss {losses[0]:.4f} -> "
                  f"{losses[-1]:.4f} over {STEPS} steps")


if __name__ == "__main__":
    main()
