"""Reading what a job did: the flight recorder's dumps (one per rank per communicator) merged into findings
(stragglers, hangs, mismatches, failed calls), a per-rank time breakdown, a Perfetto trace, a PNG timeline, and
torch's flight-recorder format. `pycoll trace DIR` (pycoll/cli/trace.py) runs them; docs/tracing.md."""

from pycoll.trace.analysis import analyze, rank_times
from pycoll.trace.dumps import TraceFormatError, read_dir, read_dump

__all__ = ["TraceFormatError", "analyze", "rank_times", "read_dir", "read_dump"]
