"""The progress bar of ``gpubackend bench``, on stderr, through tqdm. On a terminal it redraws
one line; on a pipe it refreshes at most every 10 s, so logs stay short."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        stream = stream or sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        self._bar = tqdm(total=max(1, int(total)), file=stream, disable=not enabled, leave=not tty,
                         mininterval=0.05 if tty else 10.0, dynamic_ncols=tty, unit="step",
                         bar_format="{l_bar}{bar:30}| {elapsed} {postfix}")

    @property
    def total(self) -> int:
        return int(self._bar.total)

    @property
    def done(self) -> int:
        return int(self._bar.n)

    def add(self, extra: int) -> None:
        """More work was found (e.g. a path turned out to be usable)."""
        self._bar.total += max(0, int(extra))
        self._bar.refresh()

    def step(self, label: str, n: int = 1) -> None:
        self._bar.set_postfix_str(label, refresh=False)
        self._bar.update(max(0, min(n, self.total - self.done)))

    def show(self, label: str) -> None:
        self._bar.set_postfix_str(label)

    def close(self) -> None:
        self._bar.close()
