"""The model, data and step of the torch backend test, shared by the DDP ranks and the single-process run."""

import contextlib

import torch

BATCH, STEPS = 48, 7


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(12, 12), torch.nn.Tanh()) for _ in range(8)],
                               torch.nn.Linear(12, 1)).double()


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(BATCH, 12, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def train_step(model, opt, x, y, accumulate):
    """accumulate: keep this step's gradients (DDP: under no_sync, without communication) and add the next
    step's to them before the update."""
    sync = model.no_sync() if accumulate and hasattr(model, "no_sync") else contextlib.nullcontext()
    with sync:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
    if not accumulate:
        opt.step()
        opt.zero_grad()
