"""Progress of a long sweep: a rich bar on a terminal (else tqdm), plain lines when not on a terminal.

Ranks started by `pycoll bench -n` write to pipes, never to the terminal, so their rank 0 writes its progress
events to a file (ProgressFile) and the launching process replays them onto its own display (follow).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading

_POLL_S = 0.1


class Progress:
    """Plain lines: `[k/N] what`, one per finished case."""

    def __init__(self, stream):
        self.stream = stream
        self.total = 0
        self.done = 0

    @staticmethod
    def for_terminal(stream=None):
        stream = stream if stream is not None else sys.stderr
        if stream.isatty():
            if importlib.util.find_spec("rich") is not None:
                return _RichProgress(stream)
            if importlib.util.find_spec("tqdm") is not None:
                return _TqdmProgress(stream)
        return Progress(stream)

    def start(self, total: int, title: str):
        self.total, self.done = total, 0
        print(f"# {title}: {total} case{'' if total == 1 else 's'}", file=self.stream, flush=True)

    def advance(self, what: str):
        self.done += 1
        print(f"[{self.done:>{len(str(self.total))}}/{self.total}] {what}", file=self.stream, flush=True)

    def finish(self):
        pass


class _RichProgress(Progress):
    def start(self, total, title):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichBar, TextColumn, TimeElapsedColumn

        self.bar = RichBar(TextColumn("{task.fields[title]}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TextColumn("{task.description}"),
                           console=Console(file=self.stream), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("", total=total, title=title)

    def advance(self, what):
        self.bar.update(self.task, advance=1, description=what)

    def finish(self):
        self.bar.stop()


class _TqdmProgress(Progress):
    def start(self, total, title):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=title, file=self.stream, leave=False)

    def advance(self, what):
        self.bar.set_postfix_str(what)
        self.bar.update(1)

    def finish(self):
        self.bar.close()


class ProgressFile(Progress):
    """Progress events as lines of a file, for follow() in another process: start, advance, finish."""

    def __init__(self, path):
        super().__init__(None)
        self.path = path

    def _event(self, *fields):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("\t".join(str(x).replace("\t", " ").replace("\n", " ") for x in fields) + "\n")

    def start(self, total, title):
        self._event("start", total, title)

    def advance(self, what):
        self._event("advance", what)

    def finish(self):
        self._event("finish")


def for_rank(progress_file=None) -> Progress:
    """Rank 0's display: events to progress_file when the launcher follows them, else this rank's stderr."""
    return ProgressFile(progress_file) if progress_file else Progress.for_terminal(sys.stderr)


def _replay(line: str, progress: Progress) -> bool:
    """Apply one event; returns whether a display is now running (started and not finished)."""
    kind, *fields = line.split("\t")
    if kind == "start":
        progress.start(int(fields[0]), fields[1])
        return True
    if kind == "advance":
        progress.advance(fields[0])
        return True
    progress.finish()
    return False


@contextlib.contextmanager
def follow(path, progress: Progress):
    """While the block runs, replay the events another process appends to path onto progress."""
    stop = threading.Event()
    open(path, "a").close()

    def tail():
        running = False
        with open(path, encoding="utf-8") as f:
            pending = ""
            while True:
                stopping = stop.wait(_POLL_S)  # read once more after the stop: the last events
                pending += f.read()
                *lines, pending = pending.split("\n")
                for line in lines:
                    running = _replay(line, progress)
                if stopping:
                    break
        if running:  # the ranks stopped mid-sweep: take the bar off the terminal
            progress.finish()

    thread = threading.Thread(target=tail, name="pycoll-bench-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
