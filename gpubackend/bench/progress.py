"""A progress bar on stderr for ``gpubackend bench``. On a terminal it redraws one line; on a
pipe it prints a line at every tenth of the work and at the first step after 10 s without one,
so logs stay short."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(1, int(total))
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._decile = -1
        self._last = 0.0
        self._t0 = time.monotonic()

    def add(self, extra: int) -> None:
        """More work was found (e.g. a path turned out to be usable)."""
        self.total += max(0, int(extra))

    def step(self, label: str, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        self.show(label)

    def show(self, label: str) -> None:
        if not self.enabled:
            return
        frac = self.done / self.total
        elapsed = time.monotonic() - self._t0
        if self.tty:
            now = time.monotonic()
            if now - self._last < 0.05 and self.done < self.total:
                return
            self._last = now
            width = shutil.get_terminal_size((100, 20)).columns
            head = f"[{'#' * int(frac * 30):<30}] {100 * frac:3.0f}% {elapsed:6.1f}s "
            self.stream.write("\r" + (head + label).ljust(width - 1)[: width - 1])
        else:
            decile = int(10 * frac)
            now = time.monotonic()
            if decile == self._decile and now - self._last < 10.0:
                return
            self._decile = decile
            self._last = now
            self.stream.write(f"[{'#' * decile:<10}] {100 * frac:3.0f}% {elapsed:6.1f}s {label}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")
            self.stream.flush()
