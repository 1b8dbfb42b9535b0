"""Progress while a rank waits at init: a wait that can last the whole timeout (300 s by default) says, at
intervals, what it waits for and what to check, instead of staying silent until it fails.

Messages go to the logger "pycoll" at WARNING: with no logging configured Python prints them on stderr. The
first comes after at most FIRST_REPORT_S, the next every PYCOLL_WAIT_REPORT_S seconds (0: none)."""

import logging
import time

from pycoll import settings

log = logging.getLogger("pycoll")

FIRST_REPORT_S = 10.0  # a healthy job of any size is usually formed by then; later, someone is missing


class WaitReport:
    """Logs ``describe(seconds waited)`` (a str, or None for nothing to say) each time poll() finds a report
    due. The clock starts at construction."""

    def __init__(self, describe, interval=None):
        self._describe = describe
        self._interval = settings.get("PYCOLL_WAIT_REPORT_S") if interval is None else float(interval)
        self.start = time.monotonic()
        self._next = self.start + min(FIRST_REPORT_S, self._interval)

    def poll(self):
        if self._interval <= 0:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        text = self._describe(now - self.start)
        if text:
            log.warning(text)


def ranks_text(ranks, limit=16):
    """ "rank 2", "ranks 2, 3", or the first `limit` of many and how many more."""
    ranks = list(ranks)
    shown = ", ".join(map(str, ranks[:limit])) + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"
