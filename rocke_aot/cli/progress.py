"""Progress lines for output that is not a terminal (CI logs, pipes): one line on stderr every
``interval`` seconds from a timer thread (a compile or a GPU run may take minutes; a line must
come even when nothing finishes) and once at the end. A terminal gets rich progress bars
instead (cli/build.py, cli/bench.py). Counts are written by the driver thread, only read here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import click


class PeriodicLines:
    def __init__(self, interval: float, line: Callable[[], str] | None = None):
        self.interval = interval
        self._line = line
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocke-progress", daemon=True)

    def elapsed(self) -> str:
        return f"elapsed {time.monotonic() - self._start:.0f}s"

    def line(self) -> str:
        return self._line() if self._line else self.elapsed()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            click.echo(self.line(), err=True)

    def __enter__(self) -> PeriodicLines:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            click.echo(self.line(), err=True)
