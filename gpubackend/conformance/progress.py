"""The live progress bar of ``gpubackend conformance`` on stderr, through tqdm: the current case
and the running failure count, and a ``FAIL target case`` line per failure. On a terminal it
redraws one line; on a pipe it refreshes at most every 10 s."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class ProgressBar:
    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: tqdm | None = None
        self._failures = 0

    def __call__(self, done: int, total: int, target: str, case: str, failures: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = tqdm(total=total, file=self.stream, leave=not self.tty, dynamic_ncols=self.tty,
                             mininterval=0.05 if self.tty else 10.0, unit="case",
                             bar_format="{l_bar}{bar:24}| {n}/{total} {elapsed} {postfix}")
        if failures > self._failures:
            self._bar.write(f"FAIL {target} {case}", file=self.stream)
        self._failures = failures
        self._bar.total = total
        self._bar.set_postfix_str(f"failures {failures}  {target} {case}", refresh=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
