"""Progress of a long sweep: a rich bar on a terminal (else tqdm), plain lines when not on a terminal."""

from __future__ import annotations

import importlib.util
import sys


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
        print(f"{title}: {total} cases", file=self.stream, flush=True)

    def advance(self, what: str):
        self.done += 1
        print(f"[{self.done}/{self.total}] {what}", file=self.stream, flush=True)

    def finish(self):
        pass


class _RichProgress(Progress):
    def start(self, total, title):
        from rich.console import Console
        from rich.progress import Progress as RichBar

        self.bar = RichBar(console=Console(file=self.stream), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(title, total=total)

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
