"""What each vendor backend offers, as data: the engine checks a request against it before calling the vendor
(a refused request raises TypeError and leaves the communicator usable), and the capability table in
backends/README.md is generated from the same data (`python -m pycoll.plugins.vendor_capabilities`
rewrites it; tests/vendors/test_vendor_strict.py fails when they differ)."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


class Refusal(typing.NamedTuple):
    """A request the vendor refuses: `collectives` of `dtype` (pycoll's dtype name), with `op` (None: every op),
    on devices of `generation` (None: every device) but those of `unless` (None: no exception; a device of
    unknown generation is refused); `why` is said to the user and cites the rule."""

    collectives: tuple
    dtype: str
    op: typing.Optional[str]
    generation: typing.Optional[str]
    why: str
    unless: typing.Optional[str] = None


def _names():
    from pycoll.dtypes import DTYPES, OPS
    return {v: k for k, v in DTYPES.items()}, {v: k for k, v in OPS.items()}


def refusal(backend, kind, dtype, op, device_name):
    """Why backend refuses `kind` on dtype/op ids (op -1 or None: no op) on the device named device_name, or
    None. A rule for one device generation applies only where the device is known to be of it."""
    if not backend.refusals:
        return None
    dtypes, ops = _names()
    dtype_name = dtypes.get(dtype, str(dtype))
    op_name = ops.get(op) if op is not None and op >= 0 else None
    if op_name == "avg" and not backend.native_avg:
        op_name = "sum"  # the vendor sums, then pycoll divides
    generation = backend.device_generation(device_name) if device_name else None
    for rule in backend.refusals:
        if (kind in rule.collectives and rule.dtype == dtype_name and (rule.op is None or rule.op == op_name)
                and (rule.generation is None or rule.generation == generation)
                and (rule.unless is None or rule.unless != generation)):
            device = f" on {device_name}" if device_name else ""
            with_op = f" with op {op_name}" if rule.op else ""
            return f"{kind} of {dtype_name}{with_op} is not supported by {backend.name.upper()}{device}: {rule.why}"
    return None


def markdown(backend) -> str:
    """The capability table of one vendor backend, as Markdown."""
    lines = [f"**{backend.name}** -- accuracies: {', '.join(backend.accuracies)}.", "",
             "| collective | algorithms | dtypes | ops |", "| --- | --- | --- | --- |"]
    every_op = ("sum", "prod", "min", "max", "avg")
    for kind in COLLECTIVES:
        if kind in backend.vendor_algorithm_collectives:
            vendor = [a for a in backend.algorithm_settings]
            own = list(backend.own_algorithms.get(kind, ()))
            algorithms = ", ".join(vendor + [f"{a} (pycoll's, over send/recv)" for a in own])
        else:
            algorithms = "auto"
        refused = [r for r in backend.refusals if kind in r.collectives]
        always = [r for r in refused if r.op is None and r.generation is None and r.unless is None]
        dtypes = ", ".join(d for d in backend.dtypes if not any(r.dtype == d for r in always))
        notes = [f"{r.dtype} only on {r.unless}" if r.unless else
                 f"no {r.dtype}{' ' + r.op if r.op else ''}{' on ' + r.generation if r.generation else ''}"
                 for r in refused if r not in always]
        if notes:
            dtypes += " (" + "; ".join(notes) + ")"
        ops = ", ".join(every_op) if kind in REDUCTIONS else "-"
        if kind in REDUCTIONS and not backend.native_avg:
            ops += " (avg: a sum, then a division on the device)"
        lines.append(f"| {kind} | {algorithms} | {dtypes} | {ops} |")
    if backend.refusals:
        lines += ["", "Refused before the call (TypeError; the communicator stays usable):"]
        lines += [f"- {', '.join(r.collectives)} of {r.dtype}{' with ' + r.op if r.op else ''}"
                  f"{' on ' + r.generation if r.generation else ''}{' except on ' + r.unless if r.unless else ''}: "
                  f"{r.why}" for r in backend.refusals]
    return "\n".join(lines)


def _backends():
    from pycoll.plugins.hccl import HcclBackend
    from pycoll.plugins.nccl import NcclBackend
    return [NcclBackend(), HcclBackend()]


def generated_block() -> str:
    return "\n\n".join(markdown(b) for b in _backends()) + "\n"


_MARKERS = re.compile(r"(<!-- vendor-capabilities:begin.*?-->\n)(.*?)(<!-- vendor-capabilities:end -->)", re.S)
DOCS = ("backends/README.md",)


def documented(text: str):
    """The generated block a document holds between its markers, or None."""
    m = _MARKERS.search(text)
    return None if m is None else m.group(2)


def rewrite(root: Path) -> None:
    block = generated_block()
    for doc in DOCS:
        path = root / doc
        text = path.read_text()
        if documented(text) is None:
            raise SystemExit(f"{path}: no vendor-capabilities markers")
        path.write_text(_MARKERS.sub(lambda m: m.group(1) + block + m.group(3), text))


if __name__ == "__main__":
    rewrite(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
