"""``pycoll tune [-n N]``: measure this machine's cost-model constants for algorithm="auto" and store them."""

from pycoll.launcher import launch_module


def register(subparsers):
    parser = subparsers.add_parser(
        "tune", help="measure the cost model that algorithm='auto' uses",
        description="Run N local ranks that measure per-message latency (alpha), per-byte transfer time (beta) "
                    "and per-byte reduction time (gamma), then each algorithm's all-reduce time at a small and a "
                    "large size, fit each algorithm's latency and bandwidth factors, print where auto will pick "
                    "which algorithm, and store the model where pycoll.init() finds it "
                    "(PYCOLL_TUNE_FILE, default ~/.cache/pycoll/cost_model.json).")
    parser.add_argument("-n", "--nproc", type=int, default=2, help="ranks to measure with (default: 2)")
    parser.set_defaults(func=lambda args: launch_module("pycoll.tools.tuning", args.nproc))
