"""`pycoll bench`: size sweeps, the timing method, correctness checks, reports and peer comparisons.

sweep.py   what to run: sizes, dtypes, ops, algorithms, iteration counts
timing.py  how one case is timed: barrier, then one timed collective, per rank; min/median/max across ranks
check.py   #wrong on integer-valued data and max relative error against an exact reference
worker.py  one rank of a pycoll sweep (runs the cases, rank 0 collects the rows)
launch.py  start N local ranks of a worker module on 127.0.0.1
report.py  rows as an nccl-tests style table, JSON, CSV
progress.py  a bar on a terminal, plain lines elsewhere; relayed from launched ranks through a file
accuracy_report.py  --accuracy-report: ulp errors against the exact sum (measured by pycoll.tools.accuracy)
plot.py    busbw and latency against size (matplotlib)
peers.py   the same sweep over torch.distributed (gloo) and mpi4py, for side-by-side ratios
raw_socket.py  loopback ping-pong latency and stream bandwidth: the floor and ceiling for any TCP library
"""
